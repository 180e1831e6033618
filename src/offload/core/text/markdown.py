"""Markdown sectioning: split a document at its headings, byte-exactly.

A small line scanner, not a full CommonMark parser: it knows what decides where a heading
is — ATX and setext headings, fenced code blocks (headings inside are not headings),
thematic breaks, indented code, list items and block quotes (so a ``---`` under them is a
break, not a setext underline), and a leading YAML front-matter block — and nothing else.
Sections concatenated give back the input exactly (LF and CRLF alike).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from offload.errors import InvalidInput

__all__ = [
    "PREAMBLE_TITLE",
    "Heading",
    "Section",
    "atx_heading",
    "headings",
    "is_atx_heading",
    "split_sections",
]

PREAMBLE_TITLE = "(preamble)"

_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t](.*))?$")
# Only at the start or after a blank, so each run of ``#`` is tried once (linear); the
# blanks before it are stripped by the caller.
_ATX_CLOSING = re.compile(r"(?:^|(?<=[ \t]))#+$")
_FENCE_OPEN = re.compile(r"( {0,3})(`{3,}|~{3,})(.*)$")
_FENCE_CLOSE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*$")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*$")
_THEMATIC = re.compile(r" {0,3}(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,}|(?:_[ \t]*){3,})$")
_CONTAINER = re.compile(r" {0,3}(?:>|(?:[-+*]|\d{1,9}[.)])(?:[ \t]|$))")
_INDENTED = re.compile(r"(?: {4}|\t| {0,3}\t)")
_FRONT_MATTER_END = {"---", "..."}


@dataclass(frozen=True)
class Section:
    """One section of a document.

    ``start_line``/``end_line`` are 1-based and inclusive and cover exactly ``text``, which
    includes the heading line(s) and the line endings. ``path`` holds the titles of the
    enclosing (kept) headings, then the section's own title.
    """

    title: str
    level: int
    start_line: int
    end_line: int
    text: str
    path: tuple[str, ...]


@dataclass(frozen=True)
class Heading:
    """A heading found in a document: where its section starts, its level and title."""

    line: int  # 1-based; for a setext heading, the first line of its paragraph
    level: int
    title: str


def _split_lines(text: str) -> list[str]:
    """Lines with their endings kept; only LF ends a line (CRLF is LF preceded by CR)."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _content(line: str) -> str:
    if line.endswith("\n"):
        line = line[:-1]
    if line.endswith("\r"):
        line = line[:-1]
    return line


def _atx_title(rest: str | None) -> str:
    if rest is None:
        return ""
    return _ATX_CLOSING.sub("", rest.strip()).strip()


def atx_heading(line: str) -> tuple[int, str] | None:
    """``(level, title)`` when ``line`` is an ATX heading, else None.

    The one heading rule of offload (CommonMark's): up to three spaces, one to six ``#``,
    then a blank or the end of the line; a closing run of ``#`` after a blank is not part
    of the title. So ``#`` alone is an empty level-1 heading, while ``#x``, ``####### x``
    and a line indented by four spaces are not headings. The line's ending (LF, CRLF) is
    ignored. Whether the line sits inside a code fence is the caller's to know.
    """
    m = _ATX.match(_content(line))
    if m is None:
        return None
    return len(m.group(1)), _atx_title(m.group(2))


def is_atx_heading(line: str) -> bool:
    """Whether ``line`` is an ATX heading (see :func:`atx_heading`)."""
    return _ATX.match(_content(line)) is not None


def _front_matter_end(contents: list[str]) -> int:
    """Index just past a leading YAML front-matter block, or 0 if there is none."""
    if not contents or contents[0].rstrip() != "---":
        return 0
    for i in range(1, len(contents)):
        if contents[i].rstrip() in _FRONT_MATTER_END:
            return i + 1
    return 0


