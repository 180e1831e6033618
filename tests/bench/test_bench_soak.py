"""``bench/bench_soak.py`` runs for a few seconds against a real ``offload serve`` and reports
its figures (the long soak itself is run by hand: ``--clients 16 --minutes 15``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SOAK = Path(__file__).resolve().parents[2] / "bench" / "bench_soak.py"


@pytest.mark.slow  # an offload serve, a stub upstream and the SDK client: ~5 s of CPU
def test_the_soak_harness_runs_briefly_stops_by_itself_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    args = ["--clients", "3", "--minutes", "0.05", "--prime-s", "0.5", "--idle-s", "1"]
    args += ["--sample-s", "1", "--warmup-s", "1", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, str(SOAK), *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert " load  rss " in done.stdout and " quiet rss " in done.stdout
    report = json.loads(out.read_text())
    assert report["errors"] == 0, report["first_errors"]
    assert report["requests_ok"] > 0
    assert {"mcp.offload", "mcp.search", "mcp.read", "proxy", "stats"} <= set(report["latency_ms"])
    assert report["rss_mb"]["after_warmup"] > 0 and report["fds"]["after_quiet"] > 0
    assert report["entries"]["end_of_load"] > 0  # the MCP clients' texts, read from /api/stats
    assert report["search_memory_mb"]["end_of_load"] >= 0
    assert "rss_growth_net_of_search_memory" in report["targets"]
    assert set(report["targets"]) >= {"no_errors", "rss_growth_ok", "rss_released", "fds_back"}
