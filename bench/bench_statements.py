"""What a statement costs the client beyond SQLite's own work: the store's ``Sql`` against a
bare string, and SQLAlchemy Core for comparison.

    python bench/bench_statements.py --rounds 5 --n 20000

One point lookup (``SELECT topic FROM entries WHERE id = ?`` on a 1,000-row table in
memory), run ``--n`` times per way, the best of ``--rounds`` (this machine's speed swings:
the ways alternate within each round):

- a bare string, as the store ran its statements before they were ``Sql`` values;
- a ``Sql`` built at the call (a statement written in place), and one built once (a module
  constant): what a SQLite store pays for carrying both forms;
- SQLAlchemy Core, if installed (``pip install sqlalchemy``; not a dependency): a
  ``select()`` built per call, one built once, and ``text()``, on the same connection.

Prints microseconds per statement for each way.
"""

from __future__ import annotations

import argparse
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from offload.store.backend import Sql

LOOKUP = "SELECT topic FROM entries WHERE id = ?"


def _ways(raw: sqlite3.Connection, n: int) -> dict[str, Callable[[], None]]:
    constant = Sql(LOOKUP)

    def bare() -> None:
        for i in range(n):
            raw.execute("SELECT topic FROM entries WHERE id = ?", (i % 1000,)).fetchone()

    def in_place() -> None:
        for i in range(n):
            raw.execute(Sql("SELECT topic FROM entries WHERE id = ?"), (i % 1000,)).fetchone()

    def module_constant() -> None:
        for i in range(n):
            raw.execute(constant, (i % 1000,)).fetchone()

    ways = {"bare string": bare, "Sql at the call": in_place, "Sql constant": module_constant}
    ways.update(_sqlalchemy(raw, n))
    return ways


def _sqlalchemy(raw: sqlite3.Connection, n: int) -> dict[str, Callable[[], None]]:
    try:
        import sqlalchemy as sa
    except ImportError:
        return {}
    engine = sa.create_engine("sqlite://", creator=lambda: raw, poolclass=sa.pool.StaticPool)
    table = sa.Table(
        "entries",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("topic", sa.Text),
    )
    conn = engine.connect()
    built = sa.select(table.c.topic).where(table.c.id == sa.bindparam("i"))
    text = sa.text("SELECT topic FROM entries WHERE id = :i")

    def per_call() -> None:
        for i in range(n):
            conn.execute(sa.select(table.c.topic).where(table.c.id == i % 1000)).fetchone()

    def once() -> None:
        for i in range(n):
            conn.execute(built, {"i": i % 1000}).fetchone()

    def textual() -> None:
        for i in range(n):
            conn.execute(text, {"i": i % 1000}).fetchone()

    v = sa.__version__
    return {
        f"SQLAlchemy {v} select() per call": per_call,
        f"SQLAlchemy {v} select() once": once,
        f"SQLAlchemy {v} text()": textual,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000, help="statements per way and round")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    raw = sqlite3.connect(":memory:", check_same_thread=False)
    raw.execute("CREATE TABLE entries (id INTEGER PRIMARY KEY, topic TEXT)")
    raw.executemany("INSERT INTO entries VALUES (?, ?)", [(i, f"t{i}") for i in range(1000)])
    raw.commit()
    ways = _ways(raw, args.n)
    best: dict[str, float] = {}
    for r in range(args.rounds):
        names = list(ways) if r % 2 == 0 else list(reversed(ways))
        for name in names:
            start = time.perf_counter()
            ways[name]()
            us = (time.perf_counter() - start) / args.n * 1e6
            best[name] = min(best.get(name, us), us)
    out: dict[str, Any] = {name: round(best[name], 2) for name in ways}
    for name, us in out.items():
        print(f"{name:40s} {us:7.2f} us/statement")


if __name__ == "__main__":
    main()
