"""Transparent retrieval over real HTTP: the proxy offers its own memory tools, answers the
scripted model's calls of them from a real store, continues the answer itself, and the
client sees one ordinary answer (streamed or whole, OpenAI or Anthropic)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from offload.core.http.sse import iter_sse_events
from offload.core.tokens import TEMPLATE_TOKENS_PER_MESSAGE, default_counter
from offload.proxy.retrieval.retrieval import DEFINITIONS, READ_TOOL, SEARCH_TOOL
from offload.proxy.retrieval.retrieval_loop import LAST_ROUND
from offload.proxy.rewrite.messages import head_end, session_key
from offload.proxy.transport.counting import message_texts
from offload.store.store import Store
from proxy.proxy_servers import proxy_for
from proxy.tool_upstream import ToolScript, Turn, tool_upstream
from realparts import wait_until

CHAT = "/v1/chat/completions"
SCOPE = "/work/project"
NEEDLE = "the deploy key rotates every 37 days on host kestrel-9"
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a helpful agent."},
    {"role": "user", "content": "When does the deploy key rotate?"},
]
CLIENT_TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ToolScript, str, Store]]:
    """One scripted upstream, store and proxy for the module (servers are slow to start)."""
    script = ToolScript()
    with (
        Store(tmp_path_factory.mktemp("retrieval") / "offload.db") as store,
        tool_upstream(script) as url,
        proxy_for(url + "/v1", store, scope=SCOPE) as (srv, _),
    ):
        yield script, srv.url, store


@pytest.fixture
def store(served: tuple[ToolScript, str, Store]) -> Store:
    return served[2]


@pytest.fixture
def script(served: tuple[ToolScript, str, Store]) -> ToolScript:
    """The module's script, reset for this test."""
    script = served[0]
    script.turns.clear()
    script.requests.clear()
    script.release.clear()
    script.cancelled.clear()
    return script


@pytest.fixture
def proxy(served: tuple[ToolScript, str, Store], script: ToolScript) -> str:
    return served[1]


@pytest.fixture
def own_store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "offload.db") as s:
        yield s


def session_of(messages: list[dict[str, Any]]) -> str:
    return session_key(messages[: head_end(messages)])


def page_out(store: Store, messages: list[dict[str, Any]] = MESSAGES) -> str:
    """Store a paged-out part of this conversation (as the pipeline does); its ref."""
    text = f"## #3 tool (shell)\nnotes from the ops log:\n{NEEDLE}\nnothing else of note"
    put = store.put(text, kind="proxy", source=f"proxy:{session_of(messages)}:2-5", scope=SCOPE)
    return put.entry.ref


def chat(proxy: str, **body: Any) -> httpx.Response:
    payload = {"messages": MESSAGES, "max_tokens": 32, **body}
    return httpx.post(proxy + CHAT, json=payload, timeout=30)


def events(resp: httpx.Response) -> list[dict[str, Any]]:
    return [e.json() for e in iter_sse_events([resp.content]) if not e.is_done]


def streamed_text(objs: list[dict[str, Any]]) -> str:
    return "".join(
        (c.get("delta") or {}).get("content") or "" for o in objs for c in o.get("choices") or ()
    )


def test_the_proxy_tools_come_first_with_the_same_bytes_every_turn(
    proxy: str, script: ToolScript
) -> None:
    chat(proxy)
    chat(proxy, tools=[CLIENT_TOOL])
    first, second = (r["tools"] for r in script.requests)
    assert first == list(DEFINITIONS)
    assert second == [*DEFINITIONS, CLIENT_TOOL]
    assert json.dumps(first[:2]) == json.dumps(second[:2])


def test_a_model_that_does_not_use_the_tools_answers_byte_for_byte(
    proxy: str, script: ToolScript
) -> None:
    script.turns = [Turn(text="plain answer")]
    resp = chat(proxy)
    assert resp.status_code == 200
    assert resp.json()["choices"][0]["message"] == {"role": "assistant", "content": "plain answer"}
    assert len(script.requests) == 1


