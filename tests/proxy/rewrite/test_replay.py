"""Replaying recorded transcripts through the pipeline, and the ``offload replay`` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offload.cli.main import main
from offload.config import ProxySettings
from offload.core.tokens import EstimateCounter
from offload.errors import InvalidInput
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.replay import Run, chain_runs, load_runs, replay, turn_points
from offload.store.store import Store
from realparts import TRACES

TAU = TRACES / "taubench_gpt4o_airline.jsonl"


def _first_runs(path: Path, count: int, dest: Path) -> Path:
    lines = path.read_text(encoding="utf-8").splitlines()[:count]
    dest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dest


def test_turns_are_the_points_before_each_assistant_message() -> None:
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "u2"},
        {"role": "assistant", "content": "a2"},
    ]
    assert turn_points(msgs) == [2, 4]


def test_chaining_keeps_one_system_prompt_and_appends_each_task() -> None:
    a = Run("a", [{"role": "system", "content": "S"}, {"role": "user", "content": "task A"}])
    b = Run("b", [{"role": "system", "content": "S"}, {"role": "user", "content": "task B"}])
    chained = chain_runs([a, b])
    assert [m["content"] for m in chained.messages] == ["S", "task A", "task B"]


def test_a_bad_trace_line_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "messages": [{"role": "user", "content": "x"}]}\nnot json\n')
    with pytest.raises(InvalidInput, match=r"bad.jsonl:2"):
        load_runs(bad)
    bad.write_text('{"id": 1, "messages": [{"role": "robot", "content": "x"}]}\n')
    with pytest.raises(InvalidInput, match=r"bad.jsonl:1: .*unknown role"):
        load_runs(bad)


@pytest.mark.slow  # replays 12 real tau-bench runs chained (~4 s of CPU)
def test_a_chained_real_session_stays_bounded_stable_and_lossless(tmp_path: Path) -> None:
    runs = load_runs(_first_runs(TAU, 12, tmp_path / "tau12.jsonl"))
    counter = EstimateCounter()
    with Store(tmp_path / "s.db", counter=counter) as store:
        pipeline = Pipeline(store, ProxySettings(), counter)
        report = replay([chain_runs(runs)], pipeline, 8192, chained=True)
    totals = report.totals()
    assert totals["problems"] == 0  # ceiling, verbatim tail, every stub expands exactly
    assert totals["peak_wire_tokens"] <= int(0.85 * 8192)
    assert totals["peak_client_tokens"] > 8192  # the session really outgrew the window
    assert totals["wire_tokens"] <= 0.5 * totals["client_tokens"]
    # the history before the proxy's own additions (dropped from each request's end) holds
    breaks = totals["prefix_breaks"]
    held = totals["prefix_kept"] + breaks.get("recall", 0) + breaks.get("loop_note", 0)
    assert held / totals["prefix_pairs"] >= 0.85
    assert totals["kv_reuse_ratio"] >= 0.85


def test_the_replay_command_prints_turns_and_totals_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _first_runs(TAU, 3, tmp_path / "tau3.jsonl")
    code = main(["replay", str(trace), "--n-ctx", "4096", "--json", "--home", str(tmp_path)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["totals"]["sessions"] == 3
    assert len(doc["turns"]) == doc["totals"]["turns"] > 0
    for key in ("client_tokens", "wire_tokens", "peak_wire_tokens", "prefix_stable_ratio"):
        assert key in doc["totals"]
    totals = doc["totals"]
    assert totals["reused_tokens"] == sum(t["reused_tokens"] for t in doc["turns"]) > 0
    assert totals["kv_reuse_ratio"] == round(totals["reused_tokens"] / totals["wire_tokens"], 4)
    # every turn that did not keep the previous request whole is counted under its cause
    assert sum(totals["prefix_breaks"].values()) == totals["turns"] - totals["prefix_kept"]
    assert totals["prefix_breaks"]["new_session"] == 3
    assert doc["totals"]["prefix_stable_ratio"] <= doc["totals"]["prefix_bound_ratio"] <= 1
    assert doc["totals"]["peak_wire_tokens"] <= int(0.85 * 4096)
    assert not (tmp_path / "offload.db").exists()  # a temporary store unless --keep-store


def test_the_replay_command_refuses_a_missing_file_as_a_path_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["replay", str(tmp_path / "nope.jsonl"), "--home", str(tmp_path)])
    assert code == 4  # the README's "a path that may not be read", as `add --path`
    assert "cannot read" in capsys.readouterr().err


def test_a_transcript_without_an_assistant_message_says_why_nothing_was_replayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "one.jsonl"
    trace.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    assert main(["replay", str(trace), "--home", str(tmp_path)]) == 0
    assert "no turn to replay: a turn is the request before each assistant message" in (
        capsys.readouterr().err
    )


def test_a_trace_that_is_not_utf8_is_refused_in_one_line(tmp_path: Path) -> None:
    # found by the CLI fuzz: `offload replay FILE` on an exported (zstd) archive
    binary = tmp_path / "archive"
    binary.write_bytes(b"(\xb5/\xfd\x00\x00")
    with pytest.raises(InvalidInput, match="not UTF-8 text"):
        load_runs(binary)
