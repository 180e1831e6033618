"""Reading a body by line ranges: numbered windows that page through it byte-exactly.

Line rule (shared with ``core.text.chunking`` so search hits and reads agree): a line ends at
``"\\n"``; a ``"\\r\\n"`` pair is one terminator and is not part of the content; a lone
``"\\r"`` and other Unicode separators are content. A last line without a terminator still
counts; an empty text has no lines. Line numbers therefore match ``grep -n`` and editors.

A window renders rows ``<label>\\t<content>\\n``. The label is the 1-based line number,
right-aligned to the width of the total line count; a line longer than ``max_line_chars``
characters is cut into parts labelled ``N-M`` (M is the 1-based part). A continuation
offset is ``"61"`` (a whole line) or ``"12-3"`` (resume inside line 12 at part 3; parts
depend on ``max_line_chars``, so resume with the same setting).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate, count
from operator import add

from offload.errors import InvalidInput

# at most 18 digits each: ``int`` refuses a run past 4,300 and no body has more lines
_OFFSET = re.compile(r"\s*(\d{1,18})(?:-(\d{1,18}))?\s*")


@dataclass(frozen=True)
class LineWindow:
    """One page of numbered lines.

    ``first_line``/``last_line`` are the lines shown (wholly or partly; 0 for an empty
    text). ``next_offset`` is where to continue (``None`` once the end was reached) and
    ``remaining_lines`` counts the lines from there to the end, a partly shown line included.
    """

    text: str
    first_line: int
    last_line: int
    total_lines: int
    next_offset: str | None
    remaining_lines: int


def split_lines(text: str) -> list[str]:
    """The raw lines of ``text``, each with its terminator; they concatenate back to it."""
    if not text:
        return []
    pieces = text.split("\n")
    raw = [piece + "\n" for piece in pieces[:-1]]
    if pieces[-1]:
        raw.append(pieces[-1])
    return raw


class _Lines:
    """Raw lines by index without splitting the whole text: paging a 1 MB body reads only
    the lines shown. Line starts are computed once per text in C and memoised."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = _line_starts(text)

    def __len__(self) -> int:
        return len(self.starts) - 1

    def __getitem__(self, index: int) -> str:
        return self.text[self.starts[index] : self.starts[index + 1]]


@lru_cache(maxsize=8)
def _line_starts(text: str) -> tuple[int, ...]:
    # start of each line, then len(text): cumulative piece lengths plus the "\n"s before
    pieces = text.split("\n")
    starts = [0, *map(add, accumulate(map(len, pieces[:-1])), count(1))]
    if pieces[-1] or not text:
        starts.append(len(text))
    return tuple(starts) if text else (0,)


def line_count(text: str) -> int:
    """Number of lines in ``text`` under the module's line rule."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def line_content(raw: str) -> str:
    """A raw line without its terminator (``"\\r\\n"`` or ``"\\n"``)."""
    if raw.endswith("\r\n"):
        return raw[:-2]
    if raw.endswith("\n"):
        return raw[:-1]
    return raw


def parse_offset(value: int | str) -> tuple[int, int]:
    """Parse ``61``, ``"61"`` or ``"12-3"`` into ``(line, part)``, both 1-based."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidInput(
            f'offset must be a line number like 61 or "12-3", got {type(value).__name__}'
        )
    if isinstance(value, int):
        if value < 1:
            raise InvalidInput(f"offset must be a line number of 1 or more, got {value}")
        return value, 1
    match = _OFFSET.fullmatch(value)
    if match is None:
        shown = repr(value) if len(value) <= 40 else repr(value[:40]) + "…"
        raise InvalidInput(
            f'offset must be a line number like "61" or a line and part like "12-3", got {shown}'
        )
    line = int(match.group(1))
    part = int(match.group(2)) if match.group(2) is not None else 1
    if line < 1 or part < 1:
        raise InvalidInput(f"offset lines and parts count from 1, got {value!r}")
    return line, part


def _parts(content: str, max_line_chars: int) -> list[str]:
    if len(content) <= max_line_chars:
        return [content]
    return [content[i : i + max_line_chars] for i in range(0, len(content), max_line_chars)]


def _row(label: str, width: int, chunk: str) -> str:
    return f"{label:>{width}}\t{chunk}\n"