def test_a_search_is_answered_from_the_store_and_the_client_sees_only_the_answer(
    proxy: str, script: ToolScript, store: Store
) -> None:
    page_out(store)
    script.turns = [
        Turn(text=None, calls=[(SEARCH_TOOL, json.dumps({"query": "deploy key rotate"}))]),
        Turn(text="Every 37 days."),
    ]
    resp = chat(proxy)
    assert resp.status_code == 200
    choice = resp.json()["choices"][0]
    assert choice["message"]["content"] == "Every 37 days."
    assert "tool_calls" not in choice["message"] and choice["finish_reason"] == "stop"
    assert resp.json()["usage"]["prompt_tokens"] == 20  # both rounds
    continuation = script.requests[1]["messages"]
    assert continuation[: len(MESSAGES)] == MESSAGES  # the wire's prefix is untouched
    call, result = continuation[-2:]
    assert call["tool_calls"][0]["function"]["name"] == SEARCH_TOOL
    assert result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert NEEDLE in result["content"] and "<offload:body:" in result["content"]


def test_a_read_call_is_answered_with_numbered_fenced_lines(
    proxy: str, script: ToolScript, store: Store
) -> None:
    ref = page_out(store)
    script.turns = [Turn(calls=[(READ_TOOL, json.dumps({"ref": ref, "offset": 3}))])]
    assert chat(proxy).json()["choices"][0]["message"]["content"] == "done"
    answer = script.requests[1]["messages"][-1]["content"]
    assert answer.startswith(f"{ref} L3-4 of 4")
    assert f"3\t{NEEDLE}" in answer and "notes from the ops log" not in answer


def test_bad_calls_are_answered_cleanly_and_the_model_carries_on(
    proxy: str, script: ToolScript
) -> None:
    script.turns = [
        Turn(
            calls=[
                (READ_TOOL, json.dumps({"ref": "ctx:sha256:" + "ab" * 8})),
                (READ_TOOL, "{not json"),
                (SEARCH_TOOL, json.dumps({"query": "xylophone quasar"})),
                (SEARCH_TOOL, json.dumps({"q": 1})),
            ]
        ),
        Turn(text="I could not find it."),
    ]
    resp = chat(proxy)
    assert resp.json()["choices"][0]["message"]["content"] == "I could not find it."
    unknown, malformed, empty, missing = (m["content"] for m in script.requests[1]["messages"][-4:])
    assert unknown.startswith("cannot read it: no entry matches")
    assert malformed.startswith("error:") and "JSON" in malformed
    assert empty.startswith("no memory matches")
    assert missing.startswith("error:") and "'query'" in missing


def test_rounds_are_bounded_and_the_proxy_then_answers_cleanly(
    proxy: str, script: ToolScript
) -> None:
    search = (SEARCH_TOOL, json.dumps({"query": "anything"}))
    script.turns = [Turn(calls=[search]) for _ in range(10)]
    before = counters(proxy)
    resp = chat(proxy)
    assert resp.status_code == 200
    choice = resp.json()["choices"][0]
    assert "tool_calls" not in choice["message"] and choice["finish_reason"] == "stop"
    assert "limit of 4 rounds" in choice["message"]["content"]
    assert len(script.requests) == 5
    assert script.requests[4]["messages"][-1]["content"].endswith(LAST_ROUND)
    after = counters(proxy)
    grew = {k: after[k] - before.get(k, 0) for k in after if "retrieval" in k}
    assert grew == {
        "offload_proxy_retrieval_rounds_total": 4,
        "offload_proxy_retrieval_read_calls_total": 0,
        "offload_proxy_retrieval_search_calls_total": 4,
        "offload_proxy_retrieval_bad_calls_total": 0,
        "offload_proxy_retrieval_answered_requests_total": 1,
        "offload_proxy_retrieval_exhausted_requests_total": 1,
        "offload_proxy_retrieval_compacted_rounds_total": 0,
    }


def counters(proxy: str) -> dict[str, float]:
    """The proxy's unlabelled counter families and their values (``/metrics``)."""
    out: dict[str, float] = {}
    for line in httpx.get(proxy + "/metrics").text.splitlines():
        name, _, value = line.partition(" ")
        if name.endswith("_total") and "{" not in name:
            out[name] = float(value)
    return out


