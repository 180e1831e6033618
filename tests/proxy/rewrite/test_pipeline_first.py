"""The first request a pipeline sees of a long session (a client coming to a fresh proxy
with its whole history) prices the stubs of what stays on the wire, not of every message
it pages out: each stub priced is a stub rendered and counted (with a real upstream, a
``/tokenize`` round trip)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offload.config import ProxySettings
from offload.core.stubs import is_stub
from offload.core.tokens import EstimateCounter
from offload.proxy.rewrite.pipeline import Pipeline
from offload.store.store import Store

Msgs = list[dict[str, Any]]
N_CTX = 2048  # stub threshold 40 tokens


class StubCounts:
    """The estimate, counting how many stub texts it was asked to count."""

    def __init__(self) -> None:
        self.inner = EstimateCounter()
        self.stubs = 0

    def count(self, text: str) -> int:
        if is_stub(text):
            self.stubs += 1
        return self.inner.count(text)


def history(messages: int) -> Msgs:
    """User and assistant turns of 1 to 1.5 times the stub threshold, each different."""
    msgs: Msgs = [{"role": "system", "content": "You answer questions about the ledger."}]
    for i in range(messages):
        role = "user" if i % 2 == 0 else "assistant"
        words = " ".join(f"entry{i}x{k} balance {k * i % 97}" for k in range(10 + i % 5))
        msgs.append({"role": role, "content": words})
    if msgs[-1]["role"] != "user":
        msgs.append({"role": "user", "content": "And the total?"})
    return msgs


def first_request(tmp_path: Path, messages: int) -> tuple[int, int, int]:
    """(stubs counted, messages on the wire, messages paged out) of a session's first
    request to a fresh pipeline."""
    counter = StubCounts()
    msgs = history(messages)
    with Store(tmp_path / f"{messages}.db", counter=counter.inner) as store:
        pipeline = Pipeline(store, ProxySettings(), counter)
        assert pipeline.stubs.content_tokens(msgs[1]["content"]) > N_CTX * 0.02
        result = pipeline.rewrite(msgs, N_CTX)
    assert result.windowed
    return counter.stubs, len(result.messages), len(msgs) - len(result.messages)


def test_a_long_sessions_first_request_renders_stubs_only_near_what_stays_on_the_wire(
    tmp_path: Path,
) -> None:
    small = first_request(tmp_path, 150)
    large = first_request(tmp_path, 750)
    assert large[2] > 700  # nearly all of it paged out
    # a stub counted per message on the wire, the range stubs, and one group beyond
    assert large[0] <= large[1] + 6
    assert large[0] <= small[0] + 2  # five times the history, not five times the stubs