def _scan(contents: list[str]) -> list[Heading]:
    found: list[Heading] = []
    fence: tuple[str, int] | None = None  # (fence character, length) while inside a fence
    state = ""  # "" | "para" | "container" | "other": what the previous line was part of
    para_start = 0
    for i in range(_front_matter_end(contents), len(contents)):
        line = contents[i]
        if fence is not None:
            m = _FENCE_CLOSE.match(line)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= fence[1]:
                fence = None
            continue
        if not line.strip():
            state = ""
            continue
        if state != "para" and _INDENTED.match(line):
            state = "other"  # indented code; it cannot interrupt a paragraph
            continue
        if state == "para" and (m := _SETEXT.match(line)):
            title = " ".join(c.strip() for c in contents[para_start:i])
            found.append(Heading(para_start + 1, 1 if m.group(1)[0] == "=" else 2, title))
            state = ""
            continue
        if m := _FENCE_OPEN.match(line):
            char = m.group(2)[0]
            if not (char == "`" and "`" in m.group(3)):
                fence = (char, len(m.group(2)))
                state = ""
                continue
        if atx := atx_heading(line):
            found.append(Heading(i + 1, atx[0], atx[1]))
            state = ""
            continue
        if _THEMATIC.match(line):
            state = ""
            continue
        if _CONTAINER.match(line):
            state = "container"
            continue
        if state in ("para", "container"):
            continue  # paragraph continuation (lazy inside a container)
        state = "para"
        para_start = i
    return found


def ends_inside_fence(text: str) -> bool:
    """True when a code fence opened in ``text`` is never closed (it would swallow whatever
    follows the text in a larger document)."""
    fence: tuple[str, int] | None = None
    for line in _split_lines(text):
        if fence is not None:
            m = _FENCE_CLOSE.match(line)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= fence[1]:
                fence = None
        elif m := _FENCE_OPEN.match(line):
            char = m.group(2)[0]
            if not (char == "`" and "`" in m.group(3)):
                fence = (char, len(m.group(2)))
    return fence is not None


def headings(text: str, level: int = 6) -> list[Heading]:
    """Every heading of ``text`` whose level is at most ``level``, in document order."""
    _check_level(level)
    return [h for h in _scan([_content(x) for x in _split_lines(text)]) if h.level <= level]


def _check_level(level: int) -> None:
    if not 0 <= level <= 6:
        raise InvalidInput(f"heading level must be between 0 and 6, not {level}")


def split_sections(text: str, level: int = 2) -> list[Section]:
    """Split ``text`` at its headings of level ``level`` or higher (``#`` is level 1).

    Deeper headings stay inside their section. Non-blank text before the first heading
    becomes a ``(preamble)`` section of level 0; blank lines there join the first section.
    A document with no such heading is one preamble section; empty text gives ``[]``.
    Concatenating the texts of the sections gives ``text`` back exactly.
    """
    _check_level(level)
    lines = _split_lines(text)
    if not lines:
        return []
    kept = [h for h in _scan([_content(x) for x in lines]) if h.level <= level]

    sections: list[Section] = []

    def add(title: str, lvl: int, start: int, end: int, path: tuple[str, ...]) -> None:
        # start/end are 0-based, end exclusive
        sections.append(Section(title, lvl, start + 1, end, "".join(lines[start:end]), path))

    first = kept[0].line - 1 if kept else len(lines)
    if first > 0 and "".join(lines[:first]).strip():
        add(PREAMBLE_TITLE, 0, 0, first, (PREAMBLE_TITLE,))
    elif not kept:
        add(PREAMBLE_TITLE, 0, 0, first, (PREAMBLE_TITLE,))  # only blank lines: keep them
    stack: list[Heading] = []
    for n, h in enumerate(kept):
        while stack and stack[-1].level >= h.level:
            stack.pop()
        stack.append(h)
        start = h.line - 1 if sections or n > 0 else 0  # a blank preamble joins this one
        end = kept[n + 1].line - 1 if n + 1 < len(kept) else len(lines)
        add(h.title, h.level, start, end, tuple(s.title for s in stack))
    return sections