def test_a_client_tool_call_beside_a_proxy_call_goes_to_the_client_alone(
    proxy: str, script: ToolScript
) -> None:
    script.turns = [Turn(calls=[(SEARCH_TOOL, '{"query": "x"}'), ("get_weather", "{}")])]
    resp = chat(proxy, tools=[CLIENT_TOOL])
    choice = resp.json()["choices"][0]
    assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["get_weather"]
    assert choice["finish_reason"] == "tool_calls"
    assert len(script.requests) == 1


def test_a_client_tool_of_the_same_name_wins(proxy: str, script: ToolScript) -> None:
    theirs = {"type": "function", "function": {"name": READ_TOOL, "parameters": {}}}
    script.turns = [Turn(calls=[(READ_TOOL, '{"path": "a.txt"}')])]
    resp = chat(proxy, tools=[theirs])
    assert script.tools_of(0) == [SEARCH_TOOL, READ_TOOL]
    calls = resp.json()["choices"][0]["message"]["tool_calls"]
    assert calls[0]["function"] == {"name": READ_TOOL, "arguments": '{"path": "a.txt"}'}


@pytest.mark.parametrize(
    "choice",
    ["none", "auto", {"type": "function", "function": {"name": "get_weather"}}],
)
def test_tool_choice_passes_unchanged_and_the_tools_keep_their_bytes(
    proxy: str, script: ToolScript, choice: Any
) -> None:
    chat(proxy, tools=[CLIENT_TOOL], tool_choice=choice)
    assert script.requests[0]["tool_choice"] == choice
    assert script.requests[0]["tools"] == [*DEFINITIONS, CLIENT_TOOL]


def test_required_without_client_tools_offers_nothing(proxy: str, script: ToolScript) -> None:
    chat(proxy, tool_choice="required")
    assert "tools" not in script.requests[0]


def test_streaming_hides_the_rounds_and_ends_once(
    proxy: str, script: ToolScript, store: Store
) -> None:
    page_out(store)
    script.turns = [
        Turn(text="Let me look.", calls=[(SEARCH_TOOL, '{"query": "deploy key"}')]),
        Turn(text="Every 37 days."),
    ]
    resp = chat(proxy, stream=True, stream_options={"include_usage": True})
    objs = events(resp)
    assert streamed_text(objs) == "Let me look.\n\nEvery 37 days."
    assert "offload_" not in resp.text
    finishes = [c["finish_reason"] for o in objs for c in o["choices"] if c.get("finish_reason")]
    assert finishes == ["stop"]
    assert resp.text.count("[DONE]") == 1
    assert [o["usage"]["prompt_tokens"] for o in objs if o.get("usage")] == [20]
    assert NEEDLE in script.requests[1]["messages"][-1]["content"]
    assert script.requests[1]["messages"][-2]["content"] == "Let me look."


def test_a_streamed_client_tool_call_is_renumbered_without_the_proxy_call(
    proxy: str, script: ToolScript
) -> None:
    script.turns = [Turn(calls=[(SEARCH_TOOL, '{"query": "x"}'), ("get_weather", '{"c": 1}')])]
    objs = events(chat(proxy, tools=[CLIENT_TOOL], stream=True))
    calls = [t for o in objs for c in o["choices"] for t in (c["delta"].get("tool_calls") or ())]
    assert {t["index"] for t in calls} == {0}
    assert calls[0]["function"]["name"] == "get_weather"
    assert "".join(t["function"].get("arguments", "") for t in calls) == '{"c": 1}'
    finishes = [c["finish_reason"] for o in objs for c in o["choices"] if c.get("finish_reason")]
    assert finishes == ["tool_calls"]


def test_a_failing_continuation_is_the_clients_error(proxy: str, script: ToolScript) -> None:
    script.turns = [Turn(calls=[(SEARCH_TOOL, '{"query": "x"}')]), Turn(status=500)]
    resp = chat(proxy)
    assert resp.status_code == 500
    script.turns = [Turn(calls=[(SEARCH_TOOL, '{"query": "x"}')]), Turn(status=500)]
    objs = events(chat(proxy, stream=True))
    assert objs[-1]["error"]["message"].startswith("the upstream refused a memory round")


