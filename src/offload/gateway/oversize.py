"""What one message from an upstream may weigh, and the answer to a call whose answer
weighed more.

An upstream's message (a stdio line, a JSON body, one server-sent event) is at most
``[gateway] max_upstream_message_mb``. A longer one is read to its end and dropped, never
held whole; when it answered one of our requests (its id sits in the first or last bytes,
where the SDKs write it), that request is answered here with a JSON-RPC error naming the
bound, so the call ends at once with a clear error instead of at its timeout.
"""

from __future__ import annotations

import json
import re

import mcp_types as types

SETTING = "[gateway] max_upstream_message_mb"
# an id as JSON-RPC has it: a number or a short string without escapes
_ID = rb'(-?\d{1,18}|"[^"\\]{0,256}")'
# {"jsonrpc": "2.0", "id": 7, "result": ... (the Python SDK's order)
_ID_FIRST = re.compile(
    rb'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*'
    + _ID
    + rb'\s*,\s*"(?:result|error)"\s*:'
)
# {"result": ..., "jsonrpc": "2.0", "id": 7} (the TypeScript SDK's order): the id is the
# last member of the outermost object, the brace after it the line's last
_RESULT_FIRST = re.compile(rb'\s*\{\s*"(?:result|error)"\s*:')
_ID_LAST = re.compile(rb'[{,]\s*"id"\s*:\s*' + _ID + rb"\s*\}\s*\Z")
#: How the SDK's own SSE reader words an event past its bound.
_SSE_OVER = re.compile(r"Server-sent event exceeded the (\d+) byte limit")


def too_large(size: int, limit: int, *, more: bool = False) -> str:
    """Why a message of ``size`` bytes (``more``: at least) was dropped."""
    at_least = "more than " if more else ""
    return (
        f"its answer, a message of {at_least}{size} bytes, was dropped: the limit is {limit} "
        f"bytes ({SETTING}); raise it to accept larger answers"
    )


def answered_id(head: bytes, tail: bytes) -> types.RequestId | None:
    """The id of the response whose first bytes are ``head`` and last ``tail``, if it
    says; ``None`` for a request, a notification, or a line that says nothing."""
    found = _ID_FIRST.match(head)
    if found is None and _RESULT_FIRST.match(head):
        found = _ID_LAST.search(tail)
    if found is None:
        return None
    value = json.loads(found.group(1))
    return value if isinstance(value, int | str) else None


def dropped_answer(request_id: types.RequestId, size: int, limit: int) -> types.JSONRPCError:
    """The error that answers ``request_id`` in place of its dropped answer."""
    error = types.ErrorData(code=types.INTERNAL_ERROR, message=too_large(size, limit))
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)


def dropped_reason(message: str) -> str | None:
    """The bound an SDK error's ``message`` says an answer passed (ours, or the SDK's
    words for a server-sent event past the bound it was given), else ``None``."""
    start = message.find("its answer, a message of")
    if start >= 0 and f"({SETTING})" in message:
        return message[start:]
    over = _SSE_OVER.search(message)
    if over is not None:
        return (
            f"its answer, a server-sent event, was dropped past the limit of {over.group(1)} "
            f"bytes ({SETTING}); raise it to accept larger answers"
        )
    return None
