"""An odd upstream: one that answers every chat request with the same text, set by the
test (events when it starts ``data:``, else a whole body: a 400 when it starts
``{"error"``, else a 200), for what an upstream may send that is not ordinary JSON. The
fixtures serving it, and a proxy in front of it, are in this folder's ``conftest.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route


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
