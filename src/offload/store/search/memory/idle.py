"""When a store's in-memory search copies may be let go: no search running, and none for a
while (``search.resident_idle_s``).

A long-running process holds the resident BM25 index, its entry maps and the vector matrix
for as long as it serves; between bursts of use they are memory nobody reads. The store
lets them go once its searches have been quiet for the set time (the next search rebuilds
them, answered the SQL way meanwhile). A search that is running holds them: they are never
let go under it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator


class SearchIdle:
    """Counts the searches running and remembers when the last one ended (thread-safe).
    ``idle_s`` 0: never quiet (the copies are kept)."""

    def __init__(self, idle_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_s = idle_s
        self._clock = clock
        self._lock = threading.Lock()
        self._running = 0
        self._last = clock()
        self._released = True  # nothing held yet: no release owed

    @contextlib.contextmanager
    def searching(self) -> Iterator[None]:
        """Around one search: the copies are not let go while it runs."""
        with self._lock:
            self._running += 1
            self._released = False
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                self._last = self._clock()

    def quiet(self) -> bool:
        """Whether the copies are owed a release: no search running, none for ``idle_s``,
        and none since the last release."""
        with self._lock:
            return (
                self.idle_s > 0
                and not self._released
                and self._running == 0
                and self._clock() - self._last >= self.idle_s
            )

    @contextlib.contextmanager
    def paused(self) -> Iterator[bool]:
        """Hold searches off while the copies are let go; yields whether none is running
        (False: let nothing go). Searches that begin meanwhile wait for the release."""
        with self._lock:
            quiet = self._running == 0
            if quiet:
                self._released = True
            yield quiet
