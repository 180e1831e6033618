"""Transparent retrieval end to end against a real llama.cpp server (xllamacpp +
SmolLM2-135M). SmolLM2 calls no tools, so the model's decision to look something up is
scripted (the first answer of a recording hop in front of the server); every continuation
is answered by the real model, and the client gets its answer as one ordinary response."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from offload.core.http.sse import iter_sse_events
from offload.proxy.retrieval.retrieval import DEFINITIONS, SEARCH_TOOL
from offload.proxy.rewrite.messages import head_end, session_key
from offload.store.store import Store
from proxy.proxy_servers import proxy_for
from proxy.tool_upstream import ToolScript, Turn, tool_upstream
from realparts import LlamaServer

pytestmark = pytest.mark.slow

SCOPE = "/work/e2e"
NEEDLE = "the staging database password rotates on the first Monday"
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You answer in one short sentence."},
    {"role": "user", "content": "When does the staging database password rotate?"},
]


@pytest.fixture(scope="module")
def llama(start_llama: Callable[[int], LlamaServer]) -> LlamaServer:
    return start_llama(4096)


@pytest.fixture(scope="module")
def served(
    llama: LlamaServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ToolScript, str]]:
    """The proxy (retrieval on) -> a recording hop that scripts the first answer when told
    -> the real server."""
    script = ToolScript(forward_to=llama.base_url)
    with (
        Store(tmp_path_factory.mktemp("e2e-retrieval") / "offload.db") as store,
        tool_upstream(script) as hop,
        proxy_for(hop + "/v1", store, scope=SCOPE, retrieval="on") as (srv, _),
    ):
        session = session_key(MESSAGES[: head_end(MESSAGES)])
        text = f"## #3 tool (notes)\nfrom the ops handbook:\n{NEEDLE}"
        store.put(text, kind="proxy", source=f"proxy:{session}:2-4", scope=SCOPE)
        yield script, srv.url


def _reset(script: ToolScript, turns: list[Turn]) -> ToolScript:
    script.requests.clear()
    script.turns[:] = turns
    return script


def _openai(url: str, stream: bool) -> str:
    body = {"messages": MESSAGES, "max_tokens": 24, "temperature": 0, "stream": stream}
    resp = httpx.post(url + "/v1/chat/completions", json=body, timeout=300)
    assert resp.status_code == 200, resp.text[:300]
    if not stream:
        message = resp.json()["choices"][0]["message"]
        assert "tool_calls" not in message
        return str(message["content"])
    assert resp.text.count("[DONE]") == 1 and "offload_" not in resp.text
    objs = [e.json() for e in iter_sse_events([resp.content]) if not e.is_done]
    return "".join(
        (c.get("delta") or {}).get("content") or "" for o in objs for c in o.get("choices") or ()
    )


def _anthropic(url: str, stream: bool) -> str:
    body = {
        "model": "smollm2",
        "max_tokens": 24,
        "system": MESSAGES[0]["content"],
        "messages": [MESSAGES[1]],
        "stream": stream,
    }
    resp = httpx.post(url + "/v1/messages", json=body, timeout=300)
    assert resp.status_code == 200, resp.text[:300]
    assert "tool_use" not in resp.text
    if not stream:
        return "".join(b["text"] for b in resp.json()["content"] if b["type"] == "text")
    texts = []
    for event in iter_sse_events([resp.content]):
        obj = event.json()
        if obj.get("type") == "content_block_delta":
            texts.append(obj["delta"]["text"])
    assert '"message_stop"' in resp.text
    return "".join(texts)


def _responses(url: str, stream: bool) -> str:
    body = {
        "model": "smollm2",
        "max_output_tokens": 24,
        "instructions": MESSAGES[0]["content"],
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": MESSAGES[1]["content"]}]}
        ],
        "stream": stream,
    }
    resp = httpx.post(url + "/v1/responses", json=body, timeout=300)
    assert resp.status_code == 200, resp.text[:300]
    assert "function_call" not in resp.text
    if not stream:
        output = resp.json()["output"]
        return "".join(p["text"] for item in output for p in item["content"])
    texts = []
    for event in iter_sse_events([resp.content]):
        obj = event.json()
        if obj.get("type") == "response.output_text.delta":
            texts.append(obj["delta"])
    assert "event: response.completed" in resp.text or "event: response.incomplete" in resp.text
    return "".join(texts)


ROUTES = [("openai", _openai), ("anthropic", _anthropic), ("responses", _responses)]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("route", "ask"), ROUTES)
def test_the_real_server_answers_with_the_tools_offered_and_unused(
    served: tuple[ToolScript, str], route: str, ask: Callable[[str, bool], str], stream: bool
) -> None:
    script, url = served
    _reset(script, [])
    assert ask(url, stream).strip()
    (sent,) = script.requests
    assert sent["tools"][: len(DEFINITIONS)] == list(DEFINITIONS)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("route", "ask"), ROUTES)
def test_a_scripted_search_round_is_continued_by_the_real_model(
    served: tuple[ToolScript, str], route: str, ask: Callable[[str, bool], str], stream: bool
) -> None:
    script, url = served
    search = (SEARCH_TOOL, json.dumps({"query": "staging database password rotate"}))
    _reset(script, [Turn(calls=[search])])
    answer = ask(url, stream)
    assert answer.strip()  # the real model's words, after the proxy's round
    first, continuation = script.requests
    assert continuation["messages"][: len(first["messages"])] == first["messages"]
    result = continuation["messages"][-1]
    assert result["role"] == "tool" and NEEDLE in result["content"]
