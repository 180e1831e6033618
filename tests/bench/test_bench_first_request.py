"""``bench/bench_first_request.py`` times a long session's first request beside a tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "bench_first_request.py"


@pytest.mark.slow  # two processes, each a first request of 400 messages: ~5 s
def test_the_first_request_bench_compares_two_trees_on_one_synthetic_session(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "OFFLOAD_HOME": str(tmp_path)}
    argv = [sys.executable, str(BENCH), "--offline", "--messages", "400", "--rounds", "1"]
    argv += ["--baseline-src", str(ROOT / "src")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith(("| this", "| base"))]
    assert len(rows) == 2
    sizes = {row.split("|")[3].split("(")[0].strip() for row in rows}
    assert sizes in ({"401"}, {"402"})  # the system prompt, 400 messages, a last user one
    assert "The wire of every run: the same bytes." in done.stdout