def _at_least_one(**bounds: int) -> None:
    for name, value in bounds.items():
        if value < 1:
            raise InvalidInput(f"{name} must be 1 or more, got {value}")


def _check_start(raw: _Lines, line: int, part: int, max_line_chars: int) -> None:
    total = len(raw)
    if line > total:
        raise InvalidInput(f"offset {line} is past the end ({total} lines)")
    first_parts = _parts(line_content(raw[line - 1]), max_line_chars)
    if part > len(first_parts):
        raise InvalidInput(
            f'offset "{line}-{part}" is past the end of line {line} '
            f"({len(first_parts)} parts of {max_line_chars} characters)"
        )


def _line_rows(
    parts: list[str], line: int, first_part: int, width: int, *, room: int, first: bool
) -> tuple[list[str], int, bool]:
    """The rows of one line's parts from ``first_part`` that fit in ``room`` bytes, their
    size, and whether every remaining part fit. The window's ``first`` line takes one part
    even past the room, so paging always progresses."""
    labelled = len(parts) > 1
    rows: list[str] = []
    used = 0
    for index in range(first_part, len(parts) + 1):
        label = f"{line}-{index}" if labelled else str(line)
        row = _row(label, width, parts[index - 1])
        size = len(row.encode("utf-8", "surrogatepass"))
        if used + size > room:
            if first and not rows:
                rows.append(row)
                used += size
            return rows, used, False
        rows.append(row)
        used += size
    return rows, used, True


def read_lines(
    text: str,
    offset: int | str = 1,
    limit: int = 200,
    cap_bytes: int = 65536,
    max_line_chars: int = 2000,
) -> LineWindow:
    """Render up to ``limit`` lines of ``text`` from ``offset`` as numbered rows.

    Stops before a whole line that would push the UTF-8 output past ``cap_bytes``. A window
    always shows at least one part, so paging always progresses; a line whose parts alone
    exceed the cap is shown part by part and ``next_offset`` names the next part.
    """
    _at_least_one(limit=limit, cap_bytes=cap_bytes, max_line_chars=max_line_chars)
    line, part = parse_offset(offset)
    raw = _Lines(text)
    total = len(raw)
    if total == 0 and (line, part) == (1, 1):
        return LineWindow("", 0, 0, 0, None, 0)
    _check_start(raw, line, part, max_line_chars)
    width = len(str(total))
    rows: list[str] = []
    used = 0
    cur_line, cur_part = line, part
    last_line = line
    lines_started = 0
    while cur_line <= total and lines_started < limit:
        parts = _parts(line_content(raw[cur_line - 1]), max_line_chars)
        pending, pending_bytes, fits = _line_rows(
            parts, cur_line, cur_part, width, room=cap_bytes - used, first=not rows
        )
        if not fits and rows:
            break  # the next whole line would pass the cap: stop before it
        rows.extend(pending)
        used += pending_bytes
        last_line = cur_line
        lines_started += 1
        shown_until = cur_part + len(pending) - 1
        if shown_until < len(parts):
            cur_part = shown_until + 1
            break
        cur_line, cur_part = cur_line + 1, 1
        if not fits:
            break

    if cur_line > total:
        next_offset: str | None = None
        remaining = 0
    else:
        next_offset = str(cur_line) if cur_part == 1 else f"{cur_line}-{cur_part}"
        remaining = total - cur_line + 1
    return LineWindow("".join(rows), line, last_line, total, next_offset, remaining)


def read_lines_within(
    text: str,
    offset: int | str,
    *,
    max_tokens: int,
    count: Callable[[str], int],
    limit: int = 200,
    cap_bytes: int = 65536,
    max_line_chars: int = 2000,
) -> LineWindow:
    """:func:`read_lines`, ending before the row that would take the window past
    ``max_tokens`` as ``count`` measures it (at least one row is always shown).

    The rows that fit, each counted once, give a byte cap; the window read under it is
    counted again (a tokenizer may merge across a row boundary) and gives up its last row
    while still over, so the work is bounded by the rows of one window.
    """
    if max_tokens < 1:
        raise InvalidInput(f"max_tokens must be 1 or more, got {max_tokens}")
    window = read_lines(text, offset, limit, cap_bytes, max_line_chars)
    if count(window.text) <= max_tokens:
        return window
    used = budget = 0
    for row in window.text.splitlines(keepends=True):
        used += count(row)
        if used > max_tokens:
            break
        budget += _size(row)
    while True:
        window = read_lines(text, offset, limit, max(1, min(cap_bytes, budget)), max_line_chars)
        rows = window.text.splitlines(keepends=True)
        if len(rows) <= 1 or count(window.text) <= max_tokens:
            return window
        budget = _size(window.text) - _size(rows[-1])


