"""An odd upstream: one that answers every chat request with the same text, set by the
test (events when it starts ``data:``, else a whole body: a 400 when it starts
``{"error"``, else a 200), for what an upstream may send that is not ordinary JSON. The
fixtures serving it, and a proxy in front of it, are in this folder's ``conftest.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

import loopback

MESSAGES = [{"role": "user", "content": "When does the deploy key rotate?"}]
#: A request of each route that converts a chat answer, and of the chat route itself.
REQUESTS: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"messages": MESSAGES, "max_tokens": 8},
    "/v1/messages": {"model": "m", "max_tokens": 8, "messages": MESSAGES},
    "/v1/responses": {"model": "m", "input": "when?"},
}


@dataclass
class OddUpstream:
    """What the odd upstream answers every chat request with."""

    answer: str = ""


def odd_app(state: OddUpstream) -> Starlette:
    """The odd upstream answering as ``state`` says."""

    async def chat(request: Request) -> Response:
        await request.body()
        if state.answer.startswith("data:"):

            async def events() -> AsyncIterator[bytes]:
                yield state.answer.encode()

            return StreamingResponse(events(), media_type="text/event-stream")
        status = 400 if state.answer.startswith('{"error"') else 200
        return Response(state.answer, status, media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def ask(upstream: OddUpstream, proxy: str, answer: str, route: str, stream: bool) -> httpx.Response:
    """``route``'s request through ``proxy`` (streamed or whole) while the odd upstream
    answers ``answer``."""
    upstream.answer = answer
    return loopback.post(proxy + route, json={**REQUESTS[route], "stream": stream}, timeout=60)
