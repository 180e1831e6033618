"""Progress on stderr: drawn on a terminal, nothing on a pipe, stdout and --json untouched."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest

from offload.cli.main import main
from offload.cli.progress import Bar, Ticker, size_label
from realparts import TRACES, wait_until


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
    with Ticker("adding", pipe, delay=0, interval=0.01) as ticker:
        assert not ticker.enabled
    assert pipe.getvalue() == ""


def test_the_ticker_shows_elapsed_time_while_work_runs_and_clears_its_line() -> None:
    term = Terminal()
    with Ticker("adding 50.0 MB", term, delay=0, interval=0.01):
        wait_until(
            lambda: re.search(r"\radding 50\.0 MB \.\.\. \d+s", term.getvalue()) is not None,
            10,
            what="a tick",
        )
    out = term.getvalue()
    assert out.endswith("\r") and out.rstrip("\r").endswith(" ")  # the line is blanked


def test_a_short_task_shows_no_ticker() -> None:
    term = Terminal()
    with Ticker("adding", term, delay=60):
        pass
    assert term.getvalue() == ""


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
    assert json.loads(out)["created"] is True


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
