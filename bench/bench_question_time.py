"""Query time of LoCoMo's questions on stores bench_search.py --only recall filled, this
tree beside another checkout's, alternating.

    python bench/bench_question_time.py --data DATA/memory/locomo_dev.json \
        --store postgresql://.../THIS_DB --baseline-store postgresql://.../MAIN_DB \
        --baseline-src MAIN/src --rounds 3

Each tree searches its own store (``--store`` this tree's, ``--baseline-store`` the other's:
a store one tree migrated may be newer than the other reads), filled alike with
``bench_search.py --only recall --recall-store URL`` (every turn an entry, a session's date
as its event time). A round runs one child process a tree, the trees' order alternating
from round to round; each child opens its store with the default static embedding (hybrid),
asks every question once unmeasured (the in-memory copies are built meanwhile), then
again timed (``scope`` the conversation, ``limit=10``), once with the in-memory copies
(``resident``, the default) and once without (``sql``, ``search.resident_mb`` 0). Prints
each round's p50 / p95 wall ms and mean CPU ms a question. LoCoMo is CC BY-NC: pass its path.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def child(data: Path, url: str, resident: bool) -> dict[str, float]:
    """Ask every question of the store at ``url`` twice; the second pass's times."""
    sys.path.insert(0, str(HERE))
    import bench_search as bs
    import offload

    convs = bs.load(data)
    asked = [(q, c.sample_id) for c in convs for q, _, _ in c.questions]
    extra: dict[str, Any] = {} if resident else {"resident_mb": 0}
    store = offload.open_store(url, embedder=bs.embedder(), **extra)
    try:
        for q, scope in asked:
            store.search(q, scope=scope, limit=10)
        if store.resident is not None:  # the copies a held search reads, built
            store.resident.built.wait(120)
            store.resident.entry_keys.wait(120)
            store.resident.entry_map.wait(120)
        walls, cpus = [], []
        for q, scope in asked:
            t, c = time.perf_counter(), time.process_time()
            store.search(q, scope=scope, limit=10)
            cpus.append(time.process_time() - c)
            walls.append(time.perf_counter() - t)
    finally:
        store.close()
    walls.sort()
    return {
        "p50_ms": 1000 * statistics.median(walls),
        "p95_ms": 1000 * walls[int(0.95 * (len(walls) - 1))],
        "cpu_ms": 1000 * statistics.fmean(cpus),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="locomo_dev.json")
    ap.add_argument("--store", required=True, help="this tree's filled store")
    ap.add_argument("--baseline-store", help="the other tree's filled store")
    ap.add_argument("--baseline-src", help="another checkout's src/")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--path",
        choices=["both", "resident", "sql"],
        default="both",
        help="time the in-memory copies' path, the SQL path, or both (the default)",
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)  # a child: search this store
    ap.add_argument("--sql", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.data, args.child, not args.sql)))
        return
    trees = {"this": (str(HERE.parent / "src"), args.store)}
    if args.baseline_src and args.baseline_store:
        trees["baseline"] = (args.baseline_src, args.baseline_store)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| round | path | tree | p50 ms | p95 ms | CPU ms a question |")
    print("|---:|---|---|---:|---:|---:|")
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(reversed(trees))
        for path in ("resident", "sql") if args.path == "both" else (args.path,):
            for tree in order:
                src, url = trees[tree]
                cmd = [sys.executable, __file__, "--data", str(args.data), "--store", url]
                cmd += ["--child", url] + (["--sql"] if path == "sql" else [])
                env = {**os.environ, "PYTHONPATH": src}
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                got = json.loads(out.stdout.strip().splitlines()[-1])
                print(
                    f"| {r + 1} | {path} | {tree} | {got['p50_ms']:.1f} | {got['p95_ms']:.1f} "
                    f"| {got['cpu_ms']:.2f} |",
                    flush=True,
                )
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
