"""Learning a client's own compaction ceiling, per harness.

Some clients compact their history themselves (a lossy summary) when the prompt they are
told about grows past a size of their own. When a session's history shrinks to half or less
between two requests (a prefix break the pipeline classifies as the client's edit), the
proxy records, for that harness (a digest of the system prompt), the wire tokens of the
request before the shrink: the prompt size the client had been told about when it chose to
compact. From then on that harness's wire is kept under it (with a margin), so the proxy's
lossless windowing acts before the client's lossy compaction would. Persisted in the
store's state (namespace ``proxy.harness``), so a restart keeps it and every proxy process
on the same store (a team store's machines) applies it.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import replace

from offload.proxy.rewrite.messages import Message, canonical
from offload.proxy.rewrite.window import Budget
from offload.store.store import Store

NAMESPACE = "proxy.harness"
#: The history must shrink to this share or less of the previous request to count.
SHRINK = 0.5
#: The wire is kept this far under a learned ceiling.
MARGIN = 0.9


def harness_key(head: Sequence[Message]) -> str:
    """The harness a conversation comes from: a digest of its system/developer messages."""
    system = [m for m in head if m.get("role") in ("system", "developer")]
    return hashlib.sha256(canonical(system).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def client_compacted(previous_client: int, client: int) -> bool:
    """Whether a history of ``client`` tokens after one of ``previous_client`` is the
    client's own compaction (it shrank to half or less)."""
    return previous_client > 0 and client <= SHRINK * previous_client


def capped(budget: Budget, limit: int) -> Budget:
    """``budget`` with its ceiling at most ``limit`` and the band under it scaled alike."""
    if limit <= 0 or limit >= budget.ceiling:
        return budget
    scale = limit / budget.ceiling
    high = int(budget.high * scale)
    target = int(budget.target * scale)
    return replace(budget, ceiling=limit, high=high, target=target, bite=max(0, high - target))


class Ceilings:
    """The learned ceilings, cached per harness and checked against the store (thread-safe).

    Each read checks the saved value's version (one indexed read), so what another proxy
    process learned on the same store (another machine on a team store) applies here from
    its next request on.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._known: dict[str, tuple[int, int | None]] = {}  # harness -> (version, tokens)
        self._lock = threading.Lock()

    def get(self, harness: str) -> int | None:
        """The learned ceiling of ``harness`` (wire tokens), None when none was seen."""
        version = self.store.state_version(NAMESPACE, harness)
        with self._lock:
            cached = self._known.get(harness)
        if cached is not None and cached[0] == version:
            return cached[1]
        return self._reload(harness)[1]

    def _reload(self, harness: str) -> tuple[int, int | None]:
        """(version, ceiling) as the store holds them now, cached."""
        saved, version = self.store.get_state_versioned(NAMESPACE, harness)
        value = saved.get("tokens") if isinstance(saved, dict) else None
        tokens = value if isinstance(value, int) and value > 0 else None
        with self._lock:
            self._known[harness] = (version, tokens)
        return version, tokens

    def learn(self, harness: str, tokens: int) -> bool:
        """Record a compaction at ``tokens``; True when it lowers what was known.

        The lower of the saved ceiling and ``tokens`` is saved over the version it was read
        at (compare and swap), read again whenever another process saved in between: of
        ceilings learned at once by several processes the lowest stays, never one that a
        process read before another lowered it.
        """
        if tokens <= 0:
            return False
        while True:  # each lap means another process saved: someone always progresses
            version, current = self._reload(harness)
            if current is not None and current <= tokens:
                return False
            saved = self.store.replace_state(NAMESPACE, harness, {"tokens": int(tokens)}, version)
            if saved:
                with self._lock:
                    self._known[harness] = (saved, int(tokens))
                return True

    def budget(self, harness: str, budget: Budget) -> Budget:
        """``budget`` kept under what ``harness`` is known to compact at."""
        learned = self.get(harness)
        return budget if learned is None else capped(budget, int(learned * MARGIN))
