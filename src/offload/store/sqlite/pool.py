"""A store's SQLite connections: a pool of at most ``size``, each lent to one thread at a time.

A long-running process (``offload serve``) runs store calls on worker threads that come and
go, as many at once as its clients ask. A connection per thread would make the open
connections, their file descriptors and their page caches follow the peak thread count.
Here at most ``size`` connections are open at once (created when first needed), whatever
the number of threads: descriptors are bounded by the setting. A quiet process closes the
free ones but one (:meth:`ConnectionPool.shrink_free`): each closed connection hands back
its write-ahead log's descriptor, while SQLite's unix VFS keeps the database file's own
for the next connection to reuse (in WAL mode every open connection holds a lock on that
file, which closing the descriptor would drop), so the database file's descriptors stay
at the peak and reopening takes no new one.

A connection is lent for one call of the store (:meth:`ConnectionPool.enter` and
:meth:`ConnectionPool.leave` around it; nested calls of one thread share it, so a
transaction that spans several statements of a call keeps one connection). A thread that
asks for a connection outside any call (:meth:`ConnectionPool.get` alone) keeps it until
its next call ends, or until it has ended (:meth:`ConnectionPool.release_ended`). A thread
that finds every connection lent waits up to ``wait_s`` for one to come back.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from offload.errors import StoreBusy
from offload.store.backend import Sql

T = TypeVar("T")

# a connection frees what memory it can: its page cache (SQLite only, as the pool is)
SHRINK_MEMORY = Sql("PRAGMA shrink_memory", "SELECT 'ok'", noop=True)


class ConnectionPool:
    """At most ``size`` SQLite connections opened by ``opener``, lent to one thread at a
    time; ``close_one`` runs before each is closed at :meth:`close_all`."""

    def __init__(
        self,
        opener: Callable[[], sqlite3.Connection],
        close_one: Callable[[sqlite3.Connection], None],
        *,
        size: int,
        wait_s: float,
    ) -> None:
        if size < 1:
            raise ValueError(f"a pool holds at least one connection, not {size}")
        self._opener = opener
        self._close_one = close_one
        self.size = size
        self._wait_s = wait_s
        self._local = threading.local()
        self._cond = threading.Condition()
        self._free: list[sqlite3.Connection] = []  # the most recently returned last
        self._lent: dict[sqlite3.Connection, threading.Thread] = {}
        self._opening = 0  # connections being opened now (counted against the size)

    # -- a call's span -------------------------------------------------------------------------

    def enter(self) -> None:
        """A store call begins on this thread (calls nest)."""
        self._local.depth = getattr(self._local, "depth", 0) + 1

    def leave(self) -> None:
        """A store call ends: at the outermost one, this thread's connection goes back to
        the pool, unless a transaction is still open on it (it stays the thread's)."""
        depth = self._local.depth = getattr(self._local, "depth", 1) - 1
        if depth > 0:
            return
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or conn.in_transaction:
            return
        self._local.conn = None
        with self._cond:
            if self._lent.pop(conn, None) is not None:
                self._free.append(conn)
                self._cond.notify()

    @contextlib.contextmanager
    def lending(self) -> Iterator[None]:
        """One store call's span: :meth:`enter`, then :meth:`leave` however it ends."""
        self.enter()
        try:
            yield
        finally:
            self.leave()

    def get(self) -> sqlite3.Connection:
        """The connection lent to this thread (one is taken from the pool, opened if
        fewer than ``size`` are open, or waited for)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._take()
        return conn

    # -- the pool ------------------------------------------------------------------------------

    @property
    def count(self) -> int:
        """Connections open now (lent or free)."""
        with self._cond:
            return len(self._free) + len(self._lent)

    @property
    def lent(self) -> int:
        """Connections lent to a thread now."""
        with self._cond:
            return len(self._lent)

    def release_ended(self) -> int:
        """Take back the connections of threads that have ended (a transaction one left open
        is rolled back); how many came back."""
        with self._cond:
            ended = self._ended(with_transaction=True)
        for conn in ended:  # its thread is gone: nobody else uses it
            if conn.in_transaction:
                conn.rollback()
        with self._cond:
            self._free.extend(ended)
            self._cond.notify(len(ended))
        return len(ended)

    def shrink_free(self, *, keep: int = 1) -> int:
        """What a quiet process does with the connections not lent now: the ``keep`` most
        recently returned free the memory they can (their page cache: ``PRAGMA
        shrink_memory``; each keeps up to ``cache_size``, ~2 MB, of pages it read under
        load, refilled from the file when next read) and the others are closed, so the
        connections, their descriptors of the write-ahead log and their memory come back
        to what an idle process holds (opened again when a burst asks). How many were
        shrunk or closed. The pool's lock is held meanwhile: no thread takes one of them.
        """
        with self._cond:
            handled = len(self._free)
            idle = max(len(self._free) - max(keep, 0), 0)  # the least recently returned
            extra = self._free[:idle]
            del self._free[:idle]
            for conn in self._free:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute(SHRINK_MEMORY)
        for conn in extra:  # no longer in the pool: nobody else can take it
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        return handled

    def close_all(self) -> None:
        """Close every connection (the store is closing)."""
        with self._cond:
            conns = [*self._free, *self._lent]
            self._free.clear()
            self._lent.clear()
        for conn in conns:
            self._close_one(conn)
            conn.close()
        self._local = threading.local()

    def _take(self) -> sqlite3.Connection:
        me = threading.current_thread()
        deadline = time.monotonic() + self._wait_s
        with self._cond:
            while True:
                if self._free:
                    conn = self._free.pop()
                    self._lent[conn] = me
                    return conn
                if len(self._lent) + self._opening < self.size:
                    self._opening += 1
                    break
                if self._reclaim_ended():
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreBusy(
                        f"all {self.size} store connections of this process are in use "
                        f"(waited {self._wait_s:g} s); raise store.connections"
                    )
                self._cond.wait(left)
        try:
            conn = self._opener()
        except BaseException:
            with self._cond:
                self._opening -= 1
                self._cond.notify()
            raise
        with self._cond:
            self._opening -= 1
            self._lent[conn] = me
        return conn

    def _ended(self, *, with_transaction: bool) -> list[sqlite3.Connection]:
        """(under the lock) The connections lent to threads that have ended, no longer
        counted as lent (``with_transaction`` False: only those with no transaction open)."""
        ended = [
            conn
            for conn, thread in self._lent.items()
            if not thread.is_alive() and (with_transaction or not conn.in_transaction)
        ]
        for conn in ended:
            del self._lent[conn]
        return ended

    def _reclaim_ended(self) -> bool:
        """(under the lock) Connections of ended threads with no transaction open go back
        to the free list; whether any did."""
        ended = self._ended(with_transaction=False)
        self._free.extend(ended)
        return bool(ended)


def lend_per_call(pool_of: Callable[[Any], ConnectionPool]) -> Callable[[type[T]], type[T]]:
    """A class decorator: every public method of the class (its own and its bases', but
    ``close``) borrows a connection of the object's pool (``pool_of(self)``) for its span;
    nested calls share it and the outermost gives it back, so the connections open are
    bounded by the pool's size however many threads call the object."""

    def lend(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            with pool_of(self).lending():
                return method(self, *args, **kwargs)

        return call

    def decorate(cls: type[T]) -> type[T]:
        methods = {
            name: value
            for klass in reversed(cls.__mro__[:-1])
            for name, value in vars(klass).items()
            if not name.startswith("_") and name != "close" and inspect.isfunction(value)
        }
        for name, method in methods.items():
            setattr(cls, name, lend(method))
        return cls

    return decorate
