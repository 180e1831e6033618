"""One big put, two trees side by side: this checkout's source against another's, alternating.

    python bench/bench_put.py --url postgresql://postgres@127.0.0.1:5432/l1m \\
        --baseline-src /old/checkout/src --samples 101

This machine's speed swings by up to 2x within minutes (docs/benchmarks/team-store.md), so
two runs of ``bench_store.py``, one per tree, compare the minutes they ran in as much as the
trees. Here two worker processes, one per tree (its ``src/`` first on ``PYTHONPATH``), open
the same store and put bodies in turns, the order flipped every round: both meet the same
machine, and each round gives a paired difference. The bodies are ``bench_store.py``'s
100 KB put (``big_log``: a generated log repeated, made unique by its last line), the same
sequence for both trees, in their own scope (``--scope``).

Prints each tree's p50 wall and client CPU (the worker's own process time), the median of
the paired wall and CPU differences, and how often this tree was the faster of a pair.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
SRC = BENCH.parent / "src"


def body(rng: random.Random, kb: int, tag: str, n: int) -> str:
    """``bench_store.py``'s big put: a generated log repeated, cut to ``kb`` KB, made unique."""
    from bench_store import big_log

    return big_log(rng, kb * 1024, f"{tag}-{n}-{time.time_ns()}")


def worker(args: argparse.Namespace) -> None:
    """Open the store, put a few bodies to warm up, then one timed put per line of stdin."""
    sys.path.insert(0, str(BENCH))
    from bench_store import open_url

    store = open_url(args.url, Path(args.home))
    rng = random.Random(args.seed)
    for n in range(args.warmup):
        store.put(body(rng, args.kb, args.tag, n), kind="bench", scope=args.scope)
    print("ready", flush=True)
    for n, _line in enumerate(sys.stdin, args.warmup):
        text = body(rng, args.kb, args.tag, n)
        t, c = time.perf_counter(), time.process_time()
        store.put(text, kind="bench", scope=args.scope)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        print(json.dumps([wall * 1000, cpu * 1000]), flush=True)
    store.close()


def start(src: str, tag: str, args: argparse.Namespace, home: Path) -> subprocess.Popen[str]:
    """A worker running under ``src``, ready (its warm-up done)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, str(BENCH)]))
    cmd = [
        sys.executable, __file__, "--worker", "--url", args.url, "--tag", tag,
        "--home", str(home / tag), "--seed", str(args.seed), "--kb", str(args.kb),
        "--scope", args.scope, "--warmup", str(args.warmup),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise SystemExit(f"the {tag} worker did not start")
    return proc


def timed(proc: subprocess.Popen[str]) -> tuple[float, float]:
    """One put in ``proc``: (wall ms, CPU ms)."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("put\n")
    proc.stdin.flush()
    wall, cpu = json.loads(proc.stdout.readline())
    return float(wall), float(cpu)


def compare(args: argparse.Namespace) -> dict[str, float]:
    """Both trees' puts in alternating rounds; the figures printed."""
    with tempfile.TemporaryDirectory(prefix="bench-put-") as tmp:
        procs = {
            "this": start(str(SRC), "this", args, Path(tmp)),
            "baseline": start(args.baseline_src, "baseline", args, Path(tmp)),
        }
        got: dict[str, list[tuple[float, float]]] = {"this": [], "baseline": []}
        try:
            for i in range(args.samples):
                order = ("this", "baseline") if i % 2 == 0 else ("baseline", "this")
                for tag in order:
                    got[tag].append(timed(procs[tag]))
        finally:
            for proc in procs.values():
                if proc.stdin is not None:
                    proc.stdin.close()
                proc.wait(timeout=60)
    pairs = list(zip(got["this"], got["baseline"], strict=True))
    out = {}
    for tag, runs in got.items():
        out[f"{tag}_wall_p50"] = statistics.median(w for w, _ in runs)
        out[f"{tag}_cpu_p50"] = statistics.median(c for _, c in runs)
    out["wall_diff_p50"] = statistics.median(a[0] - b[0] for a, b in pairs)
    out["cpu_diff_p50"] = statistics.median(a[1] - b[1] for a, b in pairs)
    out["this_faster_share"] = sum(a[0] < b[0] for a, b in pairs) / len(pairs)
    return out


def main() -> None:
    """Parse flags; run a worker or the comparison."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="the store both trees put into")
    ap.add_argument("--baseline-src", help="the other checkout's src/")
    ap.add_argument("--samples", type=int, default=101, help="puts per tree")
    ap.add_argument("--kb", type=int, default=100, help="each body's size")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--warmup", type=int, default=3, help="untimed puts per worker first")
    ap.add_argument("--scope", default="bench-put")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tag", default="this", help=argparse.SUPPRESS)
    ap.add_argument("--home", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    if not args.baseline_src:
        ap.error("--baseline-src is required")
    figures = compare(args)
    print(f"{args.samples} puts of {args.kb} KB per tree, alternating; {time.strftime('%F %T')}")
    print("| figure | ms |\n|---|---:|")
    for key, value in figures.items():
        print(f"| {key} | {value:.3f} |")


if __name__ == "__main__":
    main()
