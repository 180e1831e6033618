"""Anthropic Messages (``POST /v1/messages``) over an OpenAI-compatible chat upstream.

Supported: ``system`` (string or text blocks); user/assistant ``content`` as a string or
blocks of ``text``, ``tool_use`` and ``tool_result`` (text content); ``tools`` and
``tool_choice``; ``max_tokens``, ``temperature``, ``top_p``, ``top_k``, ``stop_sequences``,
``metadata`` (dropped); ``stream`` (text and tool-use deltas). Answers carry
``stop_reason`` and ``usage`` (``input_tokens``, ``output_tokens``,
``cache_read_input_tokens`` from the upstream's cache figures; streamed: ``message_start``
the proxy's count of the wire, ``message_delta`` the upstream's figures when it reports them).

Not supported (a 400 says so): ``image`` and ``document`` blocks, ``thinking`` and
extended-thinking parameters. Prompt-caching ``cache_control`` markers are accepted and
ignored (the proxy keeps the upstream's prefix cache warm by itself).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import Response

from offload.core.http import wirejson
from offload.core.http.sse import SseDecoder
from offload.errors import InvalidInput, UpstreamTooLarge
from offload.proxy.figures.metrics import cache_figures, token_figure
from offload.proxy.routes.answers import first_choice, listed, member, text_of
from offload.proxy.transport.errors_http import ANTHROPIC, TextJSON, anthropic_error
from offload.proxy.transport.forward import MAX_ANSWER_BYTES, UpstreamReply, read_all

_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _text_of(blocks: Any, where: str) -> str:
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise InvalidInput(f"{where} must be a string or an array of blocks")
    parts: list[str] = []
    for i, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "text":
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise InvalidInput(f"{where}[{i}]: block type {kind!r} is not supported here")
        parts.append(str(block.get("text", "")))
    return "\n".join(parts)


def to_openai(body: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat request equivalent to an Anthropic Messages request."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise InvalidInput("'messages' must be a non-empty array")
    if not isinstance(body.get("max_tokens"), int):
        raise InvalidInput("'max_tokens' is required and must be an integer")
    if body.get("thinking"):
        raise InvalidInput("'thinking' is not supported by this proxy")
    out: list[dict[str, Any]] = []
    if body.get("system"):
        out.append({"role": "system", "content": _text_of(body["system"], "system")})
    for i, msg in enumerate(msgs):
        if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant"):
            raise InvalidInput(f"messages[{i}].role must be 'user' or 'assistant'")
        out.extend(_convert_message(msg, f"messages[{i}]"))
    payload: dict[str, Any] = {"messages": out, "max_tokens": body["max_tokens"]}
    for key in ("model", "temperature", "top_p", "top_k"):
        if key in body:
            payload[key] = body[key]
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
        payload["user"] = metadata["user_id"]  # OpenAI's field; also names the session
    if body.get("stop_sequences"):
        payload["stop"] = list(body["stop_sequences"])
    if body.get("tools"):
        payload["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.get("name"),
                    "description": t.get("description", ""),
                    "parameters": t.get("input_schema") or {"type": "object"},
                },
            }
            for t in body["tools"]
            if isinstance(t, dict)
        ]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind == "tool":
            payload["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
        elif kind in ("auto", "none"):
            payload["tool_choice"] = kind
        elif kind == "any":
            payload["tool_choice"] = "required"
    if body.get("stream"):
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
    return payload


def _convert_message(msg: dict[str, Any], where: str) -> list[dict[str, Any]]:
    role, content = msg["role"], msg.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise InvalidInput(f"{where}.content must be a string or an array of blocks")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use" and role == "assistant":
            calls.append(
                {
                    "id": str(block.get("id", "")),
                    "type": "function",
                    "function": {
                        "name": str(block.get("name", "")),
                        "arguments": json.dumps(block.get("input", {}), ensure_ascii=False),
                    },
                }
            )
        elif kind == "tool_result" and role == "user":
            inner = block.get("content", "")
            results.append(
                {
                    "role": "tool",
                    "tool_call_id": str(block.get("tool_use_id", "")),
                    "content": _text_of(inner, f"{where}.content[{j}].content"),
                }
            )
        else:
            raise InvalidInput(f"{where}.content[{j}]: block type {kind!r} is not supported")
    out: list[dict[str, Any]] = list(results)
    if role == "assistant":
        entry: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
        if calls:
            entry["tool_calls"] = calls
        out.append(entry)
    elif texts or not results:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def _usage(obj: dict[str, Any]) -> dict[str, int]:
    """Anthropic usage from a chat answer's figures. Anthropic's ``input_tokens`` are the
    prompt's tokens not read from the cache (a client adds ``cache_read_input_tokens`` to
    them for the prompt's size); chat's ``prompt_tokens`` count the cached ones too."""
    raw = obj.get("usage")
    usage: dict[str, Any] = raw if isinstance(raw, dict) else {}
    prompt, cached = cache_figures(obj)
    given = token_figure(usage.get("prompt_tokens")) or prompt or 0
    read = min(cached or 0, given)
    return {
        "input_tokens": given - read,
        "output_tokens": token_figure(usage.get("completion_tokens")) or 0,
        "cache_read_input_tokens": read,
    }


def _message_id() -> str:
    return "msg_" + secrets.token_hex(12)


async def message_response(
    resp: UpstreamReply,
    model: str,
    on_obj: Callable[[dict[str, Any]], None],
    limit: int = MAX_ANSWER_BYTES,
) -> Response:
    """A non-streaming chat answer as an Anthropic message (a 502 past ``limit`` bytes)."""
    try:
        obj = wirejson.loads(await read_all(resp, limit))
    except UpstreamTooLarge as exc:
        return anthropic_error(502, str(exc), "api_error")
    except (ValueError, RecursionError):
        return anthropic_error(502, "upstream answered with non-JSON", "api_error")
    if not isinstance(obj, dict):
        obj = {}
    on_obj(obj)
    choice, message = first_choice(obj)
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": text_of(message["content"])})
    for call in listed(message.get("tool_calls")):
        fn = member(call, "function")
        arguments = fn.get("arguments")
        try:
            args = wirejson.loads(arguments or "{}") if isinstance(arguments, str) else arguments
        except (ValueError, RecursionError):
            args = {"_raw": arguments}
        if not isinstance(args, dict):
            args = {"_raw": arguments}
        content.append(
            {
                "type": "tool_use",
                "id": str(call.get("id") or ""),
                "name": str(fn.get("name") or ""),
                "input": args,
            }
        )
    return TextJSON(
        {
            "id": _message_id(),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": _STOP.get(str(choice.get("finish_reason")), "end_turn"),
            "stop_sequence": None,
            "usage": _usage(obj),
        }
    )


def error_response(status: int, body: bytes) -> Response:
    """An upstream error (its status and body) in the Anthropic error shape."""
    message = body.decode("utf-8", "replace")
    try:
        err = json.loads(body).get("error")
        if isinstance(err, dict) and err.get("message"):
            message = str(err["message"])
    except (ValueError, AttributeError, RecursionError):
        pass
    return anthropic_error(status, message)


def _sse(event: str, data: dict[str, Any]) -> bytes:
    text = f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
    return text.encode("utf-8", "backslashreplace")  # a lone surrogate: its JSON escape


def _message_start(model: str, input_tokens: int) -> bytes:
    return _sse(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": _message_id(),
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": input_tokens, "output_tokens": 0},
            },
        },
    )


def _block_start(index: int, block: dict[str, Any]) -> bytes:
    return _sse(
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def _block_delta(index: int, delta: dict[str, Any]) -> bytes:
    return _sse(
        "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    )


def _block_stop(index: int) -> bytes:
    return _sse("content_block_stop", {"type": "content_block_stop", "index": index})


class _Blocks:
    """The Anthropic content blocks of one streamed answer: which one is open, and which
    block each OpenAI tool call streams into."""

    def __init__(self) -> None:
        self.open = -1  # index of the open content block
        self.kind = ""
        self.tools: dict[int, int] = {}  # OpenAI tool_call index -> our block index
        self.finish = "end_turn"

    def _next(self, kind: str, block: dict[str, Any]) -> list[bytes]:
        events = [_block_stop(self.open)] if self.open >= 0 else []
        self.open += 1
        self.kind = kind
        events.append(_block_start(self.open, block))
        return events

    def text(self, text: str) -> list[bytes]:
        """Events for a text delta (opening a text block when another kind is open)."""
        events = self._next("text", {"type": "text", "text": ""}) if self.kind != "text" else []
        events.append(_block_delta(self.open, {"type": "text_delta", "text": text}))
        return events

    def tool_call(self, call: dict[str, Any]) -> list[bytes]:
        """Events for one streamed tool-call delta (its first one opens a tool_use block)."""
        index = call.get("index", 0)
        idx = index if isinstance(index, int) else -1
        fn = member(call, "function")
        events: list[bytes] = []
        if idx not in self.tools:
            block = {
                "type": "tool_use",
                "id": str(call.get("id") or ""),
                "name": str(fn.get("name") or ""),
            }
            events = self._next("tool", {**block, "input": {}})
            self.tools[idx] = self.open
        if fn.get("arguments"):
            delta = {"type": "input_json_delta", "partial_json": text_of(fn["arguments"])}
            events.append(_block_delta(self.tools[idx], delta))
        return events

    def choice(self, choice: dict[str, Any]) -> list[bytes]:
        """Events for one streamed choice: its text, its tool calls, its finish reason."""
        delta = member(choice, "delta")
        events: list[bytes] = []
        if delta.get("content"):
            events.extend(self.text(text_of(delta["content"])))
        for call in listed(delta.get("tool_calls")):
            events.extend(self.tool_call(call))
        if choice.get("finish_reason"):
            self.finish = _STOP.get(str(choice["finish_reason"]), "end_turn")
        return events

    def close(self, seen: dict[str, Any]) -> list[bytes]:
        """The closing events: the open block's stop, the stop reason and usage, the end."""
        events = [_block_stop(self.open)] if self.open >= 0 else []
        delta = {"stop_reason": self.finish, "stop_sequence": None}
        counted = _usage(seen)
        usage = {"output_tokens": counted["output_tokens"]}
        if counted["input_tokens"]:  # the upstream's own count of the prompt, when it said
            usage["input_tokens"] = counted["input_tokens"]
            usage["cache_read_input_tokens"] = counted["cache_read_input_tokens"]
        events.append(
            _sse("message_delta", {"type": "message_delta", "delta": delta, "usage": usage})
        )
        events.append(_sse("message_stop", {"type": "message_stop"}))
        return events


