"""``POST /v1/responses`` over real loopback HTTP: a Responses request goes upstream as the
bounded chat request its chat equivalent would, and comes back as a Responses object or
event stream that the official ``openai`` client reads."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import loopback
from offload.store.store import Store
from proxy.proxy_servers import Scripted, proxy_for, scripted_upstream, serving
from proxy.tool_upstream import ToolScript, Turn, tool_upstream
from realparts import ServerThread

RESPONSES = "/v1/responses"
TOOL = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
}


@pytest.fixture
def upstream() -> Iterator[tuple[Scripted, ServerThread]]:
    """The scripted upstream on loopback."""
    state = Scripted()
    with serving(scripted_upstream(state)) as server:
        yield state, server
    state.release.set()


@pytest.fixture
def proxy(
    upstream: tuple[Scripted, ServerThread], tmp_path: Path
) -> Iterator[tuple[Scripted, str]]:
    """The real proxy in front of the scripted upstream: (upstream state, proxy URL)."""
    state, server = upstream
    with Store(tmp_path / "offload.db") as store, proxy_for(server.url, store) as (srv, _):
        yield state, srv.url


def events_of(text: str) -> list[tuple[str, dict[str, Any]]]:
    """The (event name, data) pairs of an SSE body."""
    out: list[tuple[str, dict[str, Any]]] = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def test_a_responses_request_goes_upstream_windowed_like_its_chat_equivalent(
    upstream: tuple[Scripted, ServerThread], tmp_path: Path
) -> None:
    state, server = upstream
    marker = "UNIQUE-MARKER-7f3a"
    dump = " ".join(f"{marker}-{i}" for i in range(6000))  # 6000 tokens > n_ctx 4096
    chat = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": dump},
        {"role": "user", "content": "summarise"},
    ]
    items = [{"role": "user", "content": [{"type": "input_text", "text": dump}]}]
    items.append({"type": "message", "role": "user", "content": "summarise"})
    with Store(tmp_path / "a.db") as a, proxy_for(server.url, a) as (srv, _):
        assert loopback.post(srv.url + "/v1/chat/completions", json={"messages": chat}).is_success
    with Store(tmp_path / "b.db") as b, proxy_for(server.url, b) as (srv, _):
        resp = loopback.post(srv.url + RESPONSES, json={"instructions": "be brief", "input": items})
        stats = loopback.get(srv.url + "/api/stats").json()["live"]["counters"]
    assert resp.status_code == 200
    by_chat, by_responses = state.requests[-2]["body"], state.requests[-1]["body"]
    assert by_responses["messages"] == by_chat["messages"]
    assert f"{marker}-5999" not in json.dumps(by_responses["messages"])
    assert stats["requests"] == 1 and stats["stubs_made"] >= 1
    answer = resp.json()
    assert answer["object"] == "response" and answer["status"] == "completed"
    assert answer["output"][0]["content"][0]["text"] == "hello"
    assert answer["usage"]["input_tokens"] == 10 and answer["usage"]["output_tokens"] == 1


@pytest.mark.parametrize("stream", [False, True])
def test_function_calls_round_trip_with_their_call_id(tmp_path: Path, stream: bool) -> None:
    script = ToolScript(turns=[Turn(text="let me look", calls=[("read_file", '{"path":"a"}')])])
    with (
        tool_upstream(script) as url,
        Store(tmp_path / "offload.db") as store,
        proxy_for(url + "/v1", store, retrieval="off") as (srv, _),
    ):
        first = [{"role": "user", "content": "read a"}]
        body = {"model": "m", "input": first, "tools": [TOOL], "stream": stream}
        answer = _answer(srv.url, body)
        calls = [item for item in answer["output"] if item["type"] == "function_call"]
        assert [(c["call_id"], c["name"], c["arguments"]) for c in calls] == [
            ("call_0", "read_file", '{"path":"a"}')
        ]
        assert answer["output"][0]["content"][0]["text"] == "let me look"
        sent = script.requests[0]
        assert sent["tools"][0]["function"]["name"] == "read_file"
        output = {"type": "function_call_output", "call_id": "call_0", "output": "contents of a"}
        follow = {**body, "input": [*first, *answer["output"], output]}
        assert _answer(srv.url, follow)["output"][0]["content"][0]["text"] == "done"
    messages = script.requests[1]["messages"]
    assert messages[1]["role"] == "assistant" and messages[1]["content"] == "let me look"
    assert messages[1]["tool_calls"][0]["id"] == "call_0"
    assert messages[2] == {"role": "tool", "tool_call_id": "call_0", "content": "contents of a"}


def _answer(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """The response object, whole or from a stream's ``response.completed``."""
    if not body.get("stream"):
        resp = loopback.post(url + RESPONSES, json=body)
        assert resp.status_code == 200, resp.text
        answer: dict[str, Any] = resp.json()
        return answer
    with loopback.stream("POST", url + RESPONSES, json=body) as resp:
        events = events_of("".join(resp.iter_text()))
    assert events[-1][0] == "response.completed"
    final: dict[str, Any] = events[-1][1]["response"]
    return final


