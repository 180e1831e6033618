"""A wire turned back into the client's messages (:func:`expand`: every stub resolved
through the store, the proxy's own notes dropped), and the predicates that tell the
proxy's messages on a wire apart (:func:`is_proxy_note`, :func:`is_range_stub`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from offload.core.stubs import is_stub
from offload.errors import NotFound
from offload.proxy.rewrite.call_args import restore_calls
from offload.proxy.rewrite.messages import Message
from offload.proxy.rewrite.stubs.parts import LOOP_MARKER, PARTS_NOTE, RANGE_ROLES, RECALL_MARKER
from offload.store.store import Store

_NOTES = (RECALL_MARKER, LOOP_MARKER)
_RANGE_HEADER = re.compile(r"\[offload: \d+ earlier messages ")


def expand(
    store: Store,
    wire: Sequence[Message],
    scope: str | None = None,
    cache: dict[str, Any] | None = None,
) -> list[Message]:
    """The client's messages rebuilt from a wire: stubs resolved through the store.

    The proof that nothing was lost: for every rewrite, ``expand(wire) == client messages``.
    ``cache`` (ref -> parsed body) may be shared between calls to avoid re-reading parts.
    """
    memo: dict[str, Any] = {} if cache is None else cache

    def body_of(ref: str) -> str:
        if ref not in memo:
            memo[ref] = store.body(store.resolve(ref, scope), original=True)
        text: str = memo[ref]
        return text

    def part(ref: str) -> tuple[list[Message], str | None]:
        key = "part:" + ref
        if key not in memo:
            doc = json.loads(body_of(ref))
            memo[key] = (doc["messages"], doc["earlier"])
        got: tuple[list[Message], str | None] = memo[key]
        return got

    out: list[Message] = []
    for sent in wire:
        msg = restore_calls(sent, body_of)  # stubbed tool-call arguments (call_args)
        text = msg.get("content")
        if is_proxy_note(msg):
            continue  # a recall block or a loop note: the proxy's, not the client's
        if not isinstance(text, str) or not is_stub(text):
            out.append(msg)
            continue
        ref = _stub_ref(text)
        if is_range_stub(msg):
            parts: list[list[Message]] = []
            cursor: str | None = ref
            while cursor is not None:
                messages, cursor = part(cursor)
                parts.append(messages)
            for chunk in reversed(parts):
                out.extend(chunk)
            continue
        restored = dict(msg)
        header = text.split("\n", 1)[0]
        body = body_of(ref)
        restored["content"] = json.loads(body) if PARTS_NOTE in header else body
        out.append(restored)
    return out


def is_proxy_note(msg: Message) -> bool:
    """True for a message the proxy adds to the wire for one turn (a recall block, a loop
    note): not the client's, never kept in the stable prefix."""
    text = msg.get("content")
    return msg.get("role") == "user" and isinstance(text, str) and text.startswith(_NOTES)


def is_range_stub(msg: Message) -> bool:
    """True for a range stub standing in for paged-out messages."""
    text = msg.get("content")
    return (
        msg.get("role") in RANGE_ROLES and isinstance(text, str) and bool(_RANGE_HEADER.match(text))
    )


def _stub_ref(stub: str) -> str:
    header = stub.split("\n", 1)[0]
    marker = "stored as "
    at = header.rfind(marker)
    if at < 0:
        raise NotFound(header[:80], "the stub names no reference")
    return header[at + len(marker) :].rstrip("]").strip()
