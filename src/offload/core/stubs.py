"""Deterministic stub text: what replaces bulky content in a prompt or a tool response.

Same input and same settings give the same bytes, so provider prompt caches keep hitting:
nothing here reads a clock, a random source or the environment. Every stub starts with a
marker that ``is_stub`` recognises, so a stub is never stubbed again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from offload.core.fence import neutralise
from offload.core.text.preview import Preview, TocEntry, render_contents
from offload.core.untrusted import inline, printable

#: Every stub from ``render_stub`` starts with this.
STUB_MARKER = "[offload:"
#: The key that holds the stub in a tool call's stubbed arguments (a JSON object).
ARGS_KEY = "offload_stub"
#: Every gateway placeholder starts with this.
PLACEHOLDER_MARKER = "[Response compressed — "
GIST_MAX_CHARS = 240
#: What follows a token count that is an estimate standing in for an exact one (which
#: ``~`` precedes).
ESTIMATED = " (estimated)"
CONTENTS_MAX_CHARS = 200
_MARKERS = (STUB_MARKER, PLACEHOLDER_MARKER)


@dataclass(frozen=True)
class StubInfo:
    """What a stub says about the content it replaces.

    ``ref`` is what the resolver understands (``ctx:sha256:ab12cd34ef56``, an entry id or a
    label); ``kind`` reads naturally before "from" (``tool output``, ``file``).
    """

    ref: str
    kind: str
    source: str
    tokens: int
    lines: int
    nbytes: int
    gist: str = ""
    toc: tuple[TocEntry, ...] = ()
    # ``tokens`` is an estimate standing in for an exact count: said as ``~1,234 tokens
    # (estimated)``
    estimated: bool = False


def _one_line(text: str, limit: int) -> str:
    """Derived from stored content, so untrusted: one inert line (``core.untrusted``)."""
    return inline(text, limit, line_break=" ")


def _count(value: int, noun: str) -> str:
    return f"{value:,} {noun}" if value == 1 else f"{value:,} {noun}s"


def _contents_line(toc: Sequence[TocEntry]) -> str:
    """``contents: L1 Overview · L40 Install …``, whole entries only, within the cap."""
    line = "contents:"
    for index, entry in enumerate(toc):
        piece = f" L{entry.line} {_one_line(entry.title, 60)}"
        sep = " ·" if index else ""
        more = " …" if index < len(toc) - 1 else ""
        if len(line) + len(sep) + len(piece) + len(more) > CONTENTS_MAX_CHARS and index:
            return line + " …"
        line += sep + piece
    return line


def render_stub(info: StubInfo, read_call: str, search_call: str | None = None) -> str:
    """The stub for ``info``: a header line, then gist, contents, read and search lines.

    ``[offload: tool output from bash:3 — 1,234 tokens, 88 lines, 5,012 bytes; stored as
    ctx:sha256:ab12cd34ef56]`` (``~1,234 tokens (estimated)`` for an estimate); lines
    without content (no gist, no contents, no search call) are left out. No trailing
    newline.
    """
    kind = _one_line(info.kind, 60) or "content"
    source = _one_line(info.source, 120)
    what = f"{kind} from {source}" if source else kind
    tokens = _count(info.tokens, "token")
    if info.estimated:
        tokens = f"~{tokens}{ESTIMATED}"
    sizes = ", ".join((tokens, _count(info.lines, "line"), _count(info.nbytes, "byte")))
    rows = [f"{STUB_MARKER} {what} — {sizes}; stored as {info.ref}]"]
    gist = _one_line(info.gist, GIST_MAX_CHARS)
    if gist:
        rows.append(f"gist: {gist}")
    if info.toc:
        rows.append(_contents_line(info.toc))
    rows.append(f"read: {read_call}")
    if search_call:
        rows.append(f"search: {search_call}")
    return "\n".join(rows)


def says_estimated(stub: str) -> bool:
    """Whether the stub ``stub`` states its size as an estimate (its first line)."""
    header = stub.split("\n", 1)[0]
    return " — ~" in header and ESTIMATED + ", " in header


def is_stub(text: str) -> bool:
    """True when ``text`` starts (after leading whitespace) with a stub or placeholder marker.

    Looks at the first few characters only, so it is cheap on any size of text.
    """
    return text[:64].lstrip().startswith(_MARKERS)


def _quote(value: str) -> str:
    """A double-quoted string literal; plain labels come out as ``"label"``."""
    return json.dumps(value, ensure_ascii=False)


def render_gateway_placeholder(
    nbytes: int,
    nlines: int,
    label: str,
    preview: Preview,
    toc: Sequence[TocEntry],
    read_tool: str = "IndexRead",
    search_tool: str = "IndexSearch",
    range_limit: int = 200,
    read_cap_bytes: int | None = None,
) -> str:
    """What an MCP gateway returns instead of an oversized tool response.

    The preview, where it ends, the contents (left out when empty), then the exact calls
    that read all of it, read a range from where the preview stopped, and search it.
    With ``read_cap_bytes`` (what one read returns at most) the read-all call names every
    line and says how many calls it takes. Numbers carry no thousands separators. No
    trailing newline.
    """
    quoted = _quote(label)
    rows = [f"[Response compressed — {nbytes} bytes, {nlines} lines, indexed as {quoted}]"]
    shown = preview.text
    shown = shown[:-2] if shown.endswith("\r\n") else shown[:-1] if shown.endswith("\n") else shown
    if shown:
        rows.append(printable(neutralise(shown)))  # the response's own lines, made inert
    # Where a reader picks up: after the preview, inside a cut line, or from the top.
    if preview.structural:
        rows.append(f"[… structure preview of all {nlines} lines]")
        next_line = 1
    elif preview.cut_mid_line:
        rows.append(f"[… preview ends inside line {preview.end_line} of {nlines}]")
        next_line = max(1, preview.end_line)
    elif preview.end_line >= nlines:
        rows.append(f"[… preview shows all {nlines} lines]")
        next_line = 1
    else:
        rows.append(f"[… preview ends at line {preview.end_line} of {nlines}]")
        next_line = preview.end_line + 1
    contents = render_contents(tuple(toc))
    if contents:
        rows.append(contents.rstrip("\n"))
    rows.append(_read_all(read_tool, quoted, nbytes, nlines, read_cap_bytes))
    rows.append(
        f'To read a range: {read_tool}(label={quoted}, offset="{next_line}", limit={range_limit})'
    )
    rows.append(f'To search it: {search_tool}(queries=["..."], source={quoted})')
    return "\n".join(rows)


def _read_all(tool: str, quoted: str, nbytes: int, nlines: int, cap: int | None) -> str:
    if cap is None:
        return f"To read all of it: {tool}(label={quoted})"
    call = f"{tool}(label={quoted}, limit={max(1, nlines)})"
    # the numbered rows add the line number and a tab to every line
    rendered = nbytes + nlines * (len(str(nlines)) + 1)
    calls = -(-rendered // cap)
    if calls <= 1:
        return f"To read all of it: {call}"
    return (
        f"To read all of it: {call}, about {calls} calls of up to {cap // 1024} KB "
        "(each ends with the offset to continue from)"
    )
