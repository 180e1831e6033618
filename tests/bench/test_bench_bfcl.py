"""``bench/bench_bfcl.py`` pools BFCL's function documents into one catalog and scores the
gateway's tool search on each question's ground truth (a tiny set written here: the real
data is not shipped)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BFCL = Path(__file__).resolve().parents[2] / "bench" / "bench_bfcl.py"


def _function(name: str, description: str, **params: str) -> dict[str, Any]:
    props = {p: {"type": "string", "description": d} for p, d in params.items()}
    return {
        "name": name,
        "description": description,
        "parameters": {"type": "dict", "properties": props},
    }


WEATHER = _function("get_current_weather", "Current weather of a city.", city="The city")
WEATHER_AGAIN = _function("get_current_weather", "The weather now in one place.", place="A place")
EMAIL = _function("send_email", "Send an email message to a recipient.", to="Who receives it")
STOCK = _function(
    "get_stock_price", "The latest share price of a listed company.", ticker="Its symbol"
)
TIMER = _function("set_timer", "Start a countdown timer.", minutes="How long")


def _write(
    folder: Path, name: str, rows: list[tuple[str, list[dict[str, Any]], list[str], str]]
) -> None:
    """One set: (id, functions, the functions its answer calls, the request) per question."""
    answers = folder / "possible_answer"
    answers.mkdir(parents=True, exist_ok=True)
    questions, truth = [], []
    for qid, functions, calls, text in rows:
        messages = [
            {"role": "system", "content": "send_email always"},
            {"role": "user", "content": text},
        ]
        questions.append({"id": qid, "question": [messages], "function": functions})
        truth.append({"id": qid, "ground_truth": [{c: {}} for c in calls]})
    for path, records in (
        (folder / f"BFCL_v4_{name}.json", questions),
        (answers / f"BFCL_v4_{name}.json", truth),
    ):
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BFCL), *args], capture_output=True, text=True, timeout=300
    )


def test_the_bfcl_bench_pools_every_distinct_function_and_finds_each_questions_own(
    tmp_path: Path,
) -> None:
    _write(
        tmp_path,
        "multiple",
        [
            (
                "multiple_0",
                [WEATHER, EMAIL],
                ["get_current_weather"],
                "Is it raining in Oslo right now? weather please",
            ),
            ("multiple_1", [EMAIL, STOCK], ["get_stock_price"], "What is the share price of ACME?"),
        ],
    )
    # a set whose name ends like another's is not read for it
    _write(
        tmp_path,
        "parallel_multiple",
        [
            (
                "parallel_multiple_0",
                [WEATHER_AGAIN, TIMER],
                ["set_timer", "get_current_weather", "set_timer"],
                "Start a countdown timer for 5 minutes and tell me the weather now in Rome",
            ),
        ],
    )
    done = _bench("--data", str(tmp_path), "--sets", "multiple,parallel_multiple", "--misses", "3")
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    # WEATHER_AGAIN shares WEATHER's name, not its document: another tool
    assert out.splitlines()[0] == "5 tools (4 names), 3 questions: multiple 2, parallel_multiple 1"
    lexical = next(
        line for line in out.splitlines() if line.startswith("| gateway, lexical (BM25F) | 1.000")
    )
    # both one-function questions find their tool first; the two-function one has both
    assert lexical.split(" | ")[4].startswith("1.000")
    per_set = [
        line for line in out.splitlines() if line.startswith("| gateway, lexical (BM25F) | ")
    ]
    assert "| multiple | 2 | 1.000 | 1.000 | 1.000 | - |" in per_set[-2]
    assert "| parallel_multiple | 0 |" in per_set[-1] and per_set[-1].endswith("| 1.000 (1) |")
    assert "misses at R@5 by name" in out


def test_the_bfcl_bench_says_in_one_line_when_the_data_is_missing(tmp_path: Path) -> None:
    done = _bench("--data", str(tmp_path / "nowhere"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"no BFCL data in {tmp_path / 'nowhere'} (want BFCL_v*_<set>.json and possible_answer/)"
    ]
