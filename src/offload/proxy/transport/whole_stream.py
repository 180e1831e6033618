"""A whole chat answer to a streaming request, as the stream the client asked for.

An upstream may answer ``stream: true`` with one ``application/json`` chat completion (a
server that does not stream, a gateway in between that buffers). The proxy then treats
it as the answer to the request: its own memory tool calls are handled as for any whole
answer (:mod:`offload.proxy.retrieval.retrieval_loop`; a round's continuation answered
whole is read the same way), and what the client gets is the
answer as chat-completion chunks (the message in one chunk, then its finish with the
usage and timings, then ``[DONE]``), which the Anthropic and Responses routes convert to
their own streams as they do an upstream's. A body that is not a chat completion (not
JSON, a number in it not finite, not an object, an ``error`` object) becomes one error event instead, in the
OpenAI shape those routes convert too.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from offload.core.http import wirejson
from offload.proxy.transport.errors_http import OPENAI

_ENVELOPE = ("id", "created", "model", "system_fingerprint")
_END = ("usage", "timings")


def is_event_stream(headers: Mapping[str, str]) -> bool:
    """Whether an answer's headers say it is a server-sent event stream."""
    return "text/event-stream" in headers.get("content-type", "").lower()


def as_chunks(body: bytes) -> bytes:
    """``body`` (a whole chat completion) as the event stream of the same answer, or one
    error event saying why it cannot be."""
    try:
        obj = wirejson.loads(body)
    except (ValueError, RecursionError):
        obj = None
    if not isinstance(obj, dict):
        return _error(
            "the upstream answered a streaming request with a body that is not a chat completion"
        )
    if "error" in obj and "choices" not in obj:
        err = obj["error"]
        said = err.get("message") if isinstance(err, dict) else err
        why = said if isinstance(said, str) and said else json.dumps(err)[:500]
        return _error(f"the upstream answered a streaming request with an error: {why}")
    envelope = {k: obj[k] for k in _ENVELOPE if k in obj}
    envelope["object"] = "chat.completion.chunk"
    raw_choices = obj.get("choices")
    # what is not a list of objects reads as absent, as the routes read a whole answer
    choices = (
        [c for c in raw_choices if isinstance(c, dict)] if isinstance(raw_choices, list) else []
    )
    first = [_delta_choice(i, c) for i, c in enumerate(choices)]
    last = [
        {"index": _index(i, c), "delta": {}, "finish_reason": c.get("finish_reason") or "stop"}
        for i, c in enumerate(choices)
    ]
    end: dict[str, Any] = {**envelope, "choices": last}
    end.update({k: obj[k] for k in _END if k in obj})
    return _event({**envelope, "choices": first}) + _event(end) + b"data: [DONE]\n\n"


def _index(i: int, choice: dict[str, Any]) -> Any:
    index = choice.get("index")
    return index if isinstance(index, int) and not isinstance(index, bool) else i


def _delta_choice(i: int, choice: dict[str, Any]) -> dict[str, Any]:
    message = choice.get("message")
    delta = dict(message) if isinstance(message, dict) else {}
    calls = delta.get("tool_calls")
    if isinstance(calls, list):  # a stream's call deltas carry their place
        delta["tool_calls"] = [
            {"index": n, **c} if isinstance(c, dict) else c for n, c in enumerate(calls)
        ]
    out: dict[str, Any] = {"index": _index(i, choice), "delta": delta, "finish_reason": None}
    if "logprobs" in choice:
        out["logprobs"] = choice["logprobs"]
    return out


def _event(obj: dict[str, Any]) -> bytes:
    data = json.dumps(obj, ensure_ascii=False)
    try:
        return b"data: " + data.encode() + b"\n\n"
    except UnicodeEncodeError:  # a lone surrogate in its text: escaped instead
        return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _error(message: str) -> bytes:
    return OPENAI.event(502, message, "upstream_error")


class WholeAsStream:
    """A whole answer already read, given as the event stream :func:`as_chunks` makes of
    it (the upstream's headers kept, its content type that of a stream)."""

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status_code = status
        kept = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        self.headers: Mapping[str, str] = {**kept, "content-type": "text/event-stream"}
        self._body = as_chunks(body)

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The stream in one chunk."""
        yield self._body

    async def aread(self) -> bytes:
        """The stream."""
        return self._body

    async def aclose(self) -> None:
        """Nothing to close: the upstream's answer was read and closed."""
