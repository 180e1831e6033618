"""The size of a PostgreSQL store, this tree beside another checkout's, filled at once.

    python bench/bench_pg_size.py --data DATA/memory/locomo_dev.json \
        --url postgresql://postgres@127.0.0.1:PORT/postgres --entries 20000 \
        --baseline-src MAIN/src

Each tree (this one, and ``--baseline-src`` through ``PYTHONPATH``) fills a fresh database
of the server ``--url`` names (dropped first if an earlier run left it) with bench_store's
LoCoMo corpus (two real turns an entry, ``put_many`` in batches, scopes s0..s7, the
in-memory index off), the two fills started together in their own processes. Then, for
each database: ``pg_total_relation_size`` of every table (its heap, TOAST and indexes),
``pg_relation_size`` of each of the entries' indexes, ``pg_database_size``, and each fill's
wall and CPU seconds. LoCoMo is CC BY-NC: pass its path.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
_TABLES = (
    "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY 2 DESC"
)
_ENTRY_INDEXES = (
    "SELECT i.relname, pg_relation_size(i.oid), pg_get_indexdef(i.oid) FROM pg_index x "
    "JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = 'entries'::regclass "
    "ORDER BY i.relname"
)


def _with_db(url: str, name: str) -> str:
    return url.rsplit("/", 1)[0] + "/" + name


def fill_child(url: str, data: Path, entries: int, home: Path) -> None:
    """Fill the store at ``url`` (this process's ``offload``) and print its fill's times."""
    sys.path.insert(0, str(HERE))
    import bench_store

    work = bench_store.locomo_workload(data)
    wall = time.perf_counter()
    store = bench_store.open_url(url, home, resident_mb=0)
    try:
        bench_store.fill(store, entries, work)
    finally:
        store.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime
    print(json.dumps({"fill_wall_s": time.perf_counter() - wall, "fill_cpu_s": cpu}))


def sizes(url: str) -> dict[str, Any]:
    """Each table's and entries index's bytes, and the database's."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        tables = {str(r[0]): int(r[1]) for r in conn.execute(_TABLES)}
        indexes = {str(r[0]): (int(r[1]), str(r[2])) for r in conn.execute(_ENTRY_INDEXES)}
        db = int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])
        count = int(conn.execute("SELECT count(*) FROM entries").fetchone()[0])
    return {"tables": tables, "indexes": indexes, "database": db, "entries": count}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="locomo_dev.json")
    ap.add_argument("--url", required=True, help="a postgresql:// URL of the server")
    ap.add_argument("--entries", type=int, default=20_000)
    ap.add_argument("--baseline-src", help="another checkout's src/ to fill beside this tree")
    ap.add_argument("--home", type=Path, help="OFFLOAD_HOME for the fills (default: a temp)")
    ap.add_argument("--fill", help=argparse.SUPPRESS)  # a child: fill this URL
    args = ap.parse_args()
    home = args.home or Path(os.environ.get("OFFLOAD_HOME", "/tmp/bench-pg-size"))
    if args.fill:
        fill_child(args.fill, args.data, args.entries, home)
        return
    import psycopg

    trees = {"this": str(HERE.parent / "src")}
    if args.baseline_src:
        trees["baseline"] = args.baseline_src
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    urls = {}
    with psycopg.connect(args.url, autocommit=True) as conn:
        for tree in trees:
            name = f"offload_size_{tree}"
            conn.execute(f"DROP DATABASE IF EXISTS {name}")
            conn.execute(f"CREATE DATABASE {name}")
            urls[tree] = _with_db(args.url, name)
    procs = {}
    for tree, src in trees.items():
        env = {**os.environ, "PYTHONPATH": src}
        cmd = [sys.executable, __file__, "--data", str(args.data), "--entries", str(args.entries)]
        cmd += ["--url", args.url, "--home", str(home / tree), "--fill", urls[tree]]
        procs[tree] = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    out: dict[str, Any] = {}
    for tree, p in procs.items():
        stdout, _ = p.communicate(timeout=7200)
        if p.returncode:
            raise SystemExit(f"{tree}'s fill failed ({p.returncode})")
        out[tree] = {**json.loads(stdout.strip().splitlines()[-1]), **sizes(urls[tree])}
    _print(out)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def _print(out: dict[str, Any]) -> None:
    trees = list(out)
    print("| bytes | " + " | ".join(trees) + " |")
    print("|---|" + "---:|" * len(trees))
    for key in ("entries", "database", "fill_wall_s", "fill_cpu_s"):
        print(f"| {key} | " + " | ".join(f"{out[t][key]:,.1f}" for t in trees) + " |")
    names = sorted({n for t in trees for n in out[t]["tables"]}, key=lambda n: n)
    for n in names:
        cells = [f"{out[t]['tables'].get(n, 0):,}" for t in trees]
        print(f"| table {n} | " + " | ".join(cells) + " |")
    idx = sorted({n for t in trees for n in out[t]["indexes"]})
    for n in idx:
        cells = [f"{out[t]['indexes'].get(n, (0, ''))[0]:,}" for t in trees]
        print(f"| index {n} | " + " | ".join(cells) + " |")
    for t in trees:
        for _, sql in sorted(out[t]["indexes"].values()):
            print(f"{t}: {sql}")


if __name__ == "__main__":
    main()
