"""``offload models bench`` against a real llama.cpp server, and its error paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offload.cli.main import main


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OFFLOAD_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("OFFLOAD_LOCAL_MODEL__BASE_URL", raising=False)


@pytest.mark.slow
def test_bench_reports_ratio_latency_and_fact_retention_for_a_real_model(
    llama_server: object, capsys: pytest.CaptureFixture[str]
) -> None:
    url = llama_server.base_url  # type: ignore[attr-defined]
    code = main(["models", "bench", "--endpoint", url, "--sample", "error-trace", "--json"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert code == 0
    (row,) = rows
    assert row["sample"] == "error-trace" and row["error"] == ""
    assert row["input_tokens"] > 0 and row["output_tokens"] > 0 and row["seconds"] > 0
    assert 0 <= row["facts_kept"] <= row["facts_total"] == 6


def test_bench_without_a_model_says_how_to_configure_one_its_own_flag_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["models", "bench"]) == 6
    err = capsys.readouterr().err
    assert "pass --endpoint URL, or set [local_model] base_url" in err


def test_bench_refuses_an_unknown_sample(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "bench", "--endpoint", "http://127.0.0.1:9", "--sample", "poem"]) == 2
    assert "unknown sample poem" in capsys.readouterr().err
