"""Progress of a long tool call, sent to the client as MCP ``notifications/progress``.

A client that wants to hear it puts a ``progressToken`` in the request's ``_meta`` (an
in-process client passes a callback); the tool's work (a big ``offload_path``:
``Store.put(progress=...)``) then reports each stage, its percentage and its rate. The work runs on a worker thread; the notifications are sent
from the server's event loop, at most every :data:`EVERY_S` (and each stage's end), with a
progress that only grows, as the protocol asks: the analysis counts for the first half of
the total and the write for the second.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

# at most one notification this often (and at the end of each stage)
EVERY_S = 0.5
# the stages of a big put, in order (store/write/index.py's PutProgress)
STAGES = ("analysing", "writing")

Send = Callable[[float, float, str], Coroutine[Any, Any, None]]


class Notifier:
    """A put's ``progress(stage, done, total)`` callback (thread-safe) that sends each update
    through ``send(progress, total, message)`` on ``loop``. ``size`` is the input's size in
    bytes: characters are shown as their share of it, as ``offload add --progress`` does."""

    def __init__(
        self,
        send: Send,
        loop: asyncio.AbstractEventLoop,
        *,
        size: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._send = send
        self._loop = loop
        self._size = size
        self._clock = clock
        self._lock = threading.Lock()
        self._stage = ""
        self._started = 0.0
        self._last = -EVERY_S
        self._sent = -1.0
        self.sent = 0  # notifications handed to the loop

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = self._clock()
        with self._lock:
            if stage != self._stage:
                self._stage, self._started, self._last = stage, now, -EVERY_S
            if done < total and now - self._last < EVERY_S:
                return
            step = STAGES.index(stage) if stage in STAGES else 0
            total = max(total, 1)
            progress = (step + min(done, total) / total) * total
            if progress <= self._sent:  # the protocol's progress only grows
                return
            self._last, self._sent = now, progress
            self.sent += 1
            message = self.line(stage, done, total, now - self._started)
        asyncio.run_coroutine_threadsafe(
            self._send(progress, float(len(STAGES) * total), message), self._loop
        )

    def line(self, stage: str, done: int, total: int, elapsed: float) -> str:
        """``analysing 57% 28.5/50.0 MB 1.7 MB/s``: the stage's share, in MB of the input."""
        share = min(done, total) / total
        mb_done, mb_all = share * self._size / 1e6, self._size / 1e6
        rate = f" {mb_done / elapsed:.1f} MB/s" if elapsed > 0 else ""
        return f"{stage} {int(share * 100)}% {mb_done:.1f}/{mb_all:.1f} MB{rate}"


# makes a call's notifier for an input of so many bytes
MakeNotifier = Callable[[int], Notifier]
