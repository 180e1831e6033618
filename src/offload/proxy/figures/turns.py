"""Per-turn figures for the dashboard: what each request put on the wire, and what it stubbed.

A session keeps its last :data:`TURNS_KEPT` turns (persisted with its counters, so the
plots survive a restart); the proxy keeps its last :data:`RECENT_KEPT` requests with the
stub lines of their wire in memory only (they name stored content; the store keeps it).
Everything here is bounded: a turn is a dozen numbers, a stub line at most
:data:`STUB_LINE_CHARS` characters, at most :data:`STUBS_KEPT` of them per request.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from offload.core.stubs import ARGS_KEY, is_stub

TURNS_KEPT = 60  # per session
RECENT_KEPT = 30  # requests, every session
STUBS_KEPT = 12  # stub lines kept per recent request
STUB_LINE_CHARS = 240
TITLE_CHARS = 60
#: what a turn records, in order (numbers, booleans, or the break cause)
TURN_FIELDS = (
    "at",
    "client_tokens",
    "wire_tokens",
    "prompt_tokens",
    "cached_tokens",
    "n_ctx",
    "stubbed_messages",
    "stubs_made",
    "windowed",
    "emergency",
    "error",
    "break",
)


def one_line(text: str, limit: int) -> str:
    """``text`` on one line (whitespace runs as one space), at most ``limit`` characters."""
    flat = " ".join(text[: limit * 4].split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "\u2026"


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content and isinstance(content[0], dict):
        text = content[0].get("text")
        return text if isinstance(text, str) else ""
    return ""


def session_title(messages: Sequence[Mapping[str, Any]]) -> str:
    """A readable name for a conversation: the start of its first user message that is not
    a stub ("" when it has none). Derived from client text: shown escaped, never to a model."""
    for message in messages:
        if message.get("role") == "user":
            text = _text(message)
            if text.strip() and not is_stub(text):
                return one_line(text, TITLE_CHARS)
    return ""


def stub_lines(messages: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The header lines of the first :data:`STUBS_KEPT` stubs on a wire (message stubs,
    range stubs and the stubs of tool calls' arguments: what was stubbed or paged out)."""
    lines: list[str] = []
    for message in messages:
        for text in (_text(message), *_argument_stubs(message)):
            if is_stub(text):
                lines.append(one_line(text.lstrip().partition("\n")[0], STUB_LINE_CHARS))
                if len(lines) == STUBS_KEPT:
                    return tuple(lines)
    return tuple(lines)


def _argument_stubs(message: Mapping[str, Any]) -> Iterator[str]:
    """The stubs that stand for a message's tool calls' bulky arguments."""
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if not isinstance(arguments, str) or f'"{ARGS_KEY}"' not in arguments:
            continue
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError):
            continue
        stub = parsed.get(ARGS_KEY) if isinstance(parsed, dict) else None
        if isinstance(stub, str):
            yield stub


def stub_ref(line: str) -> str:
    """The reference a stub line names (``stored as REF]``), or ""."""
    _, found, rest = line.rpartition("stored as ")
    return rest.partition("]")[0].strip() if found else ""


def valid_turns(raw: Any) -> list[dict[str, Any]]:
    """Persisted turns that look like turns (anything else is dropped, not trusted)."""
    if not isinstance(raw, list):
        return []
    out = []
    for turn in raw[-TURNS_KEPT:]:
        if isinstance(turn, dict) and isinstance(turn.get("at"), int | float):
            out.append({k: turn.get(k) for k in TURN_FIELDS})
    return out


def savings(turns_by_session: Mapping[str, Sequence[Mapping[str, Any]]], points: int) -> list[Any]:
    """The last ``points`` turns of every session in time order, as
    ``[at, client_tokens, wire_tokens]`` (the dashboard's savings-over-time plot)."""
    rows = [
        [t["at"], t.get("client_tokens") or 0, t.get("wire_tokens") or 0]
        for turns in turns_by_session.values()
        for t in turns
    ]
    rows.sort(key=lambda r: r[0])
    return rows[-points:]
