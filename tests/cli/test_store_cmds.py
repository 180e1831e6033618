"""The store commands, run in-process through the real entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from offload.cli.main import main


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OFFLOAD_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_add_then_ls_search_show_and_cat_round_trip(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys,
        "add",
        "--json",
        "--topic",
        "cfg",
        "--tags",
        "a,b",
        "def parseCfg(): pass\nsecond line\n",
    )
    assert code == 0
    ref = json.loads(out)["ref"]
    assert run(capsys, "ls")[1].count("\n") == 1
    code, out, _ = run(capsys, "search", "--json", "parseCfg")
    hit = json.loads(out)["hits"][0]
    assert hit["ref"] == ref and hit["match_line"] == 1
    assert "topic     cfg" in run(capsys, "show", ref[:20])[1]
    assert run(capsys, "cat", ref)[1] == "def parseCfg(): pass\nsecond line\n"
    assert run(capsys, "cat", ref, "--lines", "2-2")[1] == "second line\n"


def test_add_reads_a_file_inside_the_project(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.md").write_text("# Notes\nbody\n")
    code, out, _ = run(capsys, "add", "--json", "--path", "notes.md")
    assert code == 0 and json.loads(out)["topic"] == "notes.md"


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["cat", "nope-label"], 3, "no entry matches"),
        (["cat", "id:99"], 3, "no entry matches"),
        (["add", "--path", "missing.txt"], 4, "no such file"),
        (["add", "--path", "/etc/hostname"], 4, "outside the allowed roots"),
        (["add", "--path", "blob.bin"], 4, "binary"),
        (["add", "--salience", "3", "x"], 2, "salience"),
        (["cat", "ctx:sha256:zz"], 2, "ctx:sha256"),
    ],
)
def test_bad_input_gets_a_one_line_error_and_a_distinct_exit_code(
    home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    code: int,
    message: str,
) -> None:
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02binary")
    got, out, err = run(capsys, *argv)
    assert got == code
    assert message in err and err.count("\n") == 1 and out == ""


def test_forget_leaves_a_tombstone_that_cat_explains(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, "add", "--label", "tmp", "temporary")
    assert run(capsys, "forget", "tmp", "--reason", "done with it")[0] == 0
    code, _, err = run(capsys, "cat", "tmp")
    assert code == 3 and "done with it" in err


def test_pin_unpin_reap_and_stats(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "add", "--label", "keep", "--salience", "0.1", "keep")
    run(capsys, "add", "--label", "drop", "--salience", "0.1", "drop")
    run(capsys, "pin", "keep")
    code, out, _ = run(capsys, "reap", "--older-than", "0", "--dry-run")
    assert code == 0 and "would reap 1" in out and "drop" not in out.split("\n")[0]
    run(capsys, "reap", "--older-than", "0")
    stats = json.loads(run(capsys, "stats", "--json")[1])
    assert stats["entries"] == 1 and stats["pinned"] == 1


def test_doctor_export_import_and_config_show(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, "add", "some body")
    assert "clean" in run(capsys, "doctor")[1]
    archive = str(tmp_path / "x.offload")
    assert run(capsys, "export", archive)[0] == 0
    assert run(capsys, "--home", str(tmp_path / "h2"), "import", archive)[1].startswith(
        "imported 1"
    )
    shown = json.loads(run(capsys, "config", "show", "--json")[1])
    assert shown["settings"]["store.home"]["source"] == "env:OFFLOAD_HOME"


def test_help_lists_commands_and_unknown_commands_fail(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "search" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2


def test_the_console_script_runs(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "offload.cli.main", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("offload ")


def test_listings_show_terminal_escapes_from_a_body_escaped_not_obeyed(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = "\x1b]0;owned\x07\x1b[2J title line\u202e\nzebra body\n"
    assert run(capsys, "add", "--topic", "t\x1b[31m", body)[0] == 0  # the summary: its gist
    for argv in (("ls",), ("search", "zebra"), ("show", "1")):
        code, out, _ = run(capsys, *argv)
        assert code == 0 and "\\x1b[31m" in out, argv
        assert not {"\x1b", "\x07", "\u202e"} & set(out), (argv, out)
    assert "\\x1b]0;owned" in run(capsys, "show", "1")[1]
