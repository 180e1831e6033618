"""Result text for the MCP tools: short, one line per entry, deterministic.

Pure functions over store records; nothing here touches the store. Everything derived from
stored content (topics, summaries, snippets, sources, labels, tags) goes through
``core.untrusted.inline``: one line, controls escaped, fence-like tags defused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from offload.core.fence import iso
from offload.core.text.timeexpr import iso_day
from offload.core.text.wording import counted
from offload.core.untrusted import inline
from offload.errors import (
    BinaryFile,
    Gone,
    NotAFile,
    NotFound,
    OffloadError,
    OtherScope,
    OutsideRoots,
    StoreBusy,
    TooLarge,
)
from offload.store.models import Entry, Hit
from offload.store.search.explain import Explanation, explanation_lines, path_line

_TOPIC_CHARS = 80
_SNIPPET_CHARS = 200
_SUMMARY_CHARS = 2000
_ERROR_CHARS = 2000


def one_line(text: str, limit: int) -> str:
    """Untrusted text as one inert line (line breaks become spaces), clipped to ``limit``."""
    return inline(text, limit, line_break=" ")


def call(tool: str, **args: Any) -> str:
    """An exact tool call as an agent would write it: ``read(ref="x", offset="61")``."""
    parts = [f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items()]
    return f"{tool}({', '.join(parts)})"


def status_of(e: Entry) -> str:
    """``cold``, ``hot``, ``cold+pinned`` …"""
    return f"{e.status}+pinned" if e.pinned else e.status


def entry_line(e: Entry) -> str:
    """``ref | topic [tags] | kind | salience | status | ~tokens``."""
    topic = one_line(e.topic, _TOPIC_CHARS) or "(no topic)"
    tags = f" [{' '.join(one_line(t, 60) for t in e.tags)}]" if e.tags else ""
    kind = one_line(e.kind, 60) + body_mark(e)
    return f"{e.ref} | {topic}{tags} | {kind} | {e.salience:.2f} | {status_of(e)} | ~{e.tokens}"


#: What a header showing a stored body that is not the content says of it, by
#: :attr:`Entry.body_form`: a transcript loses nothing (the exact messages are the
#: content), so it never reads as "lossy".
BODY_NOTES = {
    "lossy": "lossy: the local model's compression; retrieve gives the original",
    "transcript": "a transcript; retrieve gives the exact messages",
}


ORIGINAL_HIT_NOTE = (
    "found in the original; the stored body is lossy: read with original=true shows these lines"
)


def body_mark(e: Entry) -> str:
    """`` (lossy)`` or `` (transcript)`` after an entry whose stored body is not its
    content, else ``""``."""
    return f" ({e.body_form})" if e.body_form else ""


def body_note(e: Entry) -> str:
    """`` (lossy: ...)`` or `` (a transcript; ...)`` after a header that shows an entry's
    stored body when it is not its content, else ``""``."""
    return f" ({BODY_NOTES[e.body_form]})" if e.body_form else ""


def entry_lines(entries: Sequence[Entry]) -> str:
    """One :func:`entry_line` per entry."""
    return "\n".join(entry_line(e) for e in entries)


def page_trailer(tool: str, offset: int, shown: int, total: int, **args: Any) -> str:
    """``[1-50 of 240; next: matrix(offset=50)]`` or ``[1-12 of 12]``."""
    if total == 0:
        return "[no entries]"
    if shown == 0:
        return f"[none at offset {offset}; {total} in all]"
    span = f"{offset + 1}-{offset + shown} of {total}"
    if offset + shown < total:
        return f"[{span}; next: {call(tool, **args, offset=offset + shown)}]"
    return f"[{span}]"


def scope_note(scope: str | None, others: Mapping[str, int], what: str) -> str:
    """Which scope a listing shows and what other scopes hold, with the argument that
    shows them: ``[scope X; 3 entries in other scopes: all_scopes=true]``. The scope name
    (a path or a name the user chose) goes through :func:`inline`."""
    if scope is None:
        return "[every scope]"
    where = f"[scope {inline(scope, 200)}"
    n = int(others.get("entries", 0))
    if not n:
        return where + "]"
    k = int(others.get("scopes", 0))
    scopes = f"{k} other scope{'' if k == 1 else 's'}" if k else "other scopes"
    return f"{where}; {n} {what if n != 1 else what.rstrip('s').replace('entrie', 'entry')} in {scopes}: search(all_scopes=true) shows them]"


def peek_text(counts: Mapping[str, Any], scope: str, others: Mapping[str, int]) -> str:
    """Counts only, two or three lines."""
    elsewhere = ""
    if others.get("entries"):
        elsewhere = f" ({others['entries']} more in {others['scopes']} other scope(s): search all_scopes=true)"
    head = (
        f"{counted(counts['entries'], 'entry')}: {counts['cold']} cold, {counts['hot']} hot, "
        f"{counts['pinned']} pinned; ~{counts['tokens']} tokens; scope {inline(scope, 200)}{elsewhere}"
    )
    kinds = counts.get("kinds") or {}
    if not kinds:
        return head + "\nnothing stored yet: offload(content=…) or offload_path(path=…)"
    # kinds are short tokens since puts check them; a store written before may hold any text
    parts = [f"{one_line(k, 60)} {v['entries']} (~{v['tokens']})" for k, v in kinds.items()]
    return head + "\nkinds: " + ", ".join(parts)


def recall_text(e: Entry) -> str:
    """Summary and metadata of one entry, and what to call next."""
    lines = [
        entry_line(e),
        f"id {e.id}; {e.lines} lines, {e.size} bytes; created {iso(e.created)}; "
        f"accessed {iso(e.accessed)} ({e.access_count}x)",
    ]
    if e.source:
        lines.append(f"source: {one_line(e.source, 200)}")
    if e.labels:
        lines.append("labels: " + " ".join(one_line(label, 200) for label in e.labels))
    if e.body_form == "lossy":
        lines.append("stored compressed (lossy); retrieve gives the original")
    elif e.body_form == "transcript":
        lines.append("stored as a transcript of the exact messages; retrieve gives them")
    # a gist has a few lines: kept apart by a visible \n, never by a real line break
    summary = inline(e.summary, _SUMMARY_CHARS) or "(no summary)"
    lines.append(f"summary: {summary}")
    lines.append(f"next: {call('read', ref=e.ref)} or {call('checkout', ref=e.ref)}")
    return "\n".join(lines)


@dataclass(frozen=True)
class More:
    """What a query's search holds past the hits shown: ``after`` more (at least that
    many unless ``every``), reached by a larger ``limit`` up to ``max_limit``."""

    after: int = 0
    every: bool = True
    limit: int = 0
    max_limit: int = 0

    def note(self) -> str:
        """``, 7 more: limit=12 shows them`` (nothing when none follow)."""
        if self.after <= 0:
            return ""
        count = f"{self.after} more" if self.every else f"at least {self.after} more"
        if self.limit >= self.max_limit:
            return f", {count} (limit is at its most, {self.max_limit}: narrow the query)"
        wanted = min(self.max_limit, self.limit + self.after)
        every = self.every and wanted - self.limit >= self.after
        return f", {count}: limit={wanted} shows {'them' if every else 'more'}"


def hit_lines(
    query: str,
    hits: Sequence[Hit],
    shown: dict[tuple[int, int | None], int],
    number: int,
    why: Sequence[Explanation] | None = None,
    more: More | None = None,
) -> str:
    """Hits of one query; a chunk already shown for an earlier query is only referenced.
    With ``why``, each hit's rank, score and explanation follow it (its matched terms,
    read from stored fields, made inert); ``more``: how many hits follow them."""
    found = counted(len(hits), "hit") if hits else "no hits"
    tail = more.note() if more is not None and hits else ""
    head = f"q{number} {json.dumps(query, ensure_ascii=False)}: {found}{tail}"
    out = [head] if not why else [head, f"  {path_line(why[0])}"]
    for i, h in enumerate(hits):
        out.append(_hit_line(h, shown, number))
        if why is not None:
            out.append(f"    #{why[i].rank} score {h.score:.4g}")
            out.extend(f"  {line}" for line in explanation_lines(why[i], _term))
    return "\n".join(out)


def _term(text: str) -> str:
    return inline(text, _TOPIC_CHARS)


def _hit_line(h: Hit, shown: dict[tuple[int, int | None], int], number: int) -> str:
    key = (h.entry.id, h.chunk_id)
    where = f"{h.entry.ref} L{h.start_line}-{h.end_line}"
    if key in shown:
        return f"  {where} (same chunk as q{shown[key]})"
    shown[key] = number
    topic = one_line(h.entry.topic, 60)
    if h.in_original:
        where += f" ({ORIGINAL_HIT_NOTE})"
    else:
        where += body_mark(h.entry)
    if h.entry.event_time is not None:  # when what it tells happened, as its writer said
        where += f" [{iso_day(h.entry.event_time)}]"
    # the best-matching lines with their numbers (a metadata hit: its topic/summary)
    best = h.lines or ((h.match_line, h.snippet),)
    shown_lines = " · ".join(f"L{n}: {one_line(t, _SNIPPET_CHARS)}" for n, t in best)
    return f"  {where} | {topic} | {shown_lines}"


def duration(seconds: float) -> str:
    """``90s`` / ``12m`` / ``3.5h`` / ``2d``, for messages."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def error_text(exc: OffloadError, roots: Sequence[str] = ()) -> str:
    """One line for an ``is_error`` result, ending with what to do next."""
    msg = inline(str(exc), _ERROR_CHARS)  # may quote a ref, a path or a tombstone's reason
    hint = ""
    if isinstance(exc, NotFound):
        msg = inline(str(exc.with_hint("find refs with matrix or search")), _ERROR_CHARS)
    elif isinstance(exc, OtherScope):
        hint = "the read tools reach it with all_scopes=true"
    elif isinstance(exc, Gone) and not exc.regenerate:
        hint = "offload it again if you still need it"
    elif isinstance(exc, OutsideRoots):
        hint = f"use a path under {', '.join(roots) or 'the project root'} ([mcp] roots)"
    elif isinstance(exc, NotAFile):
        hint = "check the path (relative paths start at the project root)"
    elif isinstance(exc, BinaryFile):
        hint = "only text files can be offloaded"
    elif isinstance(exc, TooLarge):
        hint = "offload a smaller file or raise [store] max_file_bytes"
    elif isinstance(exc, StoreBusy):
        hint = "retry in a moment"
    tail = f"; {hint}" if hint else ""
    return f"error: {msg}{tail}"
