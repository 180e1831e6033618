"""An upstream's JSON nested past the interpreter's stack (a few KB of ``[[[[``) is read as
what it is, no JSON, on every route, streamed or whole, with the proxy's tools offered or
not: it was a 500 ``internal proxy error: RecursionError`` (a whole answer) or a stream
cut without a word, with a traceback in the log."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

import loopback
from offload.store.store import Store
from proxy.proxy_servers import proxy_for, serving

DEEP = "[" * 50_000 + "]" * 50_000
MESSAGES = [{"role": "user", "content": "When does the deploy key rotate?"}]
REQUESTS: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"messages": MESSAGES, "max_tokens": 8},
    "/v1/messages": {"model": "m", "max_tokens": 8, "messages": MESSAGES},
    "/v1/responses": {"model": "m", "input": "when?"},
}
#: What the upstream answers: events (streamed) or a body (whole), each nested too deep.
ANSWERS = {
    "a streamed event": f'data: {{"usage": {DEEP}}}\n\ndata: {DEEP}\n\ndata: [DONE]\n\n',
    "a whole answer with tool calls": '{"choices": [{"message": {"tool_calls": ' + DEEP + "}}]}",
    "a whole error": '{"error": ' + DEEP + "}",
}


@dataclass
class Upstream:
    answer: str = ""


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[Upstream, str]]:
    state = Upstream()

    async def chat(request: Request) -> Response:
        await request.body()
        if state.answer.startswith("data:"):

            async def events() -> AsyncIterator[bytes]:
                yield state.answer.encode()

            return StreamingResponse(events(), media_type="text/event-stream")
        status = 400 if state.answer.startswith('{"error"') else 200
        return Response(state.answer, status, media_type="application/json")

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    with serving(app) as server:
        yield state, server.url


@pytest.fixture(scope="module", params=["on", "off"])
def proxy(
    request: pytest.FixtureRequest,
    upstream: tuple[Upstream, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    path: Path = tmp_path_factory.mktemp("deep") / "offload.db"
    with Store(path) as store, proxy_for(upstream[1], store, retrieval=request.param) as (s, _):
        yield s.url


@pytest.mark.parametrize("answer", list(ANSWERS))
@pytest.mark.parametrize("route", list(REQUESTS))
@pytest.mark.parametrize("stream", [True, False])
def test_json_nested_past_the_stack_from_the_upstream_is_no_internal_error(
    upstream: tuple[Upstream, str], proxy: str, answer: str, route: str, stream: bool
) -> None:
    upstream[0].answer = ANSWERS[answer]
    body = {**REQUESTS[route], "stream": stream}
    resp = loopback.post(proxy + route, json=body, timeout=60)
    assert resp.status_code != 500, resp.text[:300]
    assert "RecursionError" not in resp.text and "internal proxy error" not in resp.text
