"""Which deferred tools each client has back in its ``tools/list``: per client, bounded.

A search or a read returns deferred tools to the listing of the client that asked, and
only that client. Each client keeps at most ``limit`` of them: activating one more puts
the least recently used (activated or called) back behind search. The listing keeps
activation order, so a client's prompt cache keeps its prefix until an eviction.
Clients are keyed by their connection, held weakly: a client that leaves takes its
activations with it. A client known only by name (a stateless protocol) is a string
key; the most recent ``_NAMED_MAX`` names are kept.
"""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass, field

from offload.core.lru import Lru

_NAMED_MAX = 256


@dataclass
class _Active:
    order: dict[str, None] = field(default_factory=dict)  # listing order (activation)
    used: dict[str, int] = field(default_factory=dict)  # name -> last use (a tick)


@dataclass(frozen=True)
class Change:
    """What one activation did to a client's listing."""

    added: tuple[str, ...] = ()
    evicted: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.evicted)


class Activations:
    """Per-client activated tools, at most ``limit`` each, least recently used out first."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self._clients: weakref.WeakKeyDictionary[object, _Active] = weakref.WeakKeyDictionary()
        self._named: Lru[str, _Active] = Lru(_NAMED_MAX)
        self._tick = itertools.count()

    def _get(self, client: object) -> _Active | None:
        if isinstance(client, str):
            return self._named.get(client)
        return self._clients.get(client)

    def _get_or_add(self, client: object) -> _Active:
        if not isinstance(client, str):
            return self._clients.setdefault(client, _Active())
        return self._named.add(client, _Active())

    def listed(self, client: object) -> tuple[str, ...]:
        """The client's activated tools in listing order."""
        active = self._get(client)
        return tuple(active.order) if active else ()

    def is_active(self, client: object, name: str) -> bool:
        """True when ``name`` is in the client's listing."""
        active = self._get(client)
        return active is not None and name in active.order

    def activate(self, client: object, names: tuple[str, ...]) -> Change:
        """Add ``names`` to the client's listing (each counts as used), evicting as needed."""
        active = self._get_or_add(client)
        added: list[str] = []
        for name in dict.fromkeys(names):
            if name not in active.order:
                added.append(name)
                active.order[name] = None
            active.used[name] = next(self._tick)
        evicted: list[str] = []
        while len(active.order) > self.limit:
            # the least recently used, never one this call just added unless all were
            pool = [n for n in active.order if n not in added] or list(active.order)
            oldest = min(pool, key=active.used.__getitem__)
            del active.order[oldest], active.used[oldest]
            evicted.append(oldest)
        kept = tuple(n for n in added if n in active.order)
        return Change(kept, tuple(evicted))

    def touch(self, client: object, name: str) -> None:
        """A call of ``name`` by the client: it is now its most recently used."""
        active = self._get(client)
        if active is not None and name in active.order:
            active.used[name] = next(self._tick)
