"""Helpers for the proxy's tests: real uvicorn servers on loopback, a scripted upstream.

The scripted upstream is a tiny Starlette app that records what it receives and answers
as told; it is for deterministic logic tests (streaming pace, cancellation, error
pass-through). The real-llama tests in ``test_e2e_*.py`` are the proof that the proxy works.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from offload.config import ProxySettings
from offload.proxy.app import create_app
from offload.store.store import Store
from realparts import ServerThread


@contextmanager
def serving(app: ASGIApp) -> Iterator[ServerThread]:
    """Run ``app`` on loopback for the duration of the block."""
    server = ServerThread(app).start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def proxy_for(
    upstream: str, store: Store, **settings: Any
) -> Iterator[tuple[ServerThread, ProxySettings]]:
    """A real proxy (real pipeline) on loopback in front of ``upstream``."""
    proxy_settings = ProxySettings(upstream=upstream, metrics_flush_s=0.1, **settings)
    with serving(create_app(proxy_settings, store)) as server:
        yield server, proxy_settings


@dataclass
class Scripted:
    """State and knobs of the scripted upstream."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    n_ctx: int = 4096
    # chat answer: None = a default completion; else (status, body)
    answer: tuple[int, bytes] | None = None
    release: threading.Event = field(default_factory=threading.Event)  # slow routes wait on it
    cancelled: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    tokenize_calls: int = 0
    tokenized: list[str] = field(default_factory=list)  # the texts /tokenize was asked
    has_tokenize: bool = True
    tokenize_answer: bytes | None = None  # every /tokenize answered so, not counted
    chat_template: str = "{% for message in messages %}<|im_start|>{{ message.role }}"


def chunk(obj: dict[str, Any]) -> bytes:
    """One SSE data event."""
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def completion(text: str = "hello", *, cache_n: int = 0, prompt_n: int = 10) -> dict[str, Any]:
    """A non-streaming chat completion like llama-server's."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
        ],
        "usage": {"prompt_tokens": cache_n + prompt_n, "completion_tokens": 1},
        "timings": {"cache_n": cache_n, "prompt_n": prompt_n},
    }


def scripted_upstream(s: Scripted) -> Starlette:
    """The scripted upstream app over the shared state ``s``."""

    async def wait_release() -> None:
        while not s.release.is_set():
            await asyncio.sleep(0.005)  # polling a threading.Event from async code

    async def chat(request: Request) -> Response:
        body = json.loads(await request.body())
        # tokenized_before: what had been counted when the request reached the upstream
        record = {"body": body, "headers": dict(request.headers)}
        s.requests.append({**record, "tokenized_before": len(s.tokenized)})
        mode = str(body.get("model", ""))
        if s.answer is not None:
            status, raw = s.answer
            return Response(raw, status, media_type="application/json")
        if body.get("stream"):
            return StreamingResponse(stream(mode), media_type="text/event-stream")
        if mode == "hold":
            # a plain handler is not cancelled on disconnect: watch for it, as servers do
            while not s.release.is_set():
                if await request.is_disconnected():
                    s.cancelled.set()
                    return Response(status_code=499)
                await asyncio.sleep(0.005)
        return JSONResponse(completion())

    async def stream(mode: str) -> AsyncIterator[bytes]:
        try:
            yield chunk({"choices": [{"index": 0, "delta": {"content": "first"}}]})
            if mode in ("slow", "hold"):
                await wait_release()
            for i in range(3):
                yield chunk({"choices": [{"index": 0, "delta": {"content": f" {i}"}}]})
            yield chunk(
                {
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                    "timings": {"cache_n": 7, "prompt_n": 3},
                }
            )
            yield b"data: [DONE]\n\n"
            s.finished.set()
        except asyncio.CancelledError:
            s.cancelled.set()
            raise

    async def props(request: Request) -> Response:
        return JSONResponse(
            {"default_generation_settings": {"n_ctx": s.n_ctx}, "chat_template": s.chat_template}
        )

    async def tokenize(request: Request) -> Response:
        if not s.has_tokenize:
            return Response(status_code=404)
        s.tokenize_calls += 1
        text = json.loads(await request.body())["content"]
        s.tokenized.append(text)
        if s.tokenize_answer is not None:
            return Response(s.tokenize_answer, media_type="application/json")
        return JSONResponse({"tokens": list(range(len(text.split())))})

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/props", props),
            Route("/tokenize", tokenize, methods=["POST"]),
            Route("/v1/models", models),
        ]
    )
