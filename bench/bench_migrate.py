"""Export and migrate speed: a SQLite store of LoCoMo turns copied into PostgreSQL.

    python bench/bench_migrate.py --data DATA/memory/locomo_dev.json --entries 3000 \
        --url postgresql://postgres@127.0.0.1:55405/postgres --dir DIR [--runs 3]

Builds (once, reused) ``DIR/source.db``: ``--entries`` entries of bench_store.py's LoCoMo
corpus (two real turns each), every fifth with a label and a lossy body beside its
original, each with its semantic vector (the default embedding model). Then, ``--runs``
times: ``offload export``'s archive of it (seconds), ``store.migrate`` into a fresh
database on the server at ``--url`` (seconds), and the export of that PostgreSQL copy
(seconds; the database is dropped after). Prints the medians, the load and the source
archive's sha256 (equal archives: the same bytes written).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from offload.config import SearchSettings
from offload.core.tokens import EstimateCounter
from offload.llm.embedding import load_embedder
from offload.store.life.archive import export_archive
from offload.store.life.migrate import migrate
from offload.store.store import Store


def build(path: Path, data: Path, n: int) -> None:
    """The source store (skipped when it exists)."""
    if path.exists():
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_store import locomo_workload

    texts = list(locomo_workload(data).texts(n))
    embedder = load_embedder(SearchSettings())
    with Store(path, counter=EstimateCounter(), embedder=embedder) as store:
        plain = [t for i, t in enumerate(texts) if i % 5]
        store.put_many(plain, kind="bench", scope="bench")
        for i, text in enumerate(texts[::5]):
            store.put(text * 3, body=text, scope="bench", label=f"turn-{i}", kind="bench")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="locomo_dev.json")
    ap.add_argument("--entries", type=int, default=3000)
    ap.add_argument("--url", required=True, help="a PostgreSQL server's URL (a database on it)")
    ap.add_argument("--dir", type=Path, required=True, help="where the source store lives")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    source = args.dir / "source.db"
    build(source, args.data, args.entries)
    exports: list[float] = []
    migrations: list[float] = []
    pg_exports: list[float] = []
    digest = ""
    with Store(source, counter=EstimateCounter()) as src:
        for run in range(args.runs):
            with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
                t = time.perf_counter()
                export_archive(src, Path(tmp) / "a.zst")
                exports.append(time.perf_counter() - t)
                digest = hashlib.sha256((Path(tmp) / "a.zst").read_bytes()).hexdigest()
                name = f"bench_migrate_{os.getpid()}_{run}"
                with psycopg.connect(args.url, autocommit=True) as admin:
                    admin.execute(f"CREATE DATABASE {name}")
                try:
                    target_url = args.url.rsplit("/", 1)[0] + f"/{name}"
                    with Store(target_url, counter=EstimateCounter()) as target:
                        t = time.perf_counter()
                        report = migrate(src, target, Path(tmp))
                        migrations.append(time.perf_counter() - t)
                        assert report.verified and report.exported == args.entries
                        t = time.perf_counter()
                        export_archive(target, Path(tmp) / "b.zst")
                        pg_exports.append(time.perf_counter() - t)
                finally:
                    with psycopg.connect(args.url, autocommit=True) as admin:
                        admin.execute(f"DROP DATABASE {name}")
    print(
        f"entries {args.entries}: export median {statistics.median(exports):.2f} s "
        f"({', '.join(f'{x:.2f}' for x in exports)}), migrate median "
        f"{statistics.median(migrations):.2f} s ({', '.join(f'{x:.2f}' for x in migrations)}), "
        f"export of the PostgreSQL copy median {statistics.median(pg_exports):.2f} s "
        f"({', '.join(f'{x:.2f}' for x in pg_exports)}); "
        f"load {os.getloadavg()[0]:.1f}; archive sha256 {digest[:16]}"
    )


if __name__ == "__main__":
    main()
