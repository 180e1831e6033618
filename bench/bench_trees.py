"""Two source trees side by side on the paths users run: is a refactor free?

    python bench/bench_trees.py --baseline-src /old/checkout/src --rounds 15

A change that only moves code (packages, value objects, named phases) should cost nothing a
user sees. Timing each tree in its own run compares the minutes the runs happened in as much
as the trees (this machine's speed swings within minutes), so here both trees run in the
same minutes: one long-lived worker process per tree (its ``src/`` first on
``PYTHONPATH``, its own store), asked in turns to do the same operation, the order flipped
every round. Each round gives a paired ratio (this tree's time over the baseline's).

The operations, all on the repository's own data (the SWE-agent demonstrations in
``tests/data/traces``):

- ``put``: one put of a message of the trace (a different one each time, the same sequence
  for both trees), through the library (``offload.open_store``);
- ``search``: one natural-language query (a line of the trace) on a store holding every
  message of the trace;
- ``cli``: ``offload --help`` (the CLI's start-up: importing it);
- ``replay``: ``offload replay`` of the trace's first runs (``--replay-runs``) chained at
  n_ctx 8192 (the proxy's rewrite of every turn, the checks of each, and start-up).

Prints, per operation, each tree's median time, the median paired ratio and how often this
tree was the faster of a pair.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "data" / "traces" / "swe_agent_demos.jsonl"

# The worker: the library's public API only (the same in both trees), driven by one JSON
# request a line on stdin, each answered by the seconds it took on stdout.
WORKER = r"""
import json, sys, time
import offload

store_path, trace = sys.argv[1], sys.argv[2]
texts = []
for line in open(trace, encoding="utf-8"):
    for m in json.loads(line)["messages"]:
        c = m.get("content")
        if isinstance(c, str) and len(c) > 200:
            texts.append(c)
store = offload.open_store(store_path)
store.put_many(texts, scope="corpus")
store.search("warm up", scope="corpus", limit=10)
print(json.dumps({"ready": len(texts)}), flush=True)
for req in sys.stdin:
    r = json.loads(req)
    t = time.perf_counter()
    if r["op"] == "put":
        store.put(r["text"], scope="puts")
    elif r["op"] == "search":
        store.search(r["text"], scope="corpus", limit=10)
    print(json.dumps({"s": time.perf_counter() - t}), flush=True)
store.close()
"""


OPS = ["put", "search", "cli", "replay"]

# the console script's entry point, the same in both trees
CLI = "import sys; from offload.cli.main import main; sys.exit(main())"


class Worker:
    """One tree's long-lived worker process."""

    def __init__(self, src: str, tmp: Path, name: str) -> None:
        self.src = src
        # each start of the CLI (``cli``, ``replay``) imports the tree: from bytecode for
        # both, as an installed package does; a tree without it (a fresh checkout where
        # PYTHONDONTWRITEBYTECODE is set) would pay for compiling every module, each run
        compileall.compile_dir(src, quiet=1)
        self.env = {
            **os.environ,
            "PYTHONPATH": src,
            "OFFLOAD_HOME": str(tmp / f"home-{name}"),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(tmp / f"{name}.db"), str(TRACE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=self.env,
        )
        assert self.proc.stdout is not None
        json.loads(self.proc.stdout.readline())  # ready

    def ask(self, op: str, text: str) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, "text": text}) + "\n")
        self.proc.stdin.flush()
        return float(json.loads(self.proc.stdout.readline())["s"])

    def run(self, *argv: str) -> float:
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", CLI, *argv],
            env=self.env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        return time.perf_counter() - t

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def workload() -> tuple[list[str], list[str]]:
    """Put bodies (distinct messages) and queries (lines of the trace's messages)."""
    bodies: list[str] = []
    queries: list[str] = []
    for line in TRACE.read_text(encoding="utf-8").splitlines():
        for m in json.loads(line)["messages"]:
            c = m.get("content")
            if not isinstance(c, str):
                continue
            bodies.append(c)
            queries.extend(s.strip() for s in c.splitlines() if 30 <= len(s.strip()) <= 120)
    return bodies, queries


def measure(
    trees: dict[str, Worker], rounds: int, per_round: int, head: Path, ops: list[str]
) -> dict[str, Any]:
    bodies, queries = workload()
    times: dict[str, dict[str, list[float]]] = {op: {n: [] for n in trees} for op in ops}
    for i in range(rounds):
        order = list(trees) if i % 2 == 0 else list(reversed(trees))
        for op in ops:
            for name in order:
                w = trees[name]
                if op in ("put", "search"):
                    pool = bodies if op == "put" else queries
                    picks = [
                        pool[(i * per_round + k) % len(pool)]
                        + (f" ({i}.{k})" if op == "put" else "")
                        for k in range(per_round)
                    ]
                    times[op][name].append(statistics.fmean(w.ask(op, p) for p in picks))
                elif op == "cli":
                    times[op][name].append(w.run("--help"))
                else:
                    times[op][name].append(
                        w.run("replay", str(head), "--chain", "--n-ctx", "8192", "--json")
                    )
    out: dict[str, Any] = {}
    for op, by in times.items():
        ratios = [a / b for a, b in zip(by["this"], by["baseline"], strict=True)]
        out[op] = {
            "this_ms_p50": round(statistics.median(by["this"]) * 1000, 3),
            "baseline_ms_p50": round(statistics.median(by["baseline"]) * 1000, 3),
            "ratio_p50": round(statistics.median(ratios), 3),
            "this_faster": f"{sum(r < 1 for r in ratios)}/{len(ratios)}",
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline-src", required=True, help="the other checkout's src/")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--per-round", type=int, default=20, help="puts or searches averaged a round")
    ap.add_argument("--ops", nargs="+", choices=OPS, default=OPS, help="operations timed")
    ap.add_argument("--replay-runs", type=int, default=4, help="runs of the trace replayed")
    args = ap.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="bench-trees-") as d:
        tmp = Path(d)
        head = tmp / "head.jsonl"
        runs = TRACE.read_text(encoding="utf-8").splitlines()[: max(1, args.replay_runs)]
        head.write_text("\n".join(runs) + "\n", encoding="utf-8")
        trees = {
            "this": Worker(str(ROOT / "src"), tmp, "this"),
            "baseline": Worker(str(Path(args.baseline_src).resolve()), tmp, "baseline"),
        }
        try:
            result = measure(trees, max(2, args.rounds), max(1, args.per_round), head, args.ops)
        finally:
            for w in trees.values():
                w.close()
    print("| operation | this tree p50 ms | baseline p50 ms | paired ratio p50 | this faster |")
    print("|---|---:|---:|---:|---:|")
    for op, r in result.items():
        print(
            f"| {op} | {r['this_ms_p50']} | {r['baseline_ms_p50']} | {r['ratio_p50']} "
            f"| {r['this_faster']} |"
        )
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
