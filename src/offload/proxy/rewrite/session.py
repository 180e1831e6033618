"""Sessions: what the pipeline remembers about one conversation, in memory and in the store.

The persisted :class:`SessionState` is small and changes only when the frontier moves, so
a steady turn writes nothing; it is enough to rebuild the same wire after a restart.
The in-memory :class:`Live` record keeps the previous request and wire, so a turn that
only appends messages does work proportional to what it appended. It is a cache of the
store's state, valid while the store holds the version it was built from: several proxy
processes (machines) on one store may serve turns of one session in turn.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

from offload.core.lru import Lru
from offload.proxy.rewrite.messages import Message
from offload.proxy.rewrite.stubs.parts import RangeStub
from offload.proxy.rewrite.window import Layout

STATE_NAMESPACE = "proxy.session"
STATE_VERSION = 2
#: The suffix of a session's side record key (state keys are 16 hex characters otherwise).
SIDE = "/side"


@dataclass(frozen=True)
class SessionState:
    """The frontier of one conversation and what proves it still applies."""

    threshold: int  # content tokens above which a middle message is stubbed (set at compaction)
    layout: Layout
    floor: int  # wire tokens right after the last compaction
    mark: int  # how many client messages there were at the last compaction
    range: RangeStub | None
    verified: int  # client messages [0, verified) are covered by ``digest``
    digest: str  # chain digest of those messages (messages.chain)

    @classmethod
    def fresh(cls, threshold: int, head: int) -> SessionState:
        """A conversation nothing has been done to yet."""
        return cls(threshold, Layout.fresh(head), 0, 0, None, 0, "")

    def to_json(self) -> dict[str, Any]:
        """What :meth:`Store.put_state` saves."""
        return {
            "version": STATE_VERSION,
            "threshold": self.threshold,
            "head": self.layout.head,
            "paged": self.layout.paged,
            "stubbed": self.layout.stubbed,
            "forced": sorted(self.layout.forced),
            "floor": self.floor,
            "mark": self.mark,
            "range": None if self.range is None else self.range.to_json(),
            "verified": self.verified,
            "digest": self.digest,
        }

    @classmethod
    def from_json(cls, data: Any) -> SessionState | None:
        """Inverse of :meth:`to_json`; None for anything unusable (an older version)."""
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            return None
        try:
            layout = Layout(
                int(data["head"]),
                int(data["paged"]),
                int(data["stubbed"]),
                frozenset(int(i) for i in data["forced"]),
            )
            rng = data["range"]
            return cls(
                threshold=int(data["threshold"]),
                layout=layout,
                floor=int(data["floor"]),
                mark=int(data["mark"]),
                range=None if rng is None else RangeStub.from_json(rng),
                verified=int(data["verified"]),
                digest=str(data["digest"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


def side_key(session: str) -> str:
    """The state key of ``session``'s side record (see :class:`SideRecord`)."""
    return session + SIDE


@dataclass(frozen=True)
class SideRecord:
    """The newest request of a session that departed from its frontier.

    A harness sends requests beside its conversation that open with the same messages (a
    title or a summary of the task, without tools). Such a request does not extend the
    session's last request, and it is never continued. Saving its state as the session's
    would reset the frontier that the next turn of the conversation needs for a byte-stable
    wire. So a departing request is served on its own state and saved here, and the
    frontier stays. Only a request that continues this record (extends all ``count``
    messages it was made for) shows that the client really moved on (it edited or
    compacted its history): this record then becomes the session's frontier.
    """

    state: SessionState
    count: int  # the departing request's messages
    digest: str  # chain digest of all of them
    learned: int  # wire tokens the client compacted at (a ceiling learned if continued)

    def to_json(self) -> dict[str, Any]:
        """What :meth:`Store.replace_state` saves."""
        return {
            "side": self.state.to_json(),
            "count": self.count,
            "digest": self.digest,
            "learned": self.learned,
        }

    @classmethod
    def from_json(cls, data: Any) -> SideRecord | None:
        """Inverse of :meth:`to_json`; None for anything unusable."""
        if not isinstance(data, dict):
            return None
        state = SessionState.from_json(data.get("side"))
        count, digest, learned = data.get("count"), data.get("digest"), data.get("learned")
        if state is None or not isinstance(count, int) or not isinstance(digest, str):
            return None
        return cls(state, count, digest, learned if isinstance(learned, int) else 0)


@dataclass
class Live:
    """The previous request of a session, kept in memory."""

    state: SessionState
    version: int  # the store's version of ``state`` (store/state.py); 0: never saved
    client: list[Message]
    client_tokens: list[int]
    wire: list[Message]
    wire_tokens: list[int]
    stubs: int  # stub messages on ``wire``
    recalled: tuple[str, ...] = ()  # references in the recall block sent with ``wire``
    learned: int = 0  # of a side record: as :attr:`SideRecord.learned`
    # the request as sent (``wire`` with the recall block and loop note) and its tokens
    sent: list[Message] = field(default_factory=list)
    sent_tokens: list[int] = field(default_factory=list)
    # how many assistant messages come before each client message (phases.turn_counts)
    client_turns: list[int] = field(default_factory=list)


class SessionLocks:
    """One lock per session, made on demand and dropped when nobody holds it."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[str, threading.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._guard = threading.Lock()

    def get(self, session: str) -> threading.Lock:
        """The lock of ``session`` (hold a reference while using it)."""
        with self._guard:
            lock = self._locks.get(session)
            if lock is None:
                lock = threading.Lock()
                self._locks[session] = lock
            return lock


class LiveSessions:
    """A bounded LRU of :class:`Live` records (callers hold the session's lock)."""

    def __init__(self, size: int = 64) -> None:
        self._items: Lru[str, Live] = Lru(size)

    def get(self, session: str) -> Live | None:
        """The record, refreshed as most recently used."""
        return self._items.get(session)

    def put(self, session: str, live: Live) -> None:
        """Remember ``live``, forgetting the least recently used beyond the bound."""
        self._items.put(session, live)

    def items(self) -> list[tuple[str, Live]]:
        """Every record kept, the least recently used first."""
        keys = self._items.keys()  # an Lru is not iterable: its keys under its lock
        kept = ((key, self._items.get(key)) for key in keys)
        return [(key, live) for key, live in kept if live is not None]

    def drop(self, session: str) -> None:
        """Forget one session (after a failure, so no half-built record survives)."""
        self._items.pop(session)
