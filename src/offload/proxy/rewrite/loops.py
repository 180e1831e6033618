"""The loop guard: a degenerate spiral seen in the history, broken with a short note.

A spiral is the same assistant tool call (same tool names and arguments, call ids aside)
or the same assistant text, ``repeats`` times in a row with no user message in between.
The proxy then appends one short note to the wire telling the model it is repeating
itself; the note is the proxy's own (``expand`` and the replay checks skip it) and goes at
the very end, after everything the cache holds. Pure and deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

from offload.proxy.rewrite.messages import Message, canonical, content_text
from offload.proxy.rewrite.stubs.parts import LOOP_MARKER
from offload.proxy.rewrite.transcript import one_line


def _signature(msg: Message) -> str:
    """What makes two assistant turns the same: their calls (names and arguments) or,
    without calls, their text."""
    calls = msg.get("tool_calls")
    if calls:
        shapes = []
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            fn = fn if isinstance(fn, dict) else {}
            shapes.append([fn.get("name"), fn.get("arguments")])
        return "calls:" + canonical(shapes)
    text = content_text(msg).strip()
    return "text:" + text if text else ""


def spiral(messages: Sequence[Message], repeats: int) -> tuple[int, Message] | None:
    """(how many times in a row, the repeated assistant message) when at least the last
    ``repeats`` assistant turns since the last user message are identical; None otherwise.
    The count is the whole run's, not ``repeats``."""
    if repeats < 2:
        return None
    same: list[Message] = []
    for msg in reversed(messages):
        role = msg["role"]
        if role == "user":
            break
        if role != "assistant":
            continue
        if same and _signature(msg) != _signature(same[0]):
            break
        if not _signature(msg):
            return None
        same.append(msg)
    return (len(same), same[0]) if len(same) >= repeats else None


def note(count: int, msg: Message) -> Message:
    """The note that breaks a spiral of ``count`` identical turns like ``msg``."""
    calls = msg.get("tool_calls") or ()
    if calls:
        fn = calls[0].get("function") if isinstance(calls[0], dict) else None
        fn = fn if isinstance(fn, dict) else {}
        what = one_line(f"the call {fn.get('name')}({fn.get('arguments') or ''})", 160)
    else:
        what = "the answer " + one_line(repr(content_text(msg)), 120)
    text = (
        f"{LOOP_MARKER} You have repeated {what} {count} times in a row."
        " Do not repeat it again: change the approach, use another tool or other"
        " arguments, or answer with what you know."
    )
    return {"role": "user", "content": text}


def is_loop_note(msg: Message) -> bool:
    """True for a loop note the proxy put on the wire."""
    text = msg.get("content")
    return msg.get("role") == "user" and isinstance(text, str) and text.startswith(LOOP_MARKER)
