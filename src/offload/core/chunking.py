"""Line-aware chunks of a body, for the full-text index.

A chunk is a run of whole lines (at most ``max_lines`` lines and about ``max_chars``
characters); a single line longer than ``max_chars`` is cut into several chunks that share
its line number. Chunks carry character offsets so the exact text can be re-derived from
the body alone (the index is contentless).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Chunk:
    """One indexed piece: 1-based inclusive line range and [start, end) character offsets."""

    start_line: int
    end_line: int
    start: int
    end: int


def chunk_text(text: str, max_lines: int = 40, max_chars: int = 3000) -> list[Chunk]:
    """Split ``text`` into line-aware chunks (deterministic for the same arguments)."""
    return list(_iter_chunks(text, max(1, max_lines), max(64, max_chars)))


def _iter_chunks(text: str, max_lines: int, max_chars: int) -> Iterator[Chunk]:
    n = len(text)
    pos = 0
    line = 1
    chunk_start, chunk_line, lines_in = 0, 1, 0
    while pos < n:
        nl = text.find("\n", pos)
        line_end = n if nl < 0 else nl + 1
        if line_end - pos > max_chars:
            if lines_in:
                yield Chunk(chunk_line, line - 1, chunk_start, pos)
            for cut in range(pos, line_end, max_chars):
                yield Chunk(line, line, cut, min(cut + max_chars, line_end))
            pos = line_end
            line += 1
            chunk_start, chunk_line, lines_in = pos, line, 0
            continue
        if lines_in and (lines_in >= max_lines or line_end - chunk_start > max_chars):
            yield Chunk(chunk_line, line - 1, chunk_start, pos)
            chunk_start, chunk_line, lines_in = pos, line, 0
        lines_in += 1
        pos = line_end
        line += 1
    if lines_in:
        yield Chunk(chunk_line, line - 1, chunk_start, n)


def count_lines(text: str) -> int:
    """Number of lines, counting a final line without a terminator."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)
