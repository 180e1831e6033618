"""Tool vectors kept in the store, keyed by the embedded text's hash and the model.

Embedding a large catalog's tool views with the contextual model takes tens of seconds on
loaded cores (docs/benchmarks/gateway.md, "Tool search"); a gateway restarting, or a
catalog changing by one tool, would pay it all again. Each vector is saved as store state
(namespace ``tool-vectors:<model id>``, key the sha256 of the text), so only texts never
embedded before are: the same text under the same model always has the same vector.
Saved values are float32 bytes in base64; one of the wrong size is ignored and recomputed.

Vectors of tools no catalog lists any more are pruned, but never one that another gateway
on the same store (another process, another machine) still uses: each gateway records the
keys its catalog uses (namespace ``tool-vectors-use:<model id>``, key the gateway's own id,
with its machine and process id) *before* it reads or saves vectors, and the prune deletes,
in one write transaction, only what no record lists (``Store.prune_state``). A gateway
removes its record when it stops; the record of one that died on this machine is dropped
(its process no longer runs); one of another machine is that machine's to judge, so its
vectors stay.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from offload.core.hashing import text_hash
from offload.errors import StoreError
from offload.store.life.lifecycle import machine, pid_alive

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from offload.gateway.toolsearch import Encoder

log = logging.getLogger("offload.gateway")

NAMESPACE = "tool-vectors"
USERS = "tool-vectors-use"


class StateStore(Protocol):
    """The part of :class:`offload.store.store.Store` this module uses."""

    def state_items(self, namespace: str) -> Iterator[tuple[str, Any]]: ...

    def put_state(self, namespace: str, key: str, value: Any) -> int: ...

    def put_states(self, namespace: str, values: Sequence[tuple[str, Any]]) -> list[int]: ...

    def delete_state(self, namespace: str, key: str) -> bool: ...

    def prune_state(self, namespace: str, users: str) -> int: ...


class VectorUser:
    """One gateway's records of the saved vectors its catalog uses (one per model).

    Thread-safe: the index is strengthened in background threads, and a record claimed
    after :meth:`release` would outlive the gateway, so none is claimed after it.
    """

    def __init__(self, store: StateStore, user: str | None = None) -> None:
        self._store = store
        self.id = user or f"{machine()}:{os.getpid()}:{os.urandom(4).hex()}"
        self._lock = threading.Lock()
        self._models: set[str] = set()
        self._released = False

    def claim(self, model_id: str, keys: list[str]) -> bool:
        """Record ``keys`` as this gateway's; False when released or the store refused."""
        record = {"keys": keys, "host": machine(), "pid": os.getpid()}
        with self._lock:
            if self._released:
                return False
            try:
                self._store.put_state(f"{USERS}:{model_id}", self.id, record)
            except StoreError as exc:
                log.warning("tool vector use not recorded (nothing pruned): %s", exc)
                return False
            self._models.add(model_id)
            return True

    def release(self) -> None:
        """Remove every record (the gateway stops): its vectors may be pruned from then on."""
        with self._lock:
            self._released = True
            for model_id in sorted(self._models):
                try:
                    self._store.delete_state(f"{USERS}:{model_id}", self.id)
                except StoreError as exc:
                    log.warning("tool vector use not released (kept until pruned): %s", exc)


def _dead(value: Any) -> bool:
    """Whether a use record is of a process of this machine that no longer runs."""
    if not isinstance(value, dict) or value.get("host") != machine():
        return False
    pid = value.get("pid")
    return isinstance(pid, int) and not pid_alive(pid)


def text_key(text: str) -> str:
    """The key a text's vector is saved under (its content hash, core.hashing)."""
    return text_hash(text)


class StoredEncoder:
    """``encoder``'s vectors, read from the store where saved, computed and saved where
    not. A store that cannot save (busy past its retries) costs only the saving."""

    def __init__(
        self, encoder: Encoder, store: StateStore, model_id: str, user: VectorUser | None = None
    ) -> None:
        self._encoder = encoder
        self._store = store
        self.model_id = model_id
        # the gateway whose catalog these texts are: its record keeps them from the prune
        # (None: nothing recorded, nothing pruned)
        self.user = user
        self.computed = 0  # texts this encoder had to embed (the rest came from the store)
        self.pruned = 0  # vectors of texts no gateway uses any more, deleted by the last encode

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """One row per text, as the inner encoder gives it."""
        import numpy as np

        namespace = f"{NAMESPACE}:{self.model_id}"
        claimed = self.user is not None and self._claim(texts)
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
        if claimed:
            self._prune(namespace)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.vstack([rows[t] for t in texts]).astype(np.float32)

    def _claim(self, texts: Sequence[str]) -> bool:
        """Record the keys of ``texts`` as this gateway's (before anything is read, so a
        prune running meanwhile keeps them); False when nothing was recorded."""
        assert self.user is not None
        return self.user.claim(self.model_id, sorted({text_key(t) for t in texts}))

    def _prune(self, namespace: str) -> None:
        """Delete the vectors no live gateway's record lists (dead records of this machine
        first)."""
        users = f"{USERS}:{self.model_id}"
        try:
            for key, value in list(self._store.state_items(users)):
                if self.user is not None and key != self.user.id and _dead(value):
                    self._store.delete_state(users, key)
            self.pruned = self._store.prune_state(namespace, users)
        except StoreError as exc:
            log.warning("tool vectors not pruned (tried again next time): %s", exc)

    def _save(self, namespace: str, texts: Sequence[str], rows: NDArray[np.float32]) -> None:
        packed = [
            (text_key(text), base64.b64encode(row.astype("<f4").tobytes()).decode("ascii"))
            for text, row in zip(texts, rows, strict=True)
        ]
        try:  # one transaction: a catalog's hundreds of vectors cost one commit
            self._store.put_states(namespace, packed)
        except StoreError as exc:
            log.warning("tool vectors not saved (recomputed next time): %s", exc)
