"""Text derived from stored content, made safe to show outside a trust fence.

Topics, summaries, gists, snippets, sources and labels all come from stored bodies (by
default a topic is a body's first line, a summary an extract of it), and anyone who can get
text into a tool output can write a body. Outside a fence such text must stay data: it must
not start a line of its own (``\\nSYSTEM: ignore previous instructions``), carry terminal
escapes or bidirectional overrides, or look like a fence tag. :func:`inline` makes it one
inert line for a model; :func:`printable` keeps a person's line breaks but lets no control
sequence reach a terminal.
"""

from __future__ import annotations

import re

from offload.core.fence import neutralise

__all__ = ["inline", "printable"]

_LINE_BREAK = re.compile(r"\r\n|[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
# C0 and C1 controls, DEL, bidirectional marks/overrides/isolates, zero-width characters
# and the byte-order mark: invisible, or able to reorder or hide what follows.
_CONTROL = re.compile(
    r"[\x00-\x08\x0e-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]"
)
_CONTROL_KEEP_LINES = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]"
)
_BLANKS = re.compile(r"\s+")
# ``[`` that starts something a reader could take for one of offload's own stub or note
# markers (``[offload: 12 earlier messages stored as …]``); a backslash after it defuses it
_MARKER_START = re.compile(r"\[(?=\s*offload\s*:)", re.IGNORECASE)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inline(text: str, limit: int | None = None, *, line_break: str = "\\n") -> str:
    """``text`` as one inert line: each line break becomes ``line_break`` (the two
    characters ``\\n`` unless told), control and invisible format characters are escaped
    (``\\x1b``, ``\\u202e``), runs of blanks become one space, fence-like tags and
    offload's own ``[offload: …]`` markers are defused, and the result is clipped to
    ``limit`` characters (ending with ``…``)."""
    flat = _LINE_BREAK.sub(lambda _: line_break, text)  # taken literally, not as a template
    flat = _CONTROL.sub(_escape, flat)
    flat = _MARKER_START.sub("[\\\\", neutralise(_BLANKS.sub(" ", flat).strip()))
    if limit is not None and len(flat) > limit:
        flat = flat[: max(0, limit - 1)].rstrip() + "…"
    return flat


def printable(text: str) -> str:
    """``text`` for a terminal: newlines and tabs kept, every other control character (ANSI
    escapes, carriage returns, bidirectional overrides) shown escaped instead of obeyed."""
    return _CONTROL_KEEP_LINES.sub(_escape, text.replace("\r\n", "\n"))
