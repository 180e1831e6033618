"""What a process holds to search each entry beside the index and the vectors (the chunk ->
entries map, the entries' filter and ranking columns), and how fast searches run with
them, side by side with another tree.

    python bench/bench_held.py --data DATA/memory/locomo_dev.json [--entries 20000]
        [--against MAIN/src] [--rounds 5]

Each tree runs in a child process of its own (``PYTHONPATH`` its ``src``) that stores the
same ``--entries`` LoCoMo-like texts (``bench_search.scale_texts``, ``put_many`` in batches
of 2,000 over eight scopes), builds its in-memory copies as a first search does, and
weighs the two copies (``tracemalloc``: the bytes a fresh ``read_all`` of each leaves
allocated, numpy's arrays included) and the index as its build reports it (``nbytes``). Then the parent has the children search the LoCoMo
questions in turns (A B, B A, A B, ...: the machine's speed swings, so the trees share each
phase of it, and neither is always first), each round every question once, ``limit`` 10, plus a scoped pass; the
medians over rounds of each round's p50 and p95 are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
DATA = Path("tests/data/memory/locomo_dev.json")


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _weigh(store: Any) -> dict[str, float]:
    """Bytes a fresh read of each copy holds (what the store's resident copy holds)."""
    from offload.store.search.memory import entrykeys, entrymap

    out: dict[str, float] = {}
    for name, read in (("map", entrymap.read_all), ("keys", entrykeys.read_all)):
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        held = read(store.conn)
        out[name] = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        del held
    return out


def child(data: Path, entries: int, tmp: Path) -> None:
    """One tree: build, weigh, then answer ``round`` lines on stdin with a round's timings."""
    import bench_search
    import offload

    convs = bench_search.load(data)
    texts = bench_search.scale_texts(convs, entries)
    questions = [q for c in convs for q, _cat, _ev in c.questions]
    store = offload.open_store(tmp / "held.db", embedder=bench_search.embedder())
    c0 = time.process_time()
    for i in range(0, entries, 2000):
        store.put_many(texts[i : i + 2000], scope=f"s{i // 2000 % 8}")
    build_cpu = time.process_time() - c0
    store.search(questions[0], limit=10)  # a first search starts the copies' builds
    assert store.resident is not None
    store.resident.built.wait()
    store.resident.entry_map.wait()
    store.resident.entry_keys.wait()
    weights = _weigh(store)
    report = store.resident.report
    weights["index"] = 0 if report is None else report.nbytes  # the built index's arrays
    stored = len(texts)
    print(json.dumps({"entries": stored, "build_cpu_s": build_cpu, **weights}), flush=True)
    for line in sys.stdin:
        if line.strip() != "round":
            break
        times: dict[str, list[float]] = {"all": [], "scoped": []}
        for i, q in enumerate(questions):
            t = time.perf_counter()
            store.search(q, limit=10)
            times["all"].append(time.perf_counter() - t)
            if i % 4 == 0:  # a quarter of them again within one scope
                t = time.perf_counter()
                store.search(q, limit=10, scope=f"s{i % 8}")
                times["scoped"].append(time.perf_counter() - t)
        got = {k: {"p50": _pct(v, 0.5) * 1e3, "p95": _pct(v, 0.95) * 1e3} for k, v in times.items()}
        print(json.dumps(got), flush=True)
    store.close()


def _start(src: Path, args: argparse.Namespace, tmp: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(HERE)])}
    cmd = [sys.executable, __file__, "--child", "--data", str(args.data)]
    cmd += ["--entries", str(args.entries), "--tmp", str(tmp)]
    return subprocess.Popen(
        cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tmp
    )


def _read(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"a child exited ({proc.wait()})")
    got: dict[str, Any] = json.loads(line)
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA, help="a LoCoMo file")
    ap.add_argument("--entries", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--against", type=Path, help="another tree's src/, run side by side")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.data = args.data.resolve()
    if args.child:
        child(args.data, args.entries, args.tmp)
        return
    trees = {"this": SRC, **({"against": args.against.resolve()} if args.against else {})}
    with tempfile.TemporaryDirectory(prefix="offload-held-") as tmp:
        procs = {}
        for name, src in trees.items():
            (Path(tmp) / name).mkdir()
            procs[name] = _start(src, args, Path(tmp) / name)
        built = {name: _read(p) for name, p in procs.items()}  # both build at once
        rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        for r in range(args.rounds):
            # in turns, the first of a round alternating (A B, B A, ...): a load that
            # falls or rises through the run favours neither tree
            order = list(procs.items())
            for name, p in order if r % 2 == 0 else order[::-1]:
                assert p.stdin is not None
                p.stdin.write("round\n")
                p.stdin.flush()
                rounds[name].append(_read(p))
        for p in procs.values():
            assert p.stdin is not None
            p.stdin.close()
            p.wait()
    out: dict[str, Any] = {}
    for name in trees:
        b = built[name]
        n = b["entries"]
        speed = {  # none with --rounds 0: the weights alone
            f"{kind}_{q}_ms": round(statistics.median(r[kind][q] for r in rounds[name]), 2)
            for kind in ("all", "scoped")
            for q in ("p50", "p95")
            if rounds[name]
        }
        out[name] = {
            "src": str(trees[name]),
            "entries": n,
            "build_cpu_s": round(b["build_cpu_s"], 1),
            "map_bytes_per_entry": round(b["map"] / n, 1),
            "keys_bytes_per_entry": round(b["keys"] / n, 1),
            "index_bytes_per_entry": round(b["index"] / n, 1),
            **speed,
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