def test_a_client_leaving_mid_round_cancels_the_upstream(proxy: str, script: ToolScript) -> None:
    script.turns = [
        Turn(text="a", calls=[(SEARCH_TOOL, '{"query": "x"}')]),
        Turn(text="second round", hold=True),
    ]
    payload = {"messages": MESSAGES, "max_tokens": 8, "stream": True}
    with httpx.stream("POST", proxy + CHAT, json=payload, timeout=30) as resp:
        got = b""
        for chunk in resp.iter_raw():
            got += chunk
            if b"second" in got:
                break
    wait_until(script.cancelled.is_set, 10, what="the continuation cancelled")
    script.release.set()


def test_the_anthropic_route_hides_the_rounds_whole_and_streamed(
    proxy: str, script: ToolScript, store: Store
) -> None:
    page_out(store)
    body = {
        "model": "m",
        "max_tokens": 32,
        "system": MESSAGES[0]["content"],
        "messages": [MESSAGES[1]],
    }
    for stream in (False, True):
        script.turns = [Turn(calls=[(SEARCH_TOOL, '{"query": "deploy"}')]), Turn(text="37 days")]
        resp = httpx.post(proxy + "/v1/messages", json={**body, "stream": stream}, timeout=30)
        assert resp.status_code == 200
        if stream:
            assert '"text_delta"' in resp.text and "tool_use" not in resp.text
            assert '"stop_reason": "end_turn"' in resp.text
        else:
            msg = resp.json()
            assert msg["content"] == [{"type": "text", "text": "37 days"}]
            assert msg["stop_reason"] == "end_turn"
        assert NEEDLE in script.requests[-1]["messages"][-1]["content"]


def test_the_responses_route_hides_the_rounds_whole_and_streamed(
    proxy: str, script: ToolScript, store: Store
) -> None:
    page_out(store)
    body = {"model": "m", "instructions": MESSAGES[0]["content"], "input": MESSAGES[1]["content"]}
    for stream in (False, True):
        script.turns = [Turn(calls=[(SEARCH_TOOL, '{"query": "deploy"}')]), Turn(text="37 days")]
        resp = httpx.post(proxy + "/v1/responses", json={**body, "stream": stream}, timeout=30)
        assert resp.status_code == 200
        if stream:
            assert '"response.output_text.delta"' in resp.text and "function_call" not in resp.text
            assert "event: response.completed" in resp.text
        else:
            (item,) = resp.json()["output"]
            assert item["type"] == "message" and item["content"][0]["text"] == "37 days"
        assert NEEDLE in script.requests[-1]["messages"][-1]["content"]


def test_retrieval_off_offers_nothing(own_store: Store) -> None:
    script = ToolScript()
    with (
        tool_upstream(script) as url,
        proxy_for(url + "/v1", own_store, scope=SCOPE, retrieval="off") as (srv, _),
    ):
        chat(srv.url)
    assert "tools" not in script.requests[0]


def test_auto_offers_nothing_to_an_upstream_whose_template_has_no_tools(
    own_store: Store,
) -> None:
    script = ToolScript(supports_tools=False)
    with tool_upstream(script) as url, proxy_for(url + "/v1", own_store) as (srv, _):
        chat(srv.url)
    assert "tools" not in script.requests[0]


def test_under_auto_stubs_name_only_the_mcp_read_when_the_upstream_has_no_tools(
    own_store: Store,
) -> None:
    script = ToolScript(supports_tools=False)
    with tool_upstream(script) as url, proxy_for(url + "/v1", own_store) as (srv, _):
        payload = {"messages": _big_log_messages(), "max_tokens": 8}
        assert httpx.post(srv.url + CHAT, json=payload, timeout=30).status_code == 200
    wire = json.dumps(script.requests[0]["messages"])
    assert "module_799.c" not in wire  # the log left the wire as a stub
    assert 'read(ref=\\"ctx:sha256:' in wire
    assert "offload_read" not in wire and "offload_search" not in wire


def _big_log_messages() -> list[dict[str, Any]]:
    # larger than the window at any calibration the module's earlier requests left
    log = "\n".join(f"build step {i}: compiled module_{i}.c in {i * 7} ms" for i in range(800))
    messages: list[dict[str, Any]] = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", "cat")]},
        {"role": "tool", "tool_call_id": "c1", "content": log},
    ]
    for i in range(4):
        messages += [
            {"role": "assistant", "content": f"step {i} done"},
            {"role": "user", "content": f"go on {i}"},
        ]
    return messages


