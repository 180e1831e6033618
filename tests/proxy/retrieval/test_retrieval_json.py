"""A memory round's continuation is read as the upstream's JSON is read on every route:
a number that is not finite (``NaN``, ``Infinity``) or nesting past the stack is no JSON,
and the answer ends with the route's clear error. The loop read it with Python's own
parser: a ``NaN`` was summed into the usage and written to the client as ``NaN`` (no
JSON), and a continuation nested too deep went to the client in place of the answer."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest

import loopback
from offload.proxy.retrieval.retrieval import SEARCH_TOOL
from offload.proxy.retrieval.retrieval_loop import NOT_JSON
from offload.store.store import Store
from proxy.proxy_servers import proxy_for
from proxy.tool_upstream import ToolScript, Turn, tool_upstream

MESSAGES = [{"role": "user", "content": "When does the deploy key rotate?"}]
REQUESTS: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"messages": MESSAGES, "max_tokens": 8},
    "/v1/messages": {"model": "m", "max_tokens": 8, "messages": MESSAGES},
    "/v1/responses": {"model": "m", "input": "When does the deploy key rotate?"},
}
DEEP = "[" * 50_000 + "]" * 50_000
CHOICE = '{"index": 0, "message": {"role": "assistant", "content": "Fridays."}, '
#: A continuation's whole answer and its event stream, each holding what is no JSON.
CONTINUATIONS = {
    "NaN in the usage": (
        '{"choices": [' + CHOICE + '"finish_reason": "stop"}], '
        '"usage": {"prompt_tokens": NaN, "completion_tokens": 2, "total_tokens": 3}}',
        'data: {"choices": [{"index": 0, "delta": {"content": "Fridays."}}]}\n\n'
        'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
        'data: {"choices": [], "usage": {"prompt_tokens": NaN, "completion_tokens": 2}}\n\n'
        "data: [DONE]\n\n",
    ),
    "Infinity in the logprobs": (
        '{"choices": [' + CHOICE + '"logprobs": {"content": [{"token": "F", '
        '"logprob": -Infinity}]}, "finish_reason": "stop"}]}',
        'data: {"choices": [{"index": 0, "delta": {"content": "Fridays."}, '
        '"logprobs": {"content": [{"token": "F", "logprob": -Infinity}]}}]}\n\n'
        'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
        "data: [DONE]\n\n",
    ),
    "nesting past the stack": (
        '{"choices": [' + CHOICE + '"finish_reason": "stop"}], "timings": ' + DEEP + "}",
        'data: {"choices": [{"index": 0, "delta": {"content": "Fri"}}], "x": ' + DEEP + "}\n\n"
        'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
        "data: [DONE]\n\n",
    ),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ToolScript, str]]:
    script = ToolScript()
    with (
        Store(tmp_path_factory.mktemp("retrieval-json") / "offload.db") as store,
        tool_upstream(script) as url,
        proxy_for(url + "/v1", store, retrieval="on") as (srv, _),
    ):
        yield script, srv.url


def _strict(text: str) -> Any:
    """``text`` read as a client reads JSON: no word a number is not, none past a float."""

    def refuse(word: str) -> Any:
        raise AssertionError(f"{word} is not JSON: {text[:300]}")

    def finite(number: str) -> float:
        assert math.isfinite(float(number)), text[:300]
        return float(number)

    return json.loads(text, parse_constant=refuse, parse_float=finite)


def _said(obj: Any) -> str:
    """The message of an error object in any route's shape (OpenAI, Anthropic, Responses)."""
    for holder in (obj, obj.get("response") or {}):
        err = holder.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
    return ""


@pytest.mark.parametrize("continuation", list(CONTINUATIONS))
@pytest.mark.parametrize("route", list(REQUESTS))
@pytest.mark.parametrize("stream", [False, True])
def test_a_round_continued_with_what_is_no_json_ends_with_the_routes_clear_error(
    served: tuple[ToolScript, str], continuation: str, route: str, stream: bool
) -> None:
    script, url = served
    whole, events = CONTINUATIONS[continuation]
    script.requests.clear()
    script.turns = [
        Turn(text="Let me look.", calls=[(SEARCH_TOOL, '{"query": "deploy key"}')]),
        Turn(raw=events if stream else whole),
    ]
    resp = loopback.post(url + route, json={**REQUESTS[route], "stream": stream}, timeout=60)
    assert len(script.requests) == 2 and not script.turns  # a round ran, then its continuation
    assert resp.status_code != 500 and "internal proxy error" not in resp.text, resp.text[:300]
    if not stream:
        assert resp.status_code == 502, resp.text[:300]
        assert _said(_strict(resp.text)) == NOT_JSON
        return
    datas = [line[5:].strip() for line in resp.text.splitlines() if line.startswith("data:")]
    objs = [_strict(d) for d in datas if d != "[DONE]"]
    assert any(_said(o) == NOT_JSON for o in objs), resp.text[-600:]
