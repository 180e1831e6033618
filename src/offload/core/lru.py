"""A bounded mapping that forgets what was used least recently: the one cache type the
proxy, the store and the text helpers share.

A cache is bounded by weight. Each item weighs 1 unless the cache was given a ``weigh``
function (a text's characters, say), and putting an item drops the oldest ones until the
total is within the bound again; an item heavier than the whole bound is not kept. A
value's weight must not change while it is cached (values are immutable here).

Every method takes the cache's own lock, so one cache may be shared by threads. A caller
whose two steps must be one (look up, then decide) holds a lock of its own around them.
"""

from __future__ import annotations

import enum
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar, overload

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")


class Missing(enum.Enum):
    """The default to pass :meth:`Lru.get` when None may be a cached value."""

    MISSING = enum.auto()


MISSING = Missing.MISSING


class Lru(Generic[K, V]):
    """Items by key, newest last, their total weight at most ``bound``."""

    __slots__ = ("_items", "_lock", "_weigh", "_weight", "bound")

    def __init__(self, bound: int, weigh: Callable[[V], int] | None = None) -> None:
        if bound < 0:
            raise ValueError("an Lru's bound must be >= 0")
        self.bound = bound
        self._weigh = weigh  # None: each item weighs 1
        self._items: OrderedDict[K, V] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Lru({len(self._items)} items, weight {self._weight} of {self.bound})"

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is cached (without counting as a use)."""
        return key in self._items

    def keys(self) -> list[K]:
        """The keys kept, the least recently used first."""
        with self._lock:
            return list(self._items)

    @property
    def weight(self) -> int:
        """The total weight of the items kept."""
        return self._weight

    @overload
    def get(self, key: K) -> V | None: ...

    @overload
    def get(self, key: K, default: D) -> V | D: ...

    def get(self, key: K, default: object = None) -> object:
        """The value under ``key``, now the newest item; ``default`` when none is kept."""
        with self._lock:
            hit = self._items.get(key, MISSING)
            if hit is MISSING:
                return default
            self._items.move_to_end(key)
            return hit

    def put(self, key: K, value: V) -> bool:
        """Keep ``value`` under ``key`` as the newest item, the oldest going until the total
        is within the bound; False (and ``key`` no longer cached) when ``value`` alone
        weighs more than the bound."""
        with self._lock:
            return self._put(key, value)

    def add(self, key: K, value: V) -> V:
        """The value already under ``key`` (now the newest), else ``value``, kept: what two
        threads that made the same value at once both end up using."""
        with self._lock:
            items = self._items
            if key in items:
                items.move_to_end(key)
                return items[key]
            self._put(key, value)
            return value

    def pop(self, key: K) -> V | None:
        """Forget ``key``; its value, or None when it was not cached."""
        with self._lock:
            return self._drop(key)

    def shrink(self, bound: int) -> None:
        """Drop the oldest items until the total weighs at most ``bound`` (the cache's own
        bound stays: it fills up again as it is used)."""
        with self._lock:
            self._trim(bound)

    def clear(self) -> None:
        """Forget every item."""
        with self._lock:
            self._items.clear()
            self._weight = 0

    def _put(self, key: K, value: V) -> bool:
        weigh, items = self._weigh, self._items
        weight = 1 if weigh is None else weigh(value)
        old = items.pop(key, MISSING)
        if old is not MISSING:
            self._weight -= 1 if weigh is None else weigh(old)
        if weight > self.bound:
            return False
        items[key] = value
        self._weight += weight
        if self._weight > self.bound:
            self._trim(self.bound)
        return True

    def _drop(self, key: K) -> V | None:
        old = self._items.pop(key, MISSING)
        if old is MISSING:
            return None
        weigh = self._weigh
        self._weight -= 1 if weigh is None else weigh(old)
        return old

    def _trim(self, bound: int) -> None:
        items, weigh = self._items, self._weigh
        while items and self._weight > bound:
            _, old = items.popitem(last=False)
            self._weight -= 1 if weigh is None else weigh(old)