async def stream_objects(chunks: AsyncIterator[bytes]) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of an OpenAI chat stream, in order (``[DONE]`` and junk skipped)."""
    decoder = SseDecoder()
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            if event.is_done:
                continue
            try:
                obj = event.json()
            except (ValueError, RecursionError):
                continue
            if isinstance(obj, dict):
                yield obj


async def stream_events(
    chunks: AsyncIterator[bytes], model: str, seen: dict[str, Any], input_tokens: int = 0
) -> AsyncIterator[bytes]:
    """Convert an OpenAI chat stream into Anthropic Messages stream events.

    ``seen`` receives the stream's ``usage``/``timings`` (for the proxy's metrics) before the
    generator ends. ``input_tokens``: the prompt's size as the proxy counted the wire, which
    ``message_start`` carries (a client's context meter reads it there); ``message_delta``
    carries the upstream's own count when its stream reports one.
    """
    blocks = _Blocks()
    started = failed = False
    async for obj in stream_objects(chunks):
        if failed:
            continue  # nothing after an error is part of the answer
        if "error" in obj:  # the upstream's own error event, or the relay's for a break
            failed = True
            yield _error_event(obj["error"])
            continue
        seen.update({k: obj[k] for k in ("usage", "timings") if k in obj})
        if not started:
            started = True
            yield _message_start(model, input_tokens)
        for choice in listed(obj.get("choices")):
            for event in blocks.choice(choice):
                yield event
    if not failed:
        for event in blocks.close(seen):
            yield event


def _error_event(error: Any) -> bytes:
    """An OpenAI stream's error object as Anthropic's ``event: error`` (the stream ends
    there: no ``message_stop``)."""
    fields: dict[str, Any] = error if isinstance(error, dict) else {"message": str(error)}
    code = fields.get("code")
    status = code if isinstance(code, int) and 400 <= code <= 599 else 500
    return ANTHROPIC.event(status, str(fields.get("message") or "upstream error"), "")
