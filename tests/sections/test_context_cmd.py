"""``offload context FILE...`` end to end, in a subprocess with its own store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def run_context(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OFFLOAD_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "offload.cli.main", "context", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_a_second_run_reports_what_changed_since_the_first(tmp_path: Path) -> None:
    rules = tmp_path / "AGENTS.md"
    status = tmp_path / "status.txt"
    readme = tmp_path / "README.md"
    rules.write_text("# Rules\n" + "Never push to main.\n" * 50)
    status.write_text("M a.py\n")
    readme.write_text("# App\n" + "It exports invoices.\n" * 30)
    files = [str(rules), str(status), str(readme)]
    first = run_context(tmp_path / "home", *files)
    assert first.returncode == 0, first.stderr
    assert "(turn 1)" in first.stdout and "| new | no |" in first.stdout
    status.write_text("M a.py\nM b.py\n")
    second = run_context(tmp_path / "home", "--json", *files)
    assert second.returncode == 0, second.stderr
    report = json.loads(second.stdout)
    assert [s["status"] for s in report["sections"]] == ["unchanged", "changed", "unchanged"]
    assert [s["cached"] for s in report["sections"]] == [True, False, False]
    assert report["suggested_order"] == [files[0], files[2], files[1]]


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    result = run_context(tmp_path / "home", str(tmp_path / "missing.md"))
    assert result.returncode == 4
    assert "missing.md: no such file" in result.stderr
