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

from offload.core.text.wording import stage_progress

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
            message = stage_progress(stage, done, total, self._size, now - self._started)
        asyncio.run_coroutine_threadsafe(
            self._send(progress, float(len(STAGES) * total), message), self._loop
        )


# makes a call's notifier for an input of so many bytes
MakeNotifier = Callable[[int], Notifier]
