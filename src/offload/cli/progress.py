"""Progress on stderr for long work, on a terminal (or when asked), never on stdout.

:class:`Bar` when the amount of work is known (import, export, doctor, reindex, replay,
models bench); :class:`Meter` for a big ``add``: each stage's percentage and rate.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from offload.core.text.wording import stage_progress


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


class Meter:
    """A big put's progress (``Store.put(progress=...)``): the stage, its percentage, MB done
    of MB in all and the rate, on stderr. On a terminal one line redrawn at most ten times a
    second and cleared at the end; elsewhere (``--progress`` into a log) a line per update,
    at most one a second and each stage's last. Characters are shown as their share of the
    input's ``size`` in bytes."""

    def __init__(
        self, label: str, size: int, stream: TextIO | None = None, *, enabled: bool | None = None
    ) -> None:
        self.label = label
        self.size = size
        self.stream = stream or sys.stderr
        self.terminal = self.stream.isatty()
        self.enabled = self.terminal if enabled is None else enabled
        self._stage = ""
        self._started = 0.0
        self._last = 0.0
        self._drawn = 0

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if stage != self._stage:
            self._stage, self._started, self._last = stage, now, 0.0
        if done < total and now - self._last < (0.1 if self.terminal else 1.0):
            return
        self._last = now
        self.stream.write(self.line(stage, done, total, now - self._started))
        self.stream.flush()

    def line(self, stage: str, done: int, total: int, elapsed: float) -> str:
        """One update: ``adding big.log: analysing  42%  21.0/50.0 MB  3.2 MB/s``."""
        text = f"{self.label}: {stage_progress(stage, done, total, self.size, elapsed)}"
        if not self.terminal:
            return text + "\n"
        self._drawn = max(self._drawn, len(text))
        return "\r" + text.ljust(self._drawn)

    def close(self) -> None:
        """Clear a terminal's line (the command's own output follows)."""
        if self.enabled and self.terminal and self._drawn:
            self.stream.write("\r" + " " * self._drawn + "\r")
            self.stream.flush()


def size_label(n_bytes: int) -> str:
    """``12.3 MB``-style size for progress labels."""
    size = float(n_bytes)
    for unit in ("B", "KB", "MB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"
