"""A copy of some of a store's rows held in memory: built in a thread of its own, brought up
to date before each search, dropped back to SQL whenever it cannot be.

Shared by the chunk -> entry map (store/search/memory/entrymap.py) and the entries' filter and
ranking columns (store/search/memory/entrykeys.py), on both backends. Each supplies how to read the whole copy
and how to bring a held one up to date (None: it cannot prove the copy fresh); this class
owns the lifecycle: the first ask starts a build and is answered None (the caller takes the
SQL way), so is every ask until the build is done; a failed refresh drops the copy and
starts a rebuild; a failed build is not retried for :data:`RETRY_S` seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from offload.store.backend import Conn

# after a build failed on an error, how long searches stay on the SQL path
RETRY_S = 30.0

_log = logging.getLogger("offload.store")

T = TypeVar("T")
# a statement and its parameters
Read = tuple[str, tuple[Any, ...]]


class HeldCopy(Generic[T]):
    """One store's copy of type ``T`` (thread-safe). ``connect`` opens the build's own
    connection; ``errors`` are the failures of a read that send the caller the SQL way
    instead."""

    def __init__(
        self,
        connect: Callable[[], Conn],
        *,
        name: str,
        read_all: Callable[[Conn], T],
        read_since: Callable[[Conn, T], T | None],
        errors: tuple[type[Exception], ...],
        pg_next_read: Callable[[T], Read] | None = None,
    ) -> None:
        self.name = name
        self._connect = connect
        self._read_all = read_all
        self._read_since = read_since
        self._pg_next_read = pg_next_read
        self._errors = errors
        self._build_errors: tuple[type[Exception], ...] = (*errors, MemoryError)
        self._lock = threading.Lock()
        self._held: T | None = None
        self._building = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._retry_at = 0.0  # monotonic time: no build before it (the last one failed)
        # set whenever a build finishes: tests and the bench wait on it
        self.built = threading.Event()

    def current(self, conn: Conn) -> T | None:
        """The copy brought up to date with what ``conn`` sees, or None (not built yet,
        rebuilding, or an error reading it): the caller takes the SQL way."""
        if self._closed:
            return None
        held = self._held
        if held is None:
            self.start()
            return None
        try:
            fresh = self._read_since(conn, held)
        except self._errors as exc:
            _log.debug("resident %s: %s; the SQL way", self.name, exc)
            fresh = None
        with self._lock:
            if self._held is held:
                self._held = fresh
        if fresh is None:
            self.start()
        return fresh

    def pg_next_read(self) -> Read | None:
        """PostgreSQL: the statement :meth:`current` would run now to refresh the copy,
        with its parameters (None: nothing held)."""
        held = self._held
        if held is None or self._closed or self._pg_next_read is None:
            return None
        return self._pg_next_read(held)

    def latest(self) -> T | None:
        """The copy as the last refresh left it (this search's, or a later one's), or None:
        a later step of a search that took :meth:`current` reads it again here."""
        return self._held

    def start(self) -> None:
        """Start a build in the background unless one is running or the copy is held."""
        with self._lock:
            if self._building or self._closed or self._held is not None:
                return
            if time.monotonic() < self._retry_at:
                return
            self._building = True
            self.built.clear()
            self._thread = threading.Thread(
                target=self._build, name=f"offload-{self.name}", daemon=True
            )
            self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a build started (by a search) to finish; True at once when none was."""
        with self._lock:
            started = self._thread is not None
        return not started or self.built.wait(timeout)

    def release(self) -> None:
        """Let go of the copy (the next :meth:`current` starts a rebuild)."""
        with self._lock:
            self._held = None

    def close(self) -> None:
        """Drop the copy (a build in progress is waited for)."""
        with self._lock:
            self._closed, self._held, thread = True, None, self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _build(self) -> None:
        conn: Conn | None = None
        try:
            conn = self._connect()
            built = self._read_all(conn)
            with self._lock:
                if not self._closed:
                    self._held = built
        except self._build_errors as exc:
            _log.debug("resident %s not built: %s", self.name, exc)
            self._retry_at = time.monotonic() + RETRY_S
        finally:
            close = getattr(conn, "close", None)
            if close is not None:
                close()
            with self._lock:
                self._building = False
            self.built.set()
