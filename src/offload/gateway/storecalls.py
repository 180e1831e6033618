"""Store calls the gateway makes, retried through write contention.

A store shared with other processes can stay locked past SQLite's busy timeout under
load; that is contention, not a fault of the upstream whose catalog or response was
being written, so the gateway retries it a few times and, when it still fails, carries
on without the write (logged) instead of failing the upstream or the call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from offload.errors import StoreBusy

log = logging.getLogger("offload.gateway")
T = TypeVar("T")

ATTEMPTS = 4
_PAUSE_S = 0.05  # doubled after each busy attempt


def retry_busy(fn: Callable[[], T], what: str, *, attempts: int = ATTEMPTS) -> T:
    """``fn()``, tried again (with a growing pause) while the store answers busy.

    Blocking: call it from a worker thread. The last StoreBusy is raised when every
    attempt was busy.
    """
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except StoreBusy:
            if attempt == attempts:
                raise
            log.info("store busy during %s (attempt %d of %d); retrying", what, attempt, attempts)
            time.sleep(_PAUSE_S * 2 ** (attempt - 1))
    raise AssertionError("unreachable")  # the loop returns or raises
