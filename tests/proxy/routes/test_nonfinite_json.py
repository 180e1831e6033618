"""An upstream's answer holding a number that is not finite (``NaN``, ``Infinity``, a
``1e999`` past a float's range: Python's ``json`` reads them all) is read as what it is,
no JSON, on the routes that convert a chat answer: it was written on to the client as
``NaN`` or ``Infinity``, which is not JSON and which the client's parser refuses."""

from __future__ import annotations

import json
import math
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

MESSAGES = [{"role": "user", "content": "When does the deploy key rotate?"}]
REQUESTS: dict[str, dict[str, Any]] = {
    "/v1/messages": {"model": "m", "max_tokens": 8, "messages": MESSAGES},
    "/v1/responses": {"model": "m", "input": "when?"},
}
CHOICE = '{"index": 0, "message": {"role": "assistant", "content": "Fridays."}, '
#: What the upstream answers (events when it starts ``data:``, else a whole body).
ANSWERS = {
    "NaN in a whole answer's usage": '{"choices": ['
    + CHOICE
    + '"finish_reason": "stop"}], "usage": {"prompt_tokens": NaN, "completion_tokens": 2}}',
    "Infinity in a whole answer's logprobs": '{"choices": ['
    + CHOICE
    + '"logprobs": {"content": [{"token": "F", "logprob": -Infinity}]}, '
    + '"finish_reason": "stop"}]}',
    "1e999 in a whole answer's timings": '{"choices": ['
    + CHOICE
    + '"finish_reason": "stop"}], "timings": {"predicted_per_second": 1e999}}',
    "NaN in a whole answer's tool call arguments": '{"choices": [{"index": 0, "message": '
    + '{"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": '
    + '{"name": "rotate", "arguments": {"days": NaN}}}]}, "finish_reason": "tool_calls"}]}',
    "Infinity in a whole answer's tool call arguments as text": '{"choices": [{"index": 0, '
    + '"message": {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", '
    + '"function": {"name": "rotate", "arguments": "{\\"days\\": Infinity}"}}]}, '
    + '"finish_reason": "tool_calls"}]}',
    "NaN in a streamed event": 'data: {"choices": [{"index": 0, "delta": {"content": "Fri"}}]}'
    '\n\ndata: {"choices": [], "usage": {"prompt_tokens": NaN, "completion_tokens": 1}}'
    "\n\ndata: [DONE]\n\n",
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
        return Response(state.answer, 200, media_type="application/json")

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    with serving(app) as server:
        yield state, server.url


@pytest.fixture(scope="module", params=["on", "off"])
def proxy(
    request: pytest.FixtureRequest,
    upstream: tuple[Upstream, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    path: Path = tmp_path_factory.mktemp("nonfinite") / "offload.db"
    with Store(path) as store, proxy_for(upstream[1], store, retrieval=request.param) as (s, _):
        yield s.url


def _strict(text: str) -> None:
    """``text`` is JSON as a client reads it: no word a number is not, no number past a
    float's range."""

    def refuse(word: str) -> Any:
        raise AssertionError(f"{word} is not JSON: {text[:300]}")

    def finite(number: str) -> float:
        assert math.isfinite(float(number)), text[:300]
        return float(number)

    json.loads(text, parse_constant=refuse, parse_float=finite)


@pytest.mark.parametrize("answer", list(ANSWERS))
@pytest.mark.parametrize("route", list(REQUESTS))
@pytest.mark.parametrize("stream", [True, False])
def test_a_number_that_is_not_finite_from_the_upstream_never_reaches_the_client(
    upstream: tuple[Upstream, str], proxy: str, answer: str, route: str, stream: bool
) -> None:
    upstream[0].answer = ANSWERS[answer]
    body = {**REQUESTS[route], "stream": stream}
    resp = loopback.post(proxy + route, json=body, timeout=60)
    assert resp.status_code != 500 and "internal proxy error" not in resp.text, resp.text[:300]
    if not resp.headers.get("content-type", "").startswith("text/event-stream"):
        _strict(resp.text)
        return
    for line in resp.text.splitlines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            _strict(line[5:])
