"""Paged-out messages as a readable transcript: what search indexes and a reader reads.

The proxy stores a paged-out run of messages twice over in one entry: the exact JSON the
client sent (the entry's content, what every stub's reference names and what restores the
messages byte for byte) and this transcript (the entry's body, what the store indexes), so
a search lands on the message and the line and a read shows text, not one line of JSON.

A transcript has a header line per message (``## #12 assistant · call bash (id call_1)``)
followed by its text as lines; an assistant's tool calls follow its text, one
``-> call NAME(id ID): ARGUMENTS`` line each. Pure: no I/O, deterministic.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from offload.core import untrusted
from offload.proxy.rewrite.messages import Message, content_text

#: A message header line starts with this.
HEADER = "## #"
#: The argument keys that best say what a tool call was about, most telling first.
KEY_ARGUMENTS = (
    "command",
    "cmd",
    "path",
    "file_path",
    "filename",
    "file",
    "query",
    "pattern",
    "url",
    "name",
)
_PATH_KEYS = frozenset({"path", "file_path", "filename", "file", "paths", "files"})
# a path-like token: segments joined by "/" or a name with an extension (linear: no nesting)
_PATH = re.compile(r"(?<![\w.-])(?:[\w.-]+/)+[\w.-]+|(?<![\w./-])[\w-]+\.[A-Za-z]{1,5}(?![\w/])")
MAX_FILES = 8


@dataclass(frozen=True)
class Call:
    """One tool call the transcript holds."""

    name: str
    key: str  # the most telling argument's value ("" when there is none)
    line: int  # the line of its ``-> call`` row in the transcript
    result: str  # the text of its answer ("" when the answer is not in this run)


@dataclass(frozen=True)
class Transcript:
    """A rendered run of messages."""

    text: str
    lines: tuple[int, ...]  # header line of each message, in order
    calls: tuple[Call, ...]


def one_line(text: str, limit: int) -> str:
    """``text`` as one inert line for a stub (:func:`offload.core.untrusted.inline`, line
    breaks as spaces: a stub's fields read as prose)."""
    return untrusted.inline(text, limit, line_break=" ")


@dataclass(frozen=True)
class Piece:
    """One message's rows of a transcript (its header, its text lines, its call rows),
    the same wherever the message sits in a part: a part's transcript is its title and
    its messages' pieces, so a page-out that takes in the parts before it renders only
    the messages it adds (:func:`join`)."""

    rows: str  # the rows joined by newlines, the header first
    count: int  # how many rows
    calls: tuple[tuple[str, str, int, str], ...]  # name, key argument, row in the piece, id
    answer: tuple[str, str] | None  # (call id, text) of a tool's answer
    # its header and call rows are a line each (no line break in a name, id or arguments)
    plain: bool = True


def piece(index: int, msg: Message) -> Piece:
    """The transcript rows of ``msg``, the chat's message number ``index``."""
    # a row is a line: a name, call id or arguments holding line breaks (pretty-printed
    # JSON) takes as many rows as lines, so every line number after it stays true
    rows = _header(index, msg).split("\n")
    plain = len(rows) == 1
    text = content_text(msg)
    if text:
        rows.extend(text.split("\n"))
    calls: list[tuple[str, str, int, str]] = []
    for call in msg.get("tool_calls") or ():
        name, call_id, args = _call_fields(call)
        calls.append((name, key_argument(args), len(rows), call_id))
        call_rows = f"-> call {name}(id {call_id}): {args}".split("\n")
        plain = plain and len(call_rows) == 1
        rows.extend(call_rows)
    answer = (
        (str(msg.get("tool_call_id")), text) if msg.get("role") in ("tool", "function") else None
    )
    return Piece("\n".join(rows), len(rows), tuple(calls), answer, plain)


def join(pieces: Sequence[Piece], title: str = "") -> Transcript:
    """The transcript of messages whose pieces are ``pieces``, in order, under ``title``."""
    starts: list[int] = []
    at = 2 if title else 1  # the line the next piece starts on
    for p in pieces:
        starts.append(at)
        at += p.count
    answers = {p.answer[0]: p.answer[1] for p in pieces if p.answer is not None}
    done = tuple(
        Call(name, key, start + row, answers.get(call_id, ""))
        for p, start in zip(pieces, starts, strict=True)
        for name, key, row, call_id in p.calls
    )
    rows = [title] if title else []
    rows += [p.rows for p in pieces]
    return Transcript("\n".join(rows), tuple(starts), done)


def render(messages: Sequence[Message], first: int, title: str = "") -> Transcript:
    """The transcript of ``messages``, numbered from ``first`` (their index in the chat)."""
    return join([piece(first + offset, msg) for offset, msg in enumerate(messages)], title)


def _header(index: int, msg: Message) -> str:
    role = str(msg.get("role"))
    parts = [f"{HEADER}{index} {role}"]
    name = msg.get("name")
    if isinstance(name, str) and name:
        parts.append(name)
    call_id = msg.get("tool_call_id")
    if isinstance(call_id, str) and call_id:
        parts.append(f"(id {call_id})")
    names = [_call_fields(c)[0] for c in msg.get("tool_calls") or ()]
    if names:
        parts.append("calls " + ", ".join(names))
    return " · ".join([parts[0], " ".join(parts[1:])]) if len(parts) > 1 else parts[0]


def _call_fields(call: Any) -> tuple[str, str, str]:
    """(name, id, arguments text) of one ``tool_calls`` item, whatever its shape."""
    if not isinstance(call, dict):
        return "?", "", json.dumps(call, ensure_ascii=False)
    fn = call.get("function")
    fn = fn if isinstance(fn, dict) else {}
    name = fn.get("name")
    args = fn.get("arguments")
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False, sort_keys=True) if args is not None else ""
    return (str(name) if name else "?", str(call.get("id") or ""), args)


