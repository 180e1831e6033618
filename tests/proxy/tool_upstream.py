"""A scripted upstream model that calls tools: each chat request gets the next scripted
answer (text and tool calls), streamed llama-server style when asked, or is forwarded to a
real model server once the script runs out. For the retrieval loop's tests: the decision
to call a tool is scripted (SmolLM2 has no tool calling), everything else is real HTTP.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from realparts import ServerThread


@dataclass
class Turn:
    """One scripted answer: text, tool calls ``(name, arguments JSON)``, or an error."""

    text: str | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)
    status: int = 200
    hold: bool = False  # a stream that sends its text, then waits until released
    whole: bool = False  # a whole JSON answer even to a streaming request
    raw: str = ""  # the answer as written: events when it starts ``data:``, else a body


@dataclass
class ToolScript:
    """What the scripted model says next and what it was asked."""

    turns: list[Turn] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    forward_to: str = ""  # once the script is out: the real server that answers instead
    supports_tools: bool | None = None  # what /props says (None: nothing)
    refuse_tools: bool = False  # answer a request with tools 400, as Ollama does for some models
    whole: bool = False  # answer a streaming request with a whole JSON answer all the same
    release: threading.Event = field(default_factory=threading.Event)
    cancelled: threading.Event = field(default_factory=threading.Event)
    # the prompt size a request's usage reports, from its messages (None: always 10)
    prompt_of: Callable[[list[dict[str, Any]]], int] | None = None

    def next_turn(self) -> Turn | None:
        return self.turns.pop(0) if self.turns else None

    def tools_of(self, i: int) -> list[str]:
        """The tool names the ``i``-th request offered."""
        return [t["function"]["name"] for t in self.requests[i].get("tools") or ()]


def _calls(turn: Turn) -> list[dict[str, Any]]:
    return [
        {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
        for i, (n, a) in enumerate(turn.calls)
    ]


def completion(turn: Turn, prompt: int = 10) -> dict[str, Any]:
    """A whole chat completion saying ``turn``."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.text}
    if turn.calls:
        message["tool_calls"] = _calls(turn)
    finish = "tool_calls" if turn.calls else "stop"
    return {
        "id": "chatcmpl-s",
        "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": 2, "total_tokens": prompt + 2},
    }


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


async def _stream(turn: Turn, script: ToolScript, prompt: int = 10) -> AsyncIterator[bytes]:
    try:
        yield _event(_chunk({"role": "assistant", "content": None}))
        if turn.text:
            half = len(turn.text) // 2
            for piece in (turn.text[:half], turn.text[half:]):
                yield _event(_chunk({"content": piece}))
        if turn.hold:
            while not script.release.is_set():
                await asyncio.sleep(0.005)  # polling a threading.Event from async code
        for i, call in enumerate(_calls(turn)):
            fn = call["function"]
            first = {"index": i, "id": call["id"], "type": "function"}
            first["function"] = {"name": fn["name"], "arguments": ""}
            yield _event(_chunk({"tool_calls": [first]}))
            args = fn["arguments"]
            for piece in (args[: len(args) // 2], args[len(args) // 2 :]):
                yield _event(
                    _chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
                )
        yield _event(_chunk({}, "tool_calls" if turn.calls else "stop"))
        usage = {"prompt_tokens": prompt, "completion_tokens": 2, "total_tokens": prompt + 2}
        yield _event({"id": "chatcmpl-s", "choices": [], "usage": usage})
        yield b"data: [DONE]\n\n"
    except asyncio.CancelledError:
        script.cancelled.set()
        raise


def tool_app(script: ToolScript) -> Starlette:
    """The scripted upstream over ``script``."""

    async def chat(request: Request) -> Response:
        raw = await request.body()
        body = json.loads(raw)
        script.requests.append(body)
        if script.refuse_tools and body.get("tools"):
            err = {"error": {"message": "this model does not support tools", "type": "api_error"}}
            return JSONResponse(err, 400)
        turn = script.next_turn()
        if turn is None and script.forward_to:
            return await _forward(script.forward_to, raw, bool(body.get("stream")))
        turn = turn or Turn(text="done")
        if turn.status >= 400:
            err = {"error": {"message": "scripted failure", "type": "server_error"}}
            return JSONResponse(err, turn.status)
        if turn.raw:
            return _as_written(turn.raw)
        prompt = script.prompt_of(body["messages"]) if script.prompt_of is not None else 10
        if body.get("stream") and not (script.whole or turn.whole):
            return StreamingResponse(_stream(turn, script, prompt), media_type="text/event-stream")
        return JSONResponse(completion(turn, prompt))

    async def props(request: Request) -> Response:
        props: dict[str, Any] = {"default_generation_settings": {"n_ctx": 4096}}
        if script.supports_tools is not None:
            props["chat_template_caps"] = {"supports_tools": script.supports_tools}
        return JSONResponse(props)

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/props", props),
        ]
    )


def _as_written(raw: str) -> Response:
    """``raw`` sent as it is: an event stream when it starts ``data:``, else a JSON body."""
    if not raw.startswith("data:"):
        return Response(raw, 200, media_type="application/json")

    async def events() -> AsyncIterator[bytes]:
        yield raw.encode()

    return StreamingResponse(events(), media_type="text/event-stream")


async def _forward(base: str, raw: bytes, stream: bool) -> Response:
    """Let the real server answer (the whole answer, read through)."""
    async with httpx.AsyncClient(timeout=300) as client:
        resp = await client.post(
            base + "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
        )
    media = "text/event-stream" if stream else "application/json"
    return Response(resp.content, resp.status_code, media_type=media)


@contextmanager
def tool_upstream(script: ToolScript) -> Iterator[str]:
    """The scripted upstream's base URL while the block runs."""
    server = ServerThread(tool_app(script)).start()
    try:
        yield server.url
    finally:
        server.stop()
