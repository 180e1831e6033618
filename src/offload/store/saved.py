"""Durable counters, small JSON state and additive tallies: the part of the store API
that saves values rather than content (store/state.py, store/tallies.py hold the rows).

:class:`SavedState` is a mixin of :class:`offload.store.store.Store`: kept apart so the
store's own module stays small.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from offload.store import state, tallies
from offload.store.backend import Conn


class SavedState:
    """Counters, versioned JSON state and tallies over the store's connection."""

    clock: Callable[[], float]

    @property
    def conn(self) -> Conn:
        """This thread's connection (the store's)."""
        raise NotImplementedError

    def next_number(self, name: str) -> int:
        """The next value of a durable counter (never reused, also across restarts)."""
        return state.next_number(self.conn, name)

    def get_state(self, namespace: str, key: str) -> Any:
        """A JSON value saved with :meth:`put_state`, or None."""
        return state.get(self.conn, namespace, key)

    def get_state_versioned(self, namespace: str, key: str) -> tuple[Any, int]:
        """A saved JSON value and its version (:mod:`offload.store.state`); (None, 0)."""
        return state.get_versioned(self.conn, namespace, key)

    def state_version(self, namespace: str, key: str) -> int:
        """The version of a saved value (0: none): whether a cached copy is still current."""
        return state.version(self.conn, namespace, key)

    def put_state(self, namespace: str, key: str, value: Any) -> int:
        """Save a JSON-serialisable value under (namespace, key), replacing any old one;
        the version it now has (raised by one in the same statement)."""
        return state.put(self.conn, namespace, key, value, self.clock())

    def put_states(self, namespace: str, values: Sequence[tuple[str, Any]]) -> list[int]:
        """:meth:`put_state` of each (key, value) in one write transaction; their versions."""
        return state.put_many(self.conn, namespace, values, self.clock())

    def replace_state(self, namespace: str, key: str, value: Any, expected: int) -> int:
        """:meth:`put_state` only if the store still holds version ``expected`` (0: none
        saved); the new version, or 0 when another writer saved first and nothing changed
        (:func:`offload.store.state.replace`: a read-modify-write that loses no update)."""
        return state.replace(self.conn, namespace, key, value, self.clock(), expected)

    def state_items(self, namespace: str) -> Iterator[tuple[str, Any]]:
        """Every (key, value) saved in ``namespace``."""
        return state.items(self.conn, namespace)

    def delete_state(self, namespace: str, key: str) -> bool:
        """Remove one saved value; True when it existed."""
        return state.delete(self.conn, namespace, key)

    def prune_state(self, namespace: str, users: str) -> int:
        """Delete the values of ``namespace`` that no value of ``users`` lists under
        ``"keys"`` (:func:`offload.store.state.prune`); how many went."""
        return state.prune(self.conn, namespace, users)

    def add_tally(self, namespace: str, key: str, amounts: Mapping[str, int]) -> dict[str, int]:
        """Add ``amounts`` (name -> how much) to the counters of (namespace, key); every
        counter of that key after it. Additive: processes counting at once lose nothing
        (:mod:`offload.store.tallies`)."""
        return tallies.add(self.conn, namespace, key, amounts)

    def tallies(self, namespace: str) -> dict[str, dict[str, int]]:
        """Every counter of ``namespace``: key -> name -> value."""
        return tallies.read(self.conn, namespace)

    def delete_tallies(self, namespace: str, key: str) -> bool:
        """Remove the counters of (namespace, key); True when there were any."""
        return tallies.delete(self.conn, namespace, key)
