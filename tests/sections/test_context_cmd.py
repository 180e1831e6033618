"""``offload context FILE...`` end to end through the CLI dispatcher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offload.cli.main import main


def run_context(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["context", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_second_run_reports_what_changed_since_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OFFLOAD_HOME", str(tmp_path / "home"))
    rules = tmp_path / "AGENTS.md"
    status = tmp_path / "status.txt"
    readme = tmp_path / "README.md"
    rules.write_text("# Rules\n" + "Never push to main.\n" * 50)
    status.write_text("M a.py\n")
    readme.write_text("# App\n" + "It exports invoices.\n" * 30)
    files = [str(rules), str(status), str(readme)]
    code, out, err = run_context(capsys, *files)
    assert code == 0, err
    assert "(turn 1)" in out and "| new | no |" in out
    status.write_text("M a.py\nM b.py\n")
    code, out, err = run_context(capsys, "--json", *files)
    assert code == 0, err
    report = json.loads(out)
    assert [s["status"] for s in report["sections"]] == ["unchanged", "changed", "unchanged"]
    assert [s["cached"] for s in report["sections"]] == [True, False, False]
    assert report["suggested_order"] == [files[0], files[2], files[1]]
    # Following the suggestion: the same file set keeps its history in any order.
    code, out, err = run_context(capsys, files[0], files[2], files[1])
    assert "(turn 3)" in out and "Order: already stable sections first." in out


def test_prompts_mode_compares_successive_prompt_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OFFLOAD_HOME", str(tmp_path / "home"))
    one, two = tmp_path / "turn1.md", tmp_path / "turn2.md"
    one.write_text("## Rules\nbe brief\n## Status\nM a.py\n")
    two.write_text("## Rules\nbe brief\n## Status\nM b.py\n")
    code, out, _ = run_context(capsys, "--prompts", str(one), str(two))
    assert code == 0
    assert "| 1 | Rules | " in out and "| unchanged | yes |" in out
    assert "| 2 | Status | " in out and "| changed | no |" in out


def test_a_missing_file_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OFFLOAD_HOME", str(tmp_path / "home"))
    code, _, err = run_context(capsys, str(tmp_path / "missing.md"))
    assert code == 4
    assert "missing.md: no such file" in err


def test_a_directory_is_named_as_one_not_as_a_missing_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OFFLOAD_HOME", str(tmp_path / "home"))
    (tmp_path / "sub").mkdir()
    code, _, err = run_context(capsys, str(tmp_path / "sub"))
    assert code == 4 and "sub: a directory, not a file" in err


def test_a_file_name_over_255_bytes_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # found by the CLI fuzz: an OSError (File name too long) traceback
    monkeypatch.setenv("OFFLOAD_HOME", str(tmp_path / "home"))
    code, out, err = run_context(capsys, str(tmp_path / ("a" * 300)))
    assert (code, out) == (4, "") and "File name too long" in err and err.count("\n") == 1