def _size(row: str) -> int:
    return len(row.encode("utf-8", "surrogatepass"))


def continuation(window: LineWindow, call: str = "") -> str:
    """The trailer after a window: ``[173 more lines — continue with offset="61"]``.

    With ``call`` (the caller's own, e.g. ``IndexRead(label="x", offset="61")``) the trailer
    reads ``[173 more lines — continue with IndexRead(label="x", offset="61")]``. Returns
    ``""`` when the window reached the end.
    """
    if window.next_offset is None:
        return ""
    count = window.remaining_lines
    noun = "line" if count == 1 else "lines"
    how = call if call else f'offset="{window.next_offset}"'
    return f"[{count} more {noun} — continue with {how}]"


def raw_lines(text: str, first: int, last: int) -> str:
    """The exact original text of lines ``first``..``last`` (inclusive, with terminators).

    ``first == last + 1`` is an empty range and gives ``""``.
    """
    total = line_count(text)
    if first < 1 or last > total or first > last + 1:
        raise InvalidInput(f"line range {first}..{last} is outside the text ({total} lines)")
    if first > last:
        return ""
    start = 0
    for _ in range(first - 1):
        start = text.index("\n", start) + 1
    end = start
    for _ in range(last - first + 1):
        nl = text.find("\n", end)
        end = len(text) if nl < 0 else nl + 1
    return text[start:end]


@dataclass(frozen=True)
class DroppedLine:
    """A line :class:`StreamLines` dropped for its length: its size in bytes (without its
    ``"\\n"``) and its first and last :data:`KEPT_ENDS` bytes, which may say what it was."""

    size: int
    head: bytes
    tail: bytes


#: How many bytes of each end of a dropped line are kept.
KEPT_ENDS = 512


class StreamLines:
    """Bytes arriving in chunks, split at ``"\\n"`` into whole lines, in time linear in
    their length and memory bounded by ``max_bytes``: each chunk is scanned once, a line
    still open at a chunk's end is kept as parts and joined once when it ends, and a line
    growing past ``max_bytes`` is dropped to its end (:meth:`feed` gives a
    :class:`DroppedLine` in its place, never the line)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._parts: list[bytes] = []
        self._size = 0
        self._head = b""  # of a line being dropped: its first bytes
        self._tail = b""  # ... and its last ones so far

    def feed(self, chunk: bytes) -> list[bytes | DroppedLine]:
        """The lines ``chunk`` completes, without their ``"\\n"``; a
        :class:`DroppedLine` for a line that passed the bound."""
        out: list[bytes | DroppedLine] = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            self._keep(chunk[start:end])
            if self._size > self.max_bytes:
                out.append(DroppedLine(self._size, self._head, self._tail))
            else:
                out.append(b"".join(self._parts))
            self._parts, self._size, self._head, self._tail = [], 0, b"", b""
            start = end + 1
        self._keep(chunk[start:])
        return out

    def _keep(self, piece: bytes) -> None:
        if not piece:
            return
        self._size += len(piece)
        if self._size <= self.max_bytes:
            self._parts.append(piece)
            return
        if self._parts:  # the line just passed the bound: keep its ends only (no copy)
            self._head, self._tail = _ends(self._parts)
            self._parts = []
        self._tail = (self._tail + piece)[-KEPT_ENDS:]
        if not self._head:
            self._head = piece[:KEPT_ENDS]


def _ends(parts: list[bytes]) -> tuple[bytes, bytes]:
    """The first and last :data:`KEPT_ENDS` bytes of ``parts`` joined, without joining."""
    head = b""
    for part in parts:
        head += part[: KEPT_ENDS - len(head)]
        if len(head) >= KEPT_ENDS:
            break
    tail = b""
    for part in reversed(parts):
        tail = (
            part[len(part) - (KEPT_ENDS - len(tail)) :] + tail
            if len(part) > KEPT_ENDS - len(tail)
            else part + tail
        )
        if len(tail) >= KEPT_ENDS:
            break
    return head, tail
