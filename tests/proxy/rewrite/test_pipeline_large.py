"""A large newest message: shown as its first and last lines, and kept so on the wire."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from offload.config import ProxySettings
from offload.core.tokens import EstimateCounter
from offload.proxy.rewrite.messages import message_tokens
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.stubs.expand import expand
from offload.proxy.rewrite.window import LARGE_THRESHOLDS, Budget, large
from offload.proxy.rewrite.wire import keeps_ends
from offload.store.store import Store

Msgs = list[dict[str, Any]]
N_CTX = 8192  # threshold 163: a message over 2,037 tokens is large; ceiling 6,963


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as s:
        yield s


def lines(tag: str, n: int) -> str:
    return "\n".join(
        f"{tag} line {i}: value={i * 7} status=ok path=/srv/{tag}/{i}" for i in range(n)
    )


def opening(output: str) -> Msgs:
    call = {"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}
    return [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Find the failing test."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": output},
    ]


def test_a_message_is_large_past_a_quarter_of_the_window_at_the_default_stub_ratio() -> None:
    budget = Budget.of(ProxySettings(), N_CTX)
    assert LARGE_THRESHOLDS * budget.threshold == pytest.approx(N_CTX / 4, rel=0.01)
    assert large(N_CTX // 4 + 20, budget.threshold)
    assert not large(N_CTX // 4 - 20, budget.threshold)


def test_a_large_newest_output_arrives_as_its_first_and_last_lines_with_the_read_call(
    store: Store,
) -> None:
    msgs = opening(lines("out", 200))
    counter = EstimateCounter()
    size = message_tokens(counter, msgs[-1])
    assert 2_100 < size < 6_963 - 1_000  # it would fit whole, with room to spare
    pipe = Pipeline(store, ProxySettings(recall_ratio=0.0), counter)
    first = pipe.rewrite(msgs, N_CTX)
    shown = first.messages[-1]["content"]
    assert shown != msgs[-1]["content"]
    assert "its first and last lines" in shown
    assert "out line 0:" in shown and "out line 199:" in shown  # both ends kept
    assert "out line 100:" not in shown  # the middle read on demand
    assert 'read(ref="ctx:sha256:' in shown and "offset=" in shown
    assert first.wire_tokens < size
    assert expand(store, first.messages) == msgs


def test_a_large_output_keeps_its_form_on_later_turns_so_the_prefix_holds(
    store: Store,
) -> None:
    msgs = opening(lines("out", 200))
    pipe = Pipeline(store, ProxySettings(recall_ratio=0.0), EstimateCounter())
    first = pipe.rewrite(msgs, N_CTX)
    for t in range(3):  # the output goes through the tail and out of it
        msgs += [{"role": "assistant", "content": f"step {t}"}, {"role": "user", "content": "go"}]
        later = pipe.rewrite(msgs, N_CTX)
        assert later.prefix_kept, later.break_cause
        assert later.messages[: len(first.messages)] == first.messages
        assert expand(store, later.messages) == msgs


def test_a_newest_output_under_a_quarter_of_the_window_goes_whole(store: Store) -> None:
    msgs = opening(lines("out", 100))
    counter = EstimateCounter()
    assert message_tokens(counter, msgs[-1]) < N_CTX // 4
    pipe = Pipeline(store, ProxySettings(recall_ratio=0.0), counter)
    assert pipe.rewrite(msgs, N_CTX).messages[-1] == msgs[-1]


def test_with_no_read_tool_offered_a_large_output_that_fits_goes_whole(store: Store) -> None:
    msgs = opening(lines("out", 200))
    pipe = Pipeline(store, ProxySettings(recall_ratio=0.0, retrieval="off"), EstimateCounter())
    assert pipe.rewrite(msgs, N_CTX).messages[-1] == msgs[-1]


def test_a_large_output_that_arrived_beside_another_gets_the_plain_stub_when_forced() -> None:
    msgs = opening(lines("out", 200))
    msgs[2]["tool_calls"].append(
        {"id": "c2", "type": "function", "function": {"name": "run", "arguments": "{}"}}
    )
    msgs.append({"role": "tool", "tool_call_id": "c2", "content": lines("two", 200)})
    msgs.append({"role": "assistant", "content": "both read"})
    ct = [message_tokens(EstimateCounter(), m) for m in msgs]
    threshold = Budget.of(ProxySettings(), N_CTX).threshold
    assert large(ct[3], threshold) and large(ct[4], threshold)
    assert not keeps_ends(msgs, 3, ct, threshold)  # the client never sent it as the newest
    assert keeps_ends(msgs, 4, ct, threshold)  # the newest of the request before "both read"
