"""A small progress bar on stderr for long work (import, doctor, reindex)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Bar:
    """Redraws at most ten times a second, and only on a terminal."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        width = 30
        filled = width * done // total if total else width
        pct = 100 * done // total if total else 100
        self.stream.write(
            f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {pct:3d}% {done}/{total}"
        )
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()