def key_argument(arguments: str) -> str:
    """The most telling argument of a call (its command, path, query …), else the first
    string argument, else ""."""
    parsed = _parse_args(arguments)
    if not parsed:
        return ""
    for key in KEY_ARGUMENTS:
        value = parsed.get(key)
        if isinstance(value, str) and value.strip():
            return value
    for value in parsed.values():
        if isinstance(value, str) and value.strip():
            return value
    return ""


def _parse_args(arguments: str) -> dict[str, Any]:
    try:
        parsed = json.loads(arguments) if arguments else {}
    except (ValueError, RecursionError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def files_of(messages: Sequence[Message]) -> list[str]:
    """The files a run of messages names in its tool calls' arguments, first seen first."""
    found: dict[str, None] = {}
    for msg in messages:
        for call in msg.get("tool_calls") or ():
            args = _call_fields(call)[2]
            parsed = _parse_args(args)
            for key, value in parsed.items():
                values = value if isinstance(value, list) else [value]
                for v in values:
                    if key in _PATH_KEYS and isinstance(v, str) and v.strip():
                        found.setdefault(v.strip(), None)
            for match in _PATH.finditer(args[:4000]):
                found.setdefault(match.group(0), None)
            if len(found) >= MAX_FILES:
                return list(found)[:MAX_FILES]
    return list(found)[:MAX_FILES]


def tool_counts(messages: Sequence[Message]) -> list[tuple[str, int]]:
    """Tool names called in ``messages`` with how often, most used first."""
    counts: dict[str, int] = {}
    for msg in messages:
        for call in msg.get("tool_calls") or ():
            name = _call_fields(call)[0]
            counts[name] = counts.get(name, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def describe(messages: Sequence[Message], task: str, first: int) -> tuple[str, str]:
    """(topic, summary) of a paged-out run: the task, the tools, the files. Derived from
    stored content: untrusted, one line each."""
    return summarise(messages, task, first, tool_counts(messages), files_of(messages))


def tool_counts_of(pieces: Sequence[Piece]) -> list[tuple[str, int]]:
    """:func:`tool_counts` of the messages whose pieces are ``pieces``."""
    counts: dict[str, int] = {}
    for p in pieces:
        for name, _, _, _ in p.calls:
            counts[name] = counts.get(name, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def files_in(each: Sequence[Sequence[str]]) -> list[str]:
    """:func:`files_of` of a run of messages from each message's own ``files_of``: the
    first distinct ones in order (a message's own list holds its first ``MAX_FILES``,
    which is all the run can take from it)."""
    found: dict[str, None] = {}
    for files in each:
        for f in files:
            found.setdefault(f, None)
        if len(found) >= MAX_FILES:
            break
    return list(found)[:MAX_FILES]


def summarise(
    messages: Sequence[Message],
    task: str,
    first: int,
    tools_used: Sequence[tuple[str, int]],
    files: Sequence[str],
) -> tuple[str, str]:
    """:func:`describe` with the run's tool counts and files given."""
    last = first + len(messages) - 1
    latest = (
        next((content_text(m) for m in reversed(messages) if m.get("role") == "user"), "") or task
    )
    topic = one_line(f"conversation #{first}-#{last}: {latest or 'tool run'}", 120)
    tools = ", ".join(f"{n}×{c}" for n, c in tools_used[:8])
    named = ", ".join(files)
    pieces = [f"task: {task}" if task else "", f"tools: {tools}" if tools else ""]
    pieces.append(f"files: {named}" if named else "")
    pieces.append(f"{len(messages)} messages")
    summary = one_line("; ".join(p for p in pieces if p), 400)
    return topic, summary


def contents(calls: Sequence[Call], limit: int, width: int = 90) -> list[tuple[int, str]]:
    """The contents list of a range stub: up to ``limit`` tool calls (the first of each
    distinct name and key argument) as (line, ``name key → gist``), neutralised."""
    seen: set[tuple[str, str]] = set()
    out: list[tuple[int, str]] = []
    for call in calls:
        if (call.name, call.key) in seen:
            continue
        seen.add((call.name, call.key))
        what = one_line(f"{call.name} {call.key}".strip(), 40)
        gist = one_line(call.result, max(0, width - len(what) - 3))
        out.append((call.line, what + (f" → {gist}" if gist else "")))
        if len(out) == limit:
            break
    return out
