"""What a stub says of its size while the upstream's /tokenize is paused, and after.

A count made while exact counting is paused is the offline estimate: the stub says so
(``~N tokens (estimated)``), and keeps saying exactly that on every later turn of this
process, exact counting back or not, so the wire the upstream has cached stays its prefix.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from offload.config import ProxySettings
from offload.core.tokens import EstimateCounter
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.stubs.message_stubs import StubMaker
from offload.proxy.transport.counting import UpstreamCounter
from offload.store.store import Store
from proxy.proxy_servers import serving

Msgs = list[dict[str, Any]]
ESTIMATED = "tokens (estimated)"


@dataclass
class Upstream:
    """A /tokenize of one token per word that fails while ``down``; the counter's clock."""

    down: bool = False
    now: float = 0.0

    def pause(self) -> None:
        """/tokenize fails: the next count falls back and pauses exact counting."""
        self.down = True

    def resume(self, counter: UpstreamCounter) -> None:
        """/tokenize answers again and the pause is over."""
        self.down = False
        self.now += 31.0
        assert counter.exact


@pytest.fixture
def upstream() -> Iterator[tuple[Upstream, UpstreamCounter]]:
    state = Upstream()

    async def tokenize(request: Request) -> Response:
        if state.down:
            return Response(status_code=503)
        text = json.loads(await request.body())["content"]
        return JSONResponse({"tokens": list(range(len(text.split())))})

    app = Starlette(routes=[Route("/tokenize", tokenize, methods=["POST"])])
    with serving(app) as server:
        counter = UpstreamCounter(server.url, retry_after_s=30, clock=lambda: state.now)
        yield state, counter
        counter.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as s:
        yield s


def output(name: str, words: int = 300) -> dict[str, Any]:
    rows = [f"{name} row {i} holds value {i * 7} of the ledger" for i in range(words // 8)]
    return {"role": "tool", "tool_call_id": name, "content": "\n".join(rows)}


def test_a_stub_made_while_counting_is_paused_says_so_and_keeps_its_bytes_once_it_is_back(
    upstream: tuple[Upstream, UpstreamCounter], store: Store
) -> None:
    state, counter = upstream
    maker = StubMaker(store, counter, scope="proxy")
    counted = output("counted")
    before = maker.worth_stubbing(counted, "bash:1", 20)  # counted exactly
    state.pause()
    paused = maker.worth_stubbing(output("paused"), "bash:2", 20)
    assert before is not None and paused is not None
    assert ESTIMATED in paused.stub and ESTIMATED not in before.stub
    # exactly counted before the pause, rendered again during it: still exact
    maker.shrink_caches(1 << 30)
    assert maker.worth_stubbing(counted, "bash:1", 20) == before
    state.resume(counter)
    # exact counting back, a quiet proxy's caches let go: the same bytes, not the exact count
    maker.shrink_caches(1 << 30)
    again = maker.worth_stubbing(output("paused"), "bash:2", 20)
    assert again is not None and again.stub == paused.stub
    # what is counted from now on is exact
    fresh = maker.worth_stubbing(output("fresh"), "bash:3", 20)
    assert fresh is not None and ESTIMATED not in fresh.stub
    assert f"— {fresh.tokens:,} tokens," in fresh.stub


def session(last: str) -> Msgs:
    """A task, one read of a long output, and a short exchange after it."""
    call = {"id": "read", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    return [
        {"role": "system", "content": "You keep the ledger."},
        {"role": "user", "content": "Check the ledger."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {**output("read", 700), "tool_call_id": "read"},
        {"role": "assistant", "content": "The ledger is long; it balances."},
        {"role": "user", "content": "Which row is the largest?"},
        {"role": "assistant", "content": "The last one."},
        {"role": "user", "content": last},
    ]


def test_a_wire_built_again_after_the_pause_keeps_the_estimated_stub_it_sent(
    upstream: tuple[Upstream, UpstreamCounter], store: Store
) -> None:
    state, counter = upstream
    pipeline = Pipeline(store, ProxySettings(), counter)
    state.pause()
    paused = pipeline.rewrite(session("And the smallest?"), 1000)
    stubbed = [m for m in paused.messages if m["role"] == "tool"]
    assert stubbed and ESTIMATED in stubbed[0]["content"]
    state.resume(counter)
    pipeline.shrink_caches(1 << 30)
    # the client retries its last message reworded: the wire is planned and built again,
    # with exact counts now, up to the message that changed
    again = pipeline.rewrite(session("And the smallest row?"), 1000)
    assert again.messages[:-1] == paused.messages[:-1]


def chat(topic: str, turns: int) -> Msgs:
    """A conversation's request after ``turns`` exchanges: it ends with a user message."""
    msgs: Msgs = [{"role": "system", "content": f"You discuss {topic}."}]
    for t in range(turns + 1):
        said = " ".join(f"{topic} point {t}.{k} stands" for k in range(8))
        msgs += [{"role": "user", "content": said}, {"role": "assistant", "content": said}]
    return msgs[:-1]


def range_stub(wire: Msgs) -> str:
    """The first line of the wire's range stub."""
    text = next(str(m["content"]) for m in wire if "earlier messages from" in str(m["content"]))
    return text.split("\n")[0]


def test_a_range_summing_counts_made_while_paused_says_its_size_is_an_estimate(
    upstream: tuple[Upstream, UpstreamCounter], store: Store
) -> None:
    state, counter = upstream
    pipeline = Pipeline(store, ProxySettings(), counter)
    state.pause()
    paused = pipeline.rewrite(chat("tides", 30), 1000)
    assert paused.windowed and ESTIMATED in range_stub(paused.messages)
    state.resume(counter)
    # the range grows, by messages counted while paused and then by exact ones only: its
    # size still sums the estimates
    ranges = []
    for turns in range(31, 90):
        result = pipeline.rewrite(chat("tides", turns), 1000)
        if result.windowed:
            ranges.append(range_stub(result.messages))
    assert len(ranges) >= 3 and all(ESTIMATED in r for r in ranges)
    # a conversation counted exactly throughout
    exact = pipeline.rewrite(chat("winds", 30), 1000)
    assert exact.windowed and ESTIMATED not in range_stub(exact.messages)
