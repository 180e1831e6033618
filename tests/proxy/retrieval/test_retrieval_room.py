"""Room for a retrieval round over real HTTP: when the prompt sits high in the windowing
band, a round whose results would be cut under the ceiling compacts its request first, so
its results keep their size; a round whose results fit leaves the wire as it was."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from offload.core.http.sse import iter_sse_events
from offload.core.tokens import default_counter
from offload.proxy.retrieval import retrieval_loop
from offload.proxy.retrieval.retrieval import SEARCH_TOOL, Answer, Memory, answer_call
from offload.proxy.rewrite import recall
from offload.store.store import Store
from proxy.proxy_servers import proxy_for
from proxy.tool_upstream import ToolScript, Turn, tool_upstream

CHAT = "/v1/chat/completions"
SCOPE = "/work/project"
N_CTX = 4096  # what the scripted upstream's /props says
CEILING = int(0.85 * N_CTX)
NOTES = 8  # notes the search finds, each ~150 tokens: ~1,200 tokens wanted
SYSTEM = {"role": "system", "content": "You are a helpful agent."}
QUESTION = {"role": "user", "content": "When does the deploy key rotate?"}
MARKERS = [f"marker-{k}-kestrel" for k in range(NOTES)]
SEARCH = (SEARCH_TOOL, json.dumps({"query": "deploy key rotate"}))


def turns(start: int, tokens: int, notes: int = 0) -> list[dict[str, Any]]:
    """User and assistant turns, about ``tokens`` long, the first ``notes`` user turns
    each a note on the deploy key with its marker (``marker-K-kestrel``)."""
    counter = default_counter()
    out: list[dict[str, Any]] = []
    i = start
    while len(out) < 2 * notes or counter.count("\n".join(m["content"] for m in out)) < tokens:
        k = (i - start) // 2
        words = " ".join(f"w{i}x{j}" for j in range(20))
        if i % 2:
            out.append({"role": "assistant", "content": f"ack {i}: {words}"})
        elif k < notes:
            filler = " ".join(f"ops{k}n{j}" for j in range(25))
            out.append(
                {"role": "user", "content": f"deploy key rotate note {k}: {MARKERS[k]}\n{filler}"}
            )
        else:
            out.append({"role": "user", "content": f"turn {i} about the garden: {words}"})
        i += 1
    return out if out[-1]["role"] == "assistant" else out[:-1]


def answer_text(resp: httpx.Response, stream: bool) -> str:
    if not stream:
        return str(resp.json()["choices"][0]["message"]["content"])
    objs = [e.json() for e in iter_sse_events([resp.content]) if not e.is_done]
    deltas = (c.get("delta") or {} for o in objs for c in o.get("choices") or ())
    return "".join(d.get("content") or "" for d in deltas)


def wire_tokens(messages: list[dict[str, Any]]) -> int:
    counter = default_counter()
    return sum(counter.count(str(m.get("content") or "")) + 8 for m in messages)


@pytest.fixture
def own_store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "offload.db") as s:
        yield s


def play(
    store: Store, added: int, turns_after: list[Turn], stream: bool = False
) -> tuple[ToolScript, str]:
    """A chat whose notes were paged out by a first turn over the high water, then a
    turn adding ``added`` tokens and a question the scripted model searches memory for;
    the requests the upstream saw and the proxy's metrics."""
    hello = [{"role": "user", "content": "Hello."}, {"role": "assistant", "content": "Hi."}]
    early = [SYSTEM, *hello, *turns(0, int(0.9 * N_CTX), notes=NOTES)]  # the head: pinned
    opening = [*early, {"role": "user", "content": "Go on."}]
    later = [*early, *turns(len(early) + 1000, added), QUESTION]
    script = ToolScript()
    script.turns = [Turn(text="On it."), Turn(calls=[SEARCH]), Turn(text="Every 37 days.")]
    script.turns += turns_after
    with tool_upstream(script) as url, proxy_for(url + "/v1", store, scope=SCOPE) as (srv, _):
        httpx.post(srv.url + CHAT, json={"messages": opening}, timeout=30)  # pages notes out
        body = {"messages": later, "stream": stream}
        resp = httpx.post(srv.url + CHAT, json=body, timeout=30)
        assert resp.status_code == 200
        assert answer_text(resp, stream) == "Every 37 days."
        if turns_after:
            said = {"role": "assistant", "content": "Every 37 days."}
            after = [*later, said, {"role": "user", "content": "Thanks."}]
            httpx.post(srv.url + CHAT, json={"messages": after}, timeout=30)
        metrics = httpx.get(srv.url + "/metrics", timeout=10).text
    return script, metrics


