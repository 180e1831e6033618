"""Tool vectors kept in the store, keyed by the embedded text's hash and the model.

Embedding a large catalog's tool views with the contextual model takes tens of seconds on
loaded cores (docs/benchmarks.md, "Session 7 (toolrank)"); a gateway restarting, or a
catalog changing by one tool, would pay it all again. Each vector is saved as store state
(namespace ``tool-vectors:<model id>``, key the sha256 of the text), so only texts never
embedded before are: the same text under the same model always has the same vector.
Saved values are float32 bytes in base64; one of the wrong size is ignored and recomputed.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from offload.core.hashing import text_hash
from offload.errors import StoreError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from offload.gateway.toolsearch import Encoder

log = logging.getLogger("offload.gateway")

NAMESPACE = "tool-vectors"


class StateStore(Protocol):
    """The part of :class:`offload.store.store.Store` this module uses."""

    def state_items(self, namespace: str) -> Iterator[tuple[str, Any]]: ...

    def put_states(self, namespace: str, values: Sequence[tuple[str, Any]]) -> list[int]: ...


def text_key(text: str) -> str:
    """The key a text's vector is saved under (its content hash, core.hashing)."""
    return text_hash(text)


class StoredEncoder:
    """``encoder``'s vectors, read from the store where saved, computed and saved where
    not. A store that cannot save (busy past its retries) costs only the saving."""

    def __init__(self, encoder: Encoder, store: StateStore, model_id: str) -> None:
        self._encoder = encoder
        self._store = store
        self.model_id = model_id
        self.computed = 0  # texts this encoder had to embed (the rest came from the store)

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """One row per text, as the inner encoder gives it."""
        import numpy as np

        namespace = f"{NAMESPACE}:{self.model_id}"
        saved = dict(self._store.state_items(namespace))
        rows: dict[str, NDArray[np.float32]] = {}
        for text in dict.fromkeys(texts):
            value = saved.get(text_key(text))
            if isinstance(value, str):
                rows[text] = np.frombuffer(base64.b64decode(value), dtype="<f4").copy()
        sizes = {len(v) for v in rows.values()}
        fresh = [t for t in dict.fromkeys(texts) if t not in rows]
        if fresh:
            computed = self._encoder.encode(fresh)
            self.computed += len(fresh)
            width = computed.shape[1]
            rows.update(zip(fresh, computed, strict=True))
            self._save(namespace, fresh, computed)
        else:
            width = next(iter(sizes), 0)
        wrong = [t for t in dict.fromkeys(texts) if len(rows[t]) != width]
        if wrong:  # saved by another version of the model: recompute those
            rows.update(zip(wrong, self._encoder.encode(wrong), strict=True))
            self.computed += len(wrong)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.vstack([rows[t] for t in texts]).astype(np.float32)

    def _save(self, namespace: str, texts: Sequence[str], rows: NDArray[np.float32]) -> None:
        packed = [
            (text_key(text), base64.b64encode(row.astype("<f4").tobytes()).decode("ascii"))
            for text, row in zip(texts, rows, strict=True)
        ]
        try:  # one transaction: a catalog's hundreds of vectors cost one commit
            self._store.put_states(namespace, packed)
        except StoreError as exc:
            log.warning("tool vectors not saved (recomputed next time): %s", exc)