def test_a_stream_is_a_well_formed_responses_event_sequence(proxy: tuple[Scripted, str]) -> None:
    _state, url = proxy
    body = {"model": "m", "input": "hi", "stream": True}
    with loopback.stream("POST", url + RESPONSES, json=body) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = events_of("".join(resp.iter_text()))
    names = [name for name, _ in events]
    assert names == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 4,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert all(data["type"] == name for name, data in events)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    item_id = events[2][1]["item"]["id"]
    assert {data["item_id"] for _, data in events[3:-2]} == {item_id}
    text = "".join(data["delta"] for name, data in events if name.endswith("text.delta"))
    assert text == "first 0 1 2" == events[-4][1]["text"]
    final = events[-1][1]["response"]
    assert final["output"][0]["content"][0]["text"] == text
    # the upstream's llama-server timings: 7 of 10 prompt tokens from its cache
    assert final["usage"]["input_tokens"] == 10
    assert final["usage"]["input_tokens_details"]["cached_tokens"] == 7


def test_the_official_openai_client_reads_responses_whole_and_streamed(
    proxy: tuple[Scripted, str],
) -> None:
    _state, url = proxy
    client = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
    whole = client.responses.create(model="m", input="hi", instructions="be brief")
    assert whole.output_text == "hello" and whole.usage is not None
    assert whole.usage.input_tokens == 10
    streamed = client.responses.create(model="m", input="hi", stream=True)
    kinds = [event.type for event in streamed]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    with client.responses.stream(model="m", input="hi") as helper:
        deltas = [e.delta for e in helper if e.type == "response.output_text.delta"]
        final = helper.get_final_response()
    assert "".join(deltas) == final.output_text == "first 0 1 2"
    client.close()


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"previous_response_id": "resp_1"}, "send the whole conversation"),
        ({"tools": [{"type": "web_search"}]}, "only function tools"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input_image",
        ),
    ],
)
def test_what_the_proxy_cannot_honour_is_a_400_that_says_why(
    proxy: tuple[Scripted, str], extra: dict[str, Any], says: str
) -> None:
    state, url = proxy
    resp = loopback.post(url + RESPONSES, json={"model": "m", "input": "hi", **extra})
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and says in error["message"]
    assert state.requests == []


@pytest.mark.parametrize(
    ("status", "raw", "message", "kind"),
    [
        (500, b'{"error": {"code": 500, "message": "boom", "type": "server_error"}}', "boom", "server_error"),
        (503, b"overloaded", "overloaded", "upstream_error"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_error_answers_in_the_openai_error_shape(
    proxy: tuple[Scripted, str], status: int, raw: bytes, message: str, kind: str, stream: bool
) -> None:
    state, url = proxy
    state.answer = (status, raw)
    resp = loopback.post(url + RESPONSES, json={"model": "m", "input": "hi", "stream": stream})
    assert resp.status_code == status
    error = resp.json()["error"]
    assert error["message"] == message and error["type"] == kind


def test_paths_below_responses_are_a_404_that_says_nothing_is_stored(
    proxy: tuple[Scripted, str],
) -> None:
    state, url = proxy
    for method, path in (("GET", "/resp_1"), ("DELETE", "/resp_1"), ("POST", "/compact")):
        resp = loopback.request(method, url + RESPONSES + path, json={"input": "x"})
        assert resp.status_code == 404
        assert "keeps no responses" in resp.json()["error"]["message"]
    assert state.requests == []