def test_a_model_behind_the_proxy_alone_expands_a_stub_with_the_read_tool(
    proxy: str, script: ToolScript
) -> None:
    payload = {"messages": _big_log_messages(), "max_tokens": 8}
    assert httpx.post(proxy + CHAT, json=payload, timeout=30).status_code == 200
    wire = json.dumps(script.requests[0]["messages"])
    assert "module_399.c" not in wire and "module_799.c" not in wire  # the log left the wire
    found = re.search(r'offload_read\(ref=\\"([^"\\]+)\\"', wire)
    assert found is not None, wire[:2000]
    ref = found.group(1)
    call = json.dumps({"ref": ref, "offset": 390, "limit": 20})
    script.requests.clear()
    script.turns = [Turn(calls=[(READ_TOOL, call)]), Turn(text="module 399 took 2793 ms")]
    resp = httpx.post(proxy + CHAT, json=payload, timeout=30)
    assert resp.json()["choices"][0]["message"]["content"] == "module 399 took 2793 ms"
    answer = script.requests[1]["messages"][-1]["content"]
    assert "module_399.c in 2793 ms" in answer


def _call(call_id: str, name: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def test_an_upstream_that_refuses_tools_is_asked_again_without_them_and_never_offered_more(
    own_store: Store,
) -> None:
    script = ToolScript(refuse_tools=True)
    with tool_upstream(script) as url, proxy_for(url + "/v1", own_store) as (srv, _):
        first = chat(srv.url)
        second = chat(srv.url)
    assert (first.status_code, second.status_code) == (200, 200)
    assert [bool(r.get("tools")) for r in script.requests] == [True, False, False]
    assert script.requests[1] == {"messages": MESSAGES, "max_tokens": 32}


def true_prompt(messages: list[dict[str, Any]]) -> int:
    """The prompt size of an upstream whose tokens run 1.5 to each offline estimate, with
    the template's framing per message."""
    raw = sum(default_counter().count(t) for t in message_texts(messages))
    return TEMPLATE_TOKENS_PER_MESSAGE * len(messages) + round(1.5 * raw)


@pytest.mark.parametrize("stream", [False, True])
def test_calibration_weighs_the_summed_usage_against_every_rounds_messages(
    own_store: Store, stream: bool
) -> None:
    script = ToolScript(prompt_of=true_prompt)
    script.turns = [
        Turn(text=None, calls=[(SEARCH_TOOL, json.dumps({"query": "deploy key rotate"}))]),
        Turn(text="Every 37 days."),
    ]
    with (
        tool_upstream(script) as url,
        proxy_for(url + "/v1", own_store, scope=SCOPE) as (srv, _),
    ):
        page_out(own_store)
        resp = chat(srv.url, stream=stream, stream_options={"include_usage": True})
        assert resp.status_code == 200
        metrics = httpx.get(srv.url + "/metrics", timeout=10).text
    assert len(script.requests) == 2
    gauge = re.search(r"^\w*token_calibration_ratio(?:\{[^}]*\})? ([\d.]+)$", metrics, re.M)
    assert gauge is not None
    ratio = float(gauge[1])
    assert ratio == pytest.approx(1.5, abs=0.01)  # one round's messages alone: 2.0, clamped


def test_a_second_search_leaves_out_what_the_first_round_showed(
    proxy: str, script: ToolScript, store: Store
) -> None:
    page_out(store)
    search = (SEARCH_TOOL, json.dumps({"query": "deploy key rotate"}))
    script.turns = [Turn(calls=[search]), Turn(calls=[search]), Turn(text="Every 37 days.")]
    resp = chat(proxy)
    assert resp.json()["choices"][0]["message"]["content"] == "Every 37 days."
    first, second = (m["content"] for m in script.requests[2]["messages"] if m["role"] == "tool")
    assert NEEDLE in first and NEEDLE not in second
    assert second.startswith("every memory match of 'deploy key rotate' is already in")
