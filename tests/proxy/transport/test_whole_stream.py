"""A streaming request an upstream answers with one whole JSON answer, over real HTTP: the
proxy handles its own memory tool calls in it as for any whole answer, then gives the
client the stream it asked for, in its route's shape (chat chunks, Anthropic events,
Responses events); a body that is no chat completion ends that stream with an error
event in the route's shape."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import loopback
from offload.core.http.sse import iter_sse_events
from offload.proxy.retrieval.retrieval import SEARCH_TOOL
from offload.store.store import Store
from proxy.proxy_servers import Scripted, completion, proxy_for, scripted_upstream, serving
from proxy.tool_upstream import ToolScript, Turn, tool_upstream

MESSAGES = [
    {"role": "system", "content": "You are a helpful agent."},
    {"role": "user", "content": "When does the deploy key rotate?"},
]
DEEP = b"[" * 100_000 + b"]" * 100_000
REQUESTS: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"messages": MESSAGES, "max_tokens": 32},
    "/v1/messages": {
        "model": "m",
        "max_tokens": 32,
        "system": MESSAGES[0]["content"],
        "messages": [MESSAGES[1]],
    },
    "/v1/responses": {"model": "m", "instructions": MESSAGES[0]["content"], "input": "when?"},
}
# what each route's stream says the text with, and how it ends
TEXT_EVENT = {
    "/v1/chat/completions": '"delta": {"role": "assistant", "content": "Every 37 days."}',
    "/v1/messages": '"text_delta", "text": "Every 37 days."',
    "/v1/responses": '"delta": "Every 37 days."',
}
END = {
    "/v1/chat/completions": "data: [DONE]",
    "/v1/messages": "event: message_stop",
    "/v1/responses": "event: response.completed",
}


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ToolScript, str]]:
    """A proxy offering its memory tools, before a model that never streams."""
    script = ToolScript(whole=True)
    with (
        Store(tmp_path_factory.mktemp("whole") / "offload.db") as store,
        tool_upstream(script) as url,
        proxy_for(url + "/v1", store, retrieval="on") as (srv, _),
    ):
        yield script, srv.url


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Scripted, str]]:
    """A proxy (retrieval off) before an upstream that answers whatever it is told, whole."""
    state = Scripted()
    with (
        serving(scripted_upstream(state)) as upstream,
        Store(tmp_path_factory.mktemp("whole-scripted") / "offload.db") as store,
        proxy_for(upstream.url, store, retrieval="off") as (srv, _),
    ):
        yield state, srv.url
    state.release.set()


def stream(url: str, route: str) -> httpx.Response:
    resp = loopback.post(url + route, json={**REQUESTS[route], "stream": True}, timeout=30)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/event-stream"), resp.headers
    return resp


@pytest.mark.parametrize("route", list(REQUESTS))
def test_a_whole_answer_to_a_stream_has_the_proxys_calls_handled_and_comes_as_the_stream(
    tools: tuple[ToolScript, str], route: str
) -> None:
    script, url = tools
    script.requests.clear()
    script.turns = [
        Turn(text=None, calls=[(SEARCH_TOOL, json.dumps({"query": "deploy key"}))]),
        Turn(text="Every 37 days."),
    ]
    resp = stream(url, route)
    assert "offload_" not in resp.text and "tool_use" not in resp.text
    assert TEXT_EVENT[route] in resp.text, resp.text
    assert resp.text.count(END[route]) == 1
    first, second = script.requests
    assert first["stream"] is True
    assert second["stream"] is False  # the continuation of a whole answer asks for one
    assert second["messages"][-1]["role"] == "tool"


def test_a_whole_chat_answer_to_a_stream_becomes_chunks_with_its_finish_and_usage(
    scripted: tuple[Scripted, str],
) -> None:
    state, url = scripted
    state.answer = (200, json.dumps(completion("hi there", prompt_n=12)).encode())
    resp = stream(url, "/v1/chat/completions")
    events = list(iter_sse_events([resp.content]))
    assert events[-1].is_done and sum(e.is_done for e in events) == 1
    first, last = (e.json() for e in events[:-1])
    assert first["object"] == "chat.completion.chunk" and first["id"] == "chatcmpl-1"
    assert first["choices"] == [
        {"index": 0, "delta": {"role": "assistant", "content": "hi there"}, "finish_reason": None}
    ]
    assert last["choices"] == [{"index": 0, "delta": {}, "finish_reason": "stop"}]
    assert last["usage"] == {"prompt_tokens": 12, "completion_tokens": 1}


@pytest.mark.parametrize(
    "body",
    [
        b"not json at all",
        b"[1, 2]",
        b'{"error": {"message": "model is loading"}}',
        DEEP,  # nested past the stack: a RecursionError ended the stream without a word
        b'{"error": ' + DEEP + b"}",
    ],
    ids=["text", "list", "error", "deep", "deep error"],
)
@pytest.mark.parametrize("route", list(REQUESTS))
def test_a_whole_body_that_is_no_chat_completion_ends_the_stream_with_an_error_event(
    scripted: tuple[Scripted, str], route: str, body: bytes
) -> None:
    state, url = scripted
    state.answer = (200, body)
    text = stream(url, route).text
    assert "streaming request" in text, text
    if route == "/v1/chat/completions":
        assert json.loads(text.split("data: ", 1)[1])["error"]["code"] == 502
    elif route == "/v1/messages":
        assert "event: error" in text and "message_stop" not in text
    else:
        assert "event: response.failed" in text
    if body.startswith(b'{"error": {'):
        assert "model is loading" in text


def test_a_client_tool_call_in_a_whole_answer_reaches_the_stream_without_the_proxys(
    tools: tuple[ToolScript, str],
) -> None:
    script, url = tools
    script.requests.clear()
    client_tool = {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
    }
    script.turns = [Turn(calls=[(SEARCH_TOOL, '{"query": "x"}'), ("get_weather", '{"c": 1}')])]
    body = {**REQUESTS["/v1/chat/completions"], "tools": [client_tool], "stream": True}
    resp = loopback.post(url + "/v1/chat/completions", json=body, timeout=30)
    objs = [e.json() for e in iter_sse_events([resp.content]) if not e.is_done]
    calls = [t for o in objs for c in o["choices"] for t in (c["delta"].get("tool_calls") or ())]
    assert [(t["index"], t["function"]["name"]) for t in calls] == [(0, "get_weather")]
    assert calls[0]["function"]["arguments"] == '{"c": 1}'
    finishes = [c["finish_reason"] for o in objs for c in o["choices"] if c.get("finish_reason")]
    assert finishes == ["tool_calls"] and len(script.requests) == 1


def test_a_rounds_continuation_answered_whole_goes_on_in_the_stream(
    tools: tuple[ToolScript, str],
) -> None:
    script, url = tools
    script.requests.clear()
    script.whole = False
    try:
        script.turns = [
            Turn(text="Let me look.", calls=[(SEARCH_TOOL, '{"query": "deploy key"}')]),
            Turn(text="Every 37 days.", whole=True),
        ]
        resp = stream(url, "/v1/chat/completions")
    finally:
        script.whole = True
    objs = [e.json() for e in iter_sse_events([resp.content]) if not e.is_done]
    text = "".join(c["delta"].get("content") or "" for o in objs for c in o["choices"])
    assert text == "Let me look.\n\nEvery 37 days.", resp.text
    assert "offload_" not in resp.text and resp.text.count("[DONE]") == 1
    finishes = [c["finish_reason"] for o in objs for c in o["choices"] if c.get("finish_reason")]
    assert finishes == ["stop"] and len(script.requests) == 2