@pytest.mark.parametrize("stream", [False, True])
def test_a_round_whose_results_would_be_cut_compacts_its_request_first(
    own_store: Store, stream: bool
) -> None:
    # the second turn sits high in the band, under the high water: no compaction of its own
    script, metrics = play(own_store, int(0.5 * N_CTX), [Turn(text="Sure.")], stream)
    _, asked, continuation, next_turn = (r["messages"] for r in script.requests)
    assert continuation[-1]["role"] == "tool"
    seen = "\n".join(str(m.get("content")) for m in continuation)
    assert all(m in seen for m in MARKERS)  # nothing of the results cut
    assert len(continuation) - 2 < len(asked)  # the history was compacted to make room
    assert wire_tokens(continuation) <= CEILING
    assert "offload_proxy_retrieval_compacted_rounds_total 1.0" in metrics
    # the next turn continues from the compacted history: the break was paid once (a
    # recall block after the question is the round's own, as on any turn)
    asked_at = continuation.index(QUESTION)
    assert next_turn[: asked_at + 1] == continuation[: asked_at + 1]


def test_a_round_whose_results_fit_keeps_the_wire_as_it_was(own_store: Store) -> None:
    script, metrics = play(own_store, 200, [])
    _, asked, continuation = (r["messages"] for r in script.requests)
    assert continuation[: len(asked)] == asked
    seen = "\n".join(str(m.get("content")) for m in continuation)
    assert all(m in seen for m in MARKERS)
    assert "offload_proxy_retrieval_compacted_rounds_total 0.0" in metrics


def test_a_compacted_rounds_calls_are_answered_once(
    own_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # answered with room to spare to learn their size, then again after the compaction:
    # every search and read of the round ran twice
    answered: list[str] = []

    def counted(memory: Memory, name: str, arguments: str) -> Answer:
        answered.append(name)
        return answer_call(memory, name, arguments)

    monkeypatch.setattr(retrieval_loop, "answer_call", counted)
    script, metrics = play(own_store, int(0.5 * N_CTX), [])
    assert "offload_proxy_retrieval_compacted_rounds_total 1.0" in metrics
    assert answered == [SEARCH_TOOL]
    continuation = script.requests[2]["messages"]
    seen = "\n".join(str(m.get("content")) for m in continuation)
    assert all(m in seen for m in MARKERS)  # its answer whole, as before


def test_a_round_of_hundreds_of_calls_runs_searches_for_the_window_not_for_each_call(
    own_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # their size was learned with unbounded room: every call of a model that asked for
    # 300 searches in one answer ran a whole search, twice
    searched: list[str] = []
    find = recall.find

    def counted(*args: Any, **kwargs: Any) -> Any:
        searched.append("find")
        return find(*args, **kwargs)

    monkeypatch.setattr(recall, "find", counted)
    script = ToolScript()
    script.turns = [Turn(text="On it."), Turn(calls=[SEARCH] * 300), Turn(text="Every 37 days.")]
    hello = [{"role": "user", "content": "Hello."}, {"role": "assistant", "content": "Hi."}]
    early = [SYSTEM, *hello, *turns(0, int(0.9 * N_CTX), notes=NOTES)]
    later = [*early, *turns(len(early) + 1000, int(0.5 * N_CTX)), QUESTION]
    with tool_upstream(script) as url, proxy_for(url + "/v1", own_store, scope=SCOPE) as (srv, _):
        httpx.post(srv.url + CHAT, json={"messages": [*early, {"role": "user", "content": "Go."}]})
        resp = httpx.post(srv.url + CHAT, json={"messages": later}, timeout=120)
    assert resp.status_code == 200 and answer_text(resp, False) == "Every 37 days."
    continuation = script.requests[2]["messages"]
    assert sum(1 for m in continuation if m["role"] == "tool") == 300  # each call answered
    assert len(searched) <= 40, len(searched)  # what fits the window, not 2 x 300
