"""``bench/bench_gc.py`` builds what ``offload serve`` builds and times full collections."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

GC = Path(__file__).resolve().parents[2] / "bench" / "bench_gc.py"


@pytest.mark.slow  # every surface built over a fresh store: ~3 s
def test_the_gc_bench_shows_a_frozen_startup_leaves_collections_nothing_to_walk() -> None:
    done = subprocess.run(
        [sys.executable, str(GC), "--rounds", "2"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    started, frozen = done.stdout.splitlines()
    assert started.startswith("as started:") and frozen.startswith("frozen:")
    assert int(started.split()[2].replace(",", "")) > 20_000
    assert frozen.split()[1] == "0"
