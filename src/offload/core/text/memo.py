"""The caches of text analysis (pure): a run or word's analysis kept only once it has been
met twice.

Analysing a run costs microseconds; keeping it costs ~250 bytes a cache. Text that a
long-running process analyses is mostly of two kinds: words and identifiers that recur
(natural text, code, the keys of a JSON body), and runs met once and never again (the ids,
timestamps and numbered rows of logs and tool outputs). A cache that keeps every run it
meets fills with the second kind: a soak of ``offload serve`` (docs/benchmarks.md#soak)
held ~22 analyses a stored tool output in each of eight caches, ~25 MB after 2,000 outputs
and ~55 MB at their bounds, none of them ever read again.

So a cache here admits a key the second time it is asked to keep it within a window
(:class:`SeenTwice`, the "doorkeeper" of frequency-based cache admission): a run met once
is analysed and not kept; a run that recurs is analysed twice, then kept. The window is a
table of marks by the key's hash, cleared after a set number of first sightings, so it is
bounded too; a hash shared by two keys admits the second early, which costs only memory.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# a table of 2**18 one-bit marks (32 KiB) cleared after 2**13 first sightings: at most
# one mark in 32 set, so at most ~3 % of the keys met once are kept by a shared mark (with
# one in eight, ~7.5 % of a soak's once-met runs were kept: the caches still filled)
SLOTS = 1 << 18
WINDOW = 1 << 13


class SeenTwice:
    """Says whether a key has been offered before, within the last ``window`` first
    sightings; thread-safe enough for a cache (two threads racing lose or add a mark: a
    key kept one sighting early or late, never a wrong value)."""

    __slots__ = ("_hash", "_marks", "_mask", "_seen", "_window")

    def __init__(
        self,
        slots: int = SLOTS,
        window: int = WINDOW,
        hash_of: Callable[[object], int] = hash,
    ) -> None:
        if slots < 1 or slots & (slots - 1) or window < 1:
            raise ValueError("slots must be a power of two and window at least 1")
        self._seen = bytearray(slots // 8 or 1)  # a bit a slot
        self._mask = slots - 1
        self._window = window
        self._marks = 0
        self._hash = hash_of

    def admit(self, key: object) -> bool:
        """True when ``key`` was offered before within the window; else marks it."""
        seen = self._seen
        at = self._hash(key) & self._mask
        bit = 1 << (at & 7)
        if seen[at >> 3] & bit:
            return True
        seen[at >> 3] |= bit
        self._marks += 1
        if self._marks >= self._window:
            self.clear()
        return False

    def clear(self) -> None:
        """Forget every mark."""
        self._seen[:] = bytes(len(self._seen))
        self._marks = 0


class Memo(Generic[K, V]):
    """A dict cache of at most ``max_items`` that keeps a key on its second offer
    (:class:`SeenTwice`); a full one is replaced, not cleared, so a thread reading the old
    dict still finds what it held."""

    __slots__ = ("_door", "_max", "data")

    def __init__(self, max_items: int, door: SeenTwice | None = None) -> None:
        self.data: dict[K, V] = {}
        self._max = max_items
        self._door = SeenTwice() if door is None else door

    def __len__(self) -> int:
        return len(self.data)

    def get(self, key: K) -> V | None:
        """The value kept under ``key``, or None."""
        return self.data.get(key)

    def keep(self, key: K, value: V) -> bool:
        """Keep ``value`` under ``key`` if the key has been offered before; whether kept."""
        if not self._door.admit(key):
            return False
        data = self.data
        if len(data) >= self._max:
            data = self.data = {}
        data[key] = value
        return True

    def holding(self, keys: set[K], analyse: Callable[[K], V]) -> dict[K, V]:
        """A dict with a value for every one of ``keys`` (for lookups done in C: ``map``
        over a text's runs): the cache itself when it holds them all, else the keys'
        values alone, the missing ones analysed now and those offered before kept."""
        data = self.data
        missing = keys.difference(data)  # a set's difference looks each key up
        if not missing:
            return data
        fresh = {key: analyse(key) for key in missing}
        admitted = [key for key in missing if self._door.admit(key)]
        kept = data
        if admitted:
            if len(kept) + len(admitted) > self._max:
                kept = self.data = {}
            kept.update((key, fresh[key]) for key in admitted)
        if kept is data and len(admitted) == len(missing):
            return data
        hits = keys.difference(fresh)
        fresh.update(zip(hits, map(data.__getitem__, hits), strict=True))
        return fresh

    def clear(self) -> None:
        """Forget every value and every mark."""
        self.data = {}
        self._door.clear()
