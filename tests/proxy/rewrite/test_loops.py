"""The loop guard: a spiral of identical assistant turns gets a short note on the wire."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from offload.config import ProxySettings
from offload.core.tokens import EstimateCounter
from offload.proxy.rewrite import loops
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.replay import load_runs, turn_points
from offload.proxy.rewrite.stubs.expand import expand, is_proxy_note
from offload.proxy.rewrite.stubs.parts import LOOP_MARKER
from offload.store.store import Store
from realparts import TRACES

Msgs = list[dict[str, Any]]


def calling(name: str, args: dict[str, Any], cid: str) -> Msgs:
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": cid,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": cid, "content": "no such file"},
    ]


def opening() -> Msgs:
    return [{"role": "system", "content": "agent"}, {"role": "user", "content": "Open the config."}]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as s:
        yield s


def test_the_same_call_three_times_in_a_row_gets_a_note_and_is_counted(store: Store) -> None:
    msgs = opening()
    for i in range(3):
        msgs += calling("cat", {"path": "conf.yml"}, f"c{i}")
    result = Pipeline(store, ProxySettings(), EstimateCounter()).rewrite(msgs, 8192)
    assert result.loop_broken
    last = result.messages[-1]
    assert is_proxy_note(last) and last["content"].startswith(LOOP_MARKER)
    assert "cat" in last["content"] and "3 times" in last["content"]
    assert expand(store, result.messages) == msgs


def test_call_ids_do_not_matter_but_arguments_do() -> None:
    same = opening()
    for i in range(3):
        same += calling("cat", {"path": "conf.yml"}, f"id{i}")
    assert loops.spiral(same, 3) is not None
    varied = opening()
    for i in range(3):
        varied += calling("cat", {"path": f"conf{i}.yml"}, f"id{i}")
    assert loops.spiral(varied, 3) is None


def test_the_same_text_three_times_is_a_spiral_and_a_user_message_resets_it() -> None:
    msgs = opening()
    for _ in range(3):
        msgs += [
            {"role": "assistant", "content": "I will check."},
            {"role": "tool", "tool_call_id": "x", "content": "?"},
        ]
    assert loops.spiral(msgs, 3) is not None
    interrupted = [*msgs[:-4], {"role": "user", "content": "go on"}, *msgs[-4:]]
    assert loops.spiral(interrupted, 3) is None


def test_two_repeats_or_a_zero_setting_leave_the_wire_alone(store: Store) -> None:
    msgs = opening()
    for i in range(2):
        msgs += calling("cat", {"path": "conf.yml"}, f"c{i}")
    assert not Pipeline(store, ProxySettings(), EstimateCounter()).rewrite(msgs, 8192).loop_broken
    msgs += calling("cat", {"path": "conf.yml"}, "c9")
    off = Pipeline(store, ProxySettings(loop_repeats=0), EstimateCounter())
    assert off.rewrite(msgs, 8192).messages == msgs


@pytest.mark.parametrize("name", ["swe_agent_demos.jsonl", "taubench_gpt4o_airline.jsonl"])
def test_the_guard_never_fires_on_the_real_traces(name: str) -> None:
    for run in load_runs(TRACES / name):
        for k in turn_points(run.messages):
            assert loops.spiral(run.messages[:k], 3) is None, (run.id, k)


def test_the_note_says_how_many_times_the_call_was_really_repeated(store: Store) -> None:
    msgs = opening()
    for i in range(5):
        msgs += calling("cat", {"path": "conf.yml"}, f"c{i}")
    assert loops.spiral(msgs, 3) == (5, msgs[-2])
    result = Pipeline(store, ProxySettings(), EstimateCounter()).rewrite(msgs, 8192)
    assert "5 times in a row" in result.messages[-1]["content"]
