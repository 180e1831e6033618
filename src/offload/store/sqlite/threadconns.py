"""A SQLite connection per thread that uses the store, closed once that thread has ended.

A long-running process (``offload serve``) runs store calls on worker threads that come
and go (anyio stops a worker that idled 10 s at its next call); a connection kept until
the store closes would outlive its thread, so every burst of new workers would add a
connection, its file descriptors and its page cache for good. Here a connection lives as
long as its thread: whenever a thread opens one, and whenever :meth:`release_ended` is
called (``offload serve`` calls it every few seconds), the connections of threads that have
ended are closed. Open connections are therefore bounded by the threads alive at once that
used the store (a thread pool's size, plus the few threads of their own).

The thread-local connection stays the thread's for all of its calls, so a transaction that
spans several statements of one call keeps one connection.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable


class ThreadConnections:
    """Per-thread SQLite connections opened by ``opener``; ``close_one`` runs before each
    is closed at :meth:`close_all` (not for those of ended threads)."""

    def __init__(
        self,
        opener: Callable[[], sqlite3.Connection],
        close_one: Callable[[sqlite3.Connection], None],
    ) -> None:
        self._opener = opener
        self._close_one = close_one
        self._local = threading.local()
        self._lock = threading.Lock()
        # each open connection with the thread that owns it
        self._open: list[tuple[threading.Thread, sqlite3.Connection]] = []

    def get(self) -> sqlite3.Connection:
        """This thread's connection (opened on its first use)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            self.release_ended()
            conn = self._opener()
            self._local.conn = conn
            with self._lock:
                self._open.append((threading.current_thread(), conn))
        return conn

    @property
    def count(self) -> int:
        """Connections open now."""
        with self._lock:
            return len(self._open)

    def release_ended(self) -> int:
        """Close the connections of threads that have ended; how many were closed."""
        with self._lock:
            ended = [conn for thread, conn in self._open if not thread.is_alive()]
            self._open = [(t, c) for t, c in self._open if t.is_alive()]
        for conn in ended:  # its thread is gone: nobody else uses it
            conn.close()
        return len(ended)

    def close_all(self) -> None:
        """Close every connection (the store is closing)."""
        with self._lock:
            conns = [conn for _thread, conn in self._open]
            self._open.clear()
        for conn in conns:
            self._close_one(conn)
            conn.close()
        self._local = threading.local()
