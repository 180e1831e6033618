"""End to end against a real llama.cpp server (xllamacpp + SmolLM2-135M, n_ctx 2048).

The session is a real tau-bench agent transcript (``tests/data/traces``): sent direct it
overflows the server's context; through the proxy it completes, and the next turn reuses the
server's prompt cache.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from offload.core.http.sse import iter_sse_events, stream_text
from offload.proxy.rewrite.replay import load_runs
from offload.store.store import Store
from proxy.heavy_calls import heavy_call_runs
from proxy.proxy_servers import proxy_for
from realparts import TRACES, LlamaServer, ServerThread

pytestmark = pytest.mark.slow

CHAT = "/v1/chat/completions"
N_CTX = 2048


def tau_session(turns: int = 12) -> list[dict[str, Any]]:
    """The first messages of the first tau-bench airline run (tool calls included)."""
    with (TRACES / "taubench_gpt4o_airline.jsonl").open() as fh:
        run = json.loads(fh.readline())
    messages: list[dict[str, Any]] = run["messages"][:turns]
    return messages


@pytest.fixture(scope="module")
def llama(start_llama: Callable[[int], LlamaServer]) -> LlamaServer:
    """The real server with a 2048-token context."""
    return start_llama(N_CTX)


@pytest.fixture(scope="module")
def proxied(
    llama: LlamaServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerThread, Any]]:
    """The proxy in front of the real server: (server, the app's ProxyState)."""
    with (
        Store(tmp_path_factory.mktemp("e2e") / "offload.db") as store,
        proxy_for(llama.base_url, store) as (server, _settings),
    ):
        yield server, proxy_state(server.app)


def proxy_state(app: Any) -> Any:
    """The proxy's ProxyState under the middleware that wraps its Starlette app (the
    Host/Origin guard, the body limit): each wrapper keeps the app it wraps as ``app``."""
    for _ in range(8):
        if hasattr(app, "state"):
            return app.state.proxy
        app = app.app
    raise AssertionError("no Starlette app with a state under the proxy's middleware")


def test_non_streaming_and_streaming_chat_work_through_the_proxy(
    proxied: tuple[ServerThread, Any],
) -> None:
    server, _state = proxied
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
    plain = httpx.post(server.url + CHAT, json=body, timeout=120)
    assert plain.status_code == 200, plain.text
    assert plain.json()["choices"][0]["message"]["content"]
    chunks: list[bytes] = []
    with httpx.stream("POST", server.url + CHAT, json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        chunks.extend(r.iter_raw())
    events = list(iter_sse_events(chunks))
    assert events[-1].is_done
    assert stream_text(events)


def test_n_ctx_comes_from_props_and_counts_from_tokenize(
    proxied: tuple[ServerThread, Any], llama: LlamaServer
) -> None:
    server, state = proxied
    upstream = httpx.get(server.url + "/api/stats").json()["upstream"]
    assert upstream["n_ctx"] == N_CTX and upstream["n_ctx_source"] == "props"
    listing = httpx.get(server.url + "/v1/models").json()
    assert listing["data"][0]["context_length"] == N_CTX
    text = tau_session(1)[0]["content"]
    direct = len(httpx.post(llama.base_url + "/tokenize", json={"content": text}).json()["tokens"])
    assert state.counter.count(text) == direct
    assert upstream["exact_token_counts"] is True


def test_a_session_that_overflows_direct_completes_through_the_proxy_and_reuses_the_cache(
    proxied: tuple[ServerThread, Any], llama: LlamaServer
) -> None:
    server, _state = proxied
    messages = tau_session(12)
    body = {"messages": messages, "max_tokens": 8, "temperature": 0}
    direct = httpx.post(llama.base_url + CHAT, json=body, timeout=120)
    assert direct.status_code == 400
    assert direct.json()["error"]["type"] == "exceed_context_size_error"

    first = httpx.post(server.url + CHAT, json=body, timeout=300)
    assert first.status_code == 200, first.text
    reply = first.json()["choices"][0]["message"]["content"] or "ok"

    follow = [*messages, {"role": "assistant", "content": reply}]
    follow.append({"role": "user", "content": "Thanks. And what about my baggage allowance?"})
    second = httpx.post(server.url + CHAT, json={**body, "messages": follow}, timeout=300).json()
    timings = second["timings"]
    assert timings["cache_n"] > 0.5 * (timings["cache_n"] + timings["prompt_n"]), timings
    whole = httpx.get(server.url + "/api/stats").json()
    stats = whole["live"]
    assert stats["cache_reuse_ratio"] > 0
    assert stats["counters"]["tokens_saved"] > 0
    # what the page-out stored went through the writer beside the upstream, and is stored
    assert whole["writes"]["done"] > 0 and whole["writes"]["failed"] == 0


def responses_input(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as the Responses input items a Responses client sends for them."""
    items: list[dict[str, Any]] = []
    for m in messages:
        text = m.get("content") or ""
        if m["role"] == "tool":
            items.append(
                {"type": "function_call_output", "call_id": m["tool_call_id"], "output": text}
            )
            continue
        if m["role"] != "assistant":
            items.append({"role": m["role"], "content": text})
        elif text:
            part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
            items.append({"type": "message", "role": "assistant", "content": [part]})
        for call in m.get("tool_calls") or ():
            fn = call["function"]
            items.append(
                {
                    "type": "function_call",
                    "call_id": call["id"],
                    "name": fn["name"],
                    "arguments": fn["arguments"],
                }
            )
    return items


def test_a_responses_session_that_overflows_direct_completes_through_the_proxy(
    proxied: tuple[ServerThread, Any],
) -> None:
    server, _state = proxied
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    items: Any = responses_input(tau_session(12))  # the SDK's input types: plain dicts here
    first = client.responses.create(
        model="smollm2", input=items, max_output_tokens=8, temperature=0
    )
    assert first.status in ("completed", "incomplete") and first.usage is not None
    assert 0 < first.usage.input_tokens < N_CTX
    follow: Any = [*items, *(item.model_dump() for item in first.output)]
    follow.append({"role": "user", "content": "Thanks. And what about my baggage allowance?"})
    with client.responses.stream(
        model="smollm2", input=follow, max_output_tokens=8, temperature=0
    ) as stream:
        # cut at 8 tokens the answer ends with response.incomplete, which the SDK's
        # get_final_response (response.completed only) does not take
        last = list(stream)[-1]
    assert last.type in ("response.completed", "response.incomplete")
    second = last.response
    assert second.usage is not None
    assert second.usage.input_tokens_details.cached_tokens > 0.5 * second.usage.input_tokens
    client.close()


def test_a_single_message_larger_than_n_ctx_is_stubbed_not_forwarded_raw(
    proxied: tuple[ServerThread, Any], llama: LlamaServer
) -> None:
    server, _state = proxied
    dump = "\n".join(f"line {i}: value={i * 7919 % 10007} status=ok" for i in range(600))
    messages = [
        {"role": "user", "content": f"Here is the log:\n{dump}"},
        {"role": "user", "content": "Which line has value 7919?"},
    ]
    body = {"messages": messages, "max_tokens": 8}
    assert httpx.post(llama.base_url + CHAT, json=body, timeout=120).status_code == 400
    before = httpx.get(server.url + "/api/stats").json()["live"]["counters"]["stubs_made"]
    resp = httpx.post(server.url + CHAT, json=body, timeout=300)
    assert resp.status_code == 200, resp.text
    assert resp.json()["usage"]["prompt_tokens"] < N_CTX
    after = httpx.get(server.url + "/api/stats").json()["live"]["counters"]["stubs_made"]
    assert after > before


def test_a_tail_of_whole_file_tool_calls_reaches_the_real_server_with_its_arguments_stubbed(
    proxied: tuple[ServerThread, Any], llama: LlamaServer
) -> None:
    # two whole-file calls from the coding-agent runs derived from the SWE-agent trace,
    # each with its result, then the user's next request: the tail alone is over n_ctx
    runs = heavy_call_runs(load_runs(TRACES / "swe_agent_demos.jsonl"))
    head = runs[0].messages[:2]
    groups: list[dict[str, Any]] = []
    for msg, answer in itertools.pairwise(runs[0].messages):
        args = [c["function"]["arguments"] for c in msg.get("tool_calls") or ()]
        if len(args) == 1 and len(args[0]) > 4000 and answer["role"] == "tool":
            groups += [msg, answer]
        if len(groups) == 4:
            break
    assert len(groups) == 4
    messages = [*head, *groups, {"role": "user", "content": "Now run the tests."}]
    body = {"messages": messages, "max_tokens": 8, "temperature": 0}
    direct = httpx.post(llama.base_url + CHAT, json=body, timeout=120)
    assert direct.status_code == 400, direct.text[:200]
    resp = httpx.post(proxied[0].url + CHAT, json=body, timeout=300)
    assert resp.status_code == 200, resp.text[:300]
    assert resp.json()["usage"]["prompt_tokens"] < N_CTX
