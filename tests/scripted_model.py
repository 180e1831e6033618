"""A scripted local model: an OpenAI-compatible chat endpoint on a loopback port whose next
answer (content and finish_reason) the test sets, for the guard paths a real small model
takes only sometimes (an answer cut off at its cap, an echo, an unclosed code fence, a
request that never gets an answer, so the client times out)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from realparts import ServerThread


@dataclass
class Answers:
    """What the scripted model says next, and what it was asked."""

    content: str = ""
    finish: str = "stop"
    asked: list[dict[str, object]] = field(default_factory=list)
    hang: int = 0  # the next this many requests get no answer until the server stops
    released: threading.Event = field(default_factory=threading.Event)


@contextmanager
def scripted_model() -> Iterator[tuple[Answers, str]]:
    """(the answers to set, the base URL ending in ``/v1``); stopped on exit."""
    answers = Answers()

    async def chat(request: Request) -> JSONResponse:
        answers.asked.append(json.loads(await request.body()))
        if answers.hang > 0:
            answers.hang -= 1
            await anyio.to_thread.run_sync(answers.released.wait)  # set when the server stops
        message = {"role": "assistant", "content": answers.content}
        choice = {"index": 0, "finish_reason": answers.finish, "message": message}
        return JSONResponse({"choices": [choice]})

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    server = ServerThread(app).start()
    try:
        yield answers, server.url + "/v1"
    finally:
        answers.released.set()
        server.stop()
