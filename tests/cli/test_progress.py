"""Progress on stderr: drawn on a terminal, nothing on a pipe, stdout and --json untouched."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest

from offload.cli.main import main
from offload.cli.progress import Bar, Meter, size_label
from offload.store.write import index
from realparts import TRACES


class Terminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_the_bar_draws_on_a_terminal_and_ends_the_line() -> None:
    term = Terminal()
    bar = Bar("importing", term)
    for done in range(0, 11):
        bar(done, 10)
    out = term.getvalue()
    assert out.startswith("\rimporting [") and out.endswith("100% 10/10\n")


def test_nothing_is_drawn_on_a_pipe() -> None:
    pipe = io.StringIO()
    Bar("importing", pipe)(5, 10)
    assert pipe.getvalue() == ""


def test_sizes_read_as_a_person_would() -> None:
    assert [size_label(n) for n in (12, 12_300, 50_000_000, 2_500_000_000)] == [
        "12 B",
        "12.3 KB",
        "50.0 MB",
        "2.5 GB",
    ]


def test_add_through_a_pipe_prints_no_progress_and_its_json_is_intact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "a bulky line of text\n" * 5000
    code = main(["add", text, "--json", "--home", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert json.loads(out)["new"] is True


def test_replay_json_draws_a_bar_on_a_terminal_and_keeps_stdout_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "two.jsonl"
    lines = (TRACES / "taubench_gpt4o_airline.jsonl").read_text(encoding="utf-8").splitlines()
    trace.write_text("\n".join(lines[:2]) + "\n", encoding="utf-8")
    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    code = main(["replay", str(trace), "--n-ctx", "4096", "--json", "--home", str(tmp_path)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    turns = doc["totals"]["turns"]
    assert turns > 0 and term.getvalue().endswith(f"100% {turns}/{turns}\n")
    assert "replaying turns [" in term.getvalue()


# one update: label, stage, percentage, MB done of MB in all, rate
UPDATE = r"adding big\.log: (analysing|writing) +\d{1,3}%  \d+\.\d/\d+\.\d MB  (\d+\.\d|-) MB/s"


def test_the_meter_redraws_one_terminal_line_with_percentage_and_rate_then_clears_it() -> None:
    term = Terminal()
    meter = Meter("adding big.log", 50_000_000, term)
    meter("analysing", 0, 100)
    meter("analysing", 100, 100)
    meter("writing", 100, 100)
    meter.close()
    drawn = term.getvalue().split("\r")
    assert drawn[0] == "" and "\n" not in term.getvalue()
    updates = [d.rstrip() for d in drawn[1:-2]]
    assert len(updates) == 3 and all(re.fullmatch(UPDATE, u) for u in updates)
    assert updates[1].startswith("adding big.log: analysing 100%  50.0/50.0 MB")
    assert drawn[-2].strip() == "" and drawn[-1] == ""  # blanked, back at the line's start


def test_the_meter_is_silent_on_a_pipe_unless_asked_and_then_writes_whole_lines() -> None:
    pipe = io.StringIO()
    Meter("adding big.log", 10, pipe)("analysing", 5, 10)
    assert pipe.getvalue() == ""
    asked = Meter("adding big.log", 2_000_000, pipe, enabled=True)
    asked("analysing", 1, 2)
    asked("analysing", 2, 2)  # a stage's last update is always written
    asked.close()
    lines = pipe.getvalue().splitlines(keepends=True)
    assert len(lines) == 2 and all(ln.endswith("\n") and "\r" not in ln for ln in lines)
    assert all(re.fullmatch(UPDATE, ln.rstrip("\n")) for ln in lines)


def test_add_progress_goes_to_stderr_in_stages_and_leaves_the_json_on_stdout_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index, "FREEZE_CHARS", 1000)  # a "big" body without a big file
    monkeypatch.setattr(index, "FREEZE_BATCH_CHARS", 4000)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "big.log").write_text("".join(f"step {i} passed\n" for i in range(2000)))
    code = main(["add", "--path", "big.log", "--progress", "--json", "--home", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["new"] is True
    lines = err.splitlines()
    assert lines and all(re.fullmatch(UPDATE, ln) for ln in lines)
    assert lines[-1].startswith("adding big.log: writing 100%")
    assert any(ln.startswith("adding big.log: analysing 100%") for ln in lines)
