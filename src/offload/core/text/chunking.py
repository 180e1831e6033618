"""Line-aware chunks of a body, for the full-text index.

A chunk is a run of whole lines (at most ``max_lines`` lines and about ``max_chars``
characters); a single line longer than ``max_chars`` is cut into several chunks that share
its line number. Chunks carry character offsets so the exact text can be re-derived from
the body alone (the index is contentless).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate, count
from operator import add


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
    # Line ends are found once in C; each chunk is then two bisects, not a walk of lines.
    ends = _line_ends(text)
    i, pos = 0, 0
    while i < len(ends):
        j = min(bisect_right(ends, pos + max_chars, lo=i), i + max_lines)
        if j == i:  # this one line is longer than max_chars: pieces share its number
            for cut in range(pos, ends[i], max_chars):
                yield Chunk(i + 1, i + 1, cut, min(cut + max_chars, ends[i]))
            pos, i = ends[i], i + 1
            continue
        yield Chunk(i + 1, j, pos, ends[j - 1])
        pos, i = ends[j - 1], j


# a big text's lines are split a window at a time: never a string per line of all of it
_WINDOW = 1 << 20


def _line_ends(text: str) -> list[int]:
    """The offset after each line of ``text`` (after its "\n", or the text's end for a
    last line without one): cumulative part lengths plus the newlines before them."""
    ends: list[int] = []
    for base in range(0, len(text), _WINDOW):
        parts = text[base : base + _WINDOW].split("\n")
        ends.extend(base + end for end in map(add, accumulate(map(len, parts[:-1])), count(1)))
    if text and not text.endswith("\n"):
        ends.append(len(text))  # a last line without a terminator
    return ends


def count_lines(text: str) -> int:
    """Number of lines, counting a final line without a terminator."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)
