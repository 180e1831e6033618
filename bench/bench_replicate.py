"""Grow a PostgreSQL benchmark store by copies of its entries, made in SQL (the 1M team store).

Filling 1,000,000 entries through ``bench_store.py`` takes hours on this machine; the
1M store is the 100k LoCoMo store plus nine copies of its entries. This does
that reproducibly, on a store of the current schema::

    python bench/bench_store.py --data DATA --corpus locomo --url postgresql://.../l100k \\
        --entries 100000 --searches 5 --writers 0          # the 100k store (~2-10 min)
    createdb -T l100k l1m                                  # or CREATE DATABASE ... TEMPLATE
    python bench/bench_replicate.py --url postgresql://.../l1m --copies 9

Copy ``N`` (1..copies) of every entry outside ``--skip-scope`` (the bench's own offload
entries) is the same entry in scope ``cN-<scope>``, with entry and chunk ids offset by
``N x step`` (``step``: the next multiple of 100,000 above every id). Each copy has its
own chunks (same block, lines, cached term counts), body search rows, metadata search rows
and chunk -> entry map rows; blocks are shared (content-addressed: a copy's text is the
same block). ``scope_stats`` gains the copies' counts. Triggers are off while copying
(``session_replication_role = replica``: the map and counts are written here instead); the
body's GIN index is dropped first and rebuilt after, then VACUUM ANALYZE.

What the copies are not: a faithful vocabulary (every text occurs copies + 1 times, so
every document frequency is multiplied alike). A block's chunks occur copies + 1 times
(each copy's own ids), which is what a store of distinct texts would have in chunk count,
not in block count. The map is per copy, so ``chunkmap.missing_or_stale`` (doctor) reports
rows: the triggers would map each chunk to every entry of its block.
"""

from __future__ import annotations

import argparse
import sys
import time

import psycopg

_IDS = (
    "SELECT greatest((SELECT coalesce(max(id), 0) FROM entries), "
    "(SELECT coalesce(max(id), 0) FROM chunks))"
)
_ENTRY_COLUMNS = (
    "kind, topic, tags, summary, salience, status, pinned, tokens, content_hash, block_hash, "
    "source, {scope}, created, accessed, access_count, expires, regenerate, nonce, owner_pid, "
    "owner_host, checked_out, checked_in"
)


def _copy_statements() -> list[str]:
    """One copy's statements; parameters bound by the caller: ``off`` (the id offset),
    ``prefix`` (the scope prefix), ``skip`` (the scope not copied), ``step`` (the ids of
    the entries copied are below it)."""
    cols = _ENTRY_COLUMNS.format(scope="scope")
    picked = "SELECT id FROM entries WHERE scope <> %(skip)s AND id < %(step)s"
    return [
        f"INSERT INTO entries (id, {cols}) SELECT id + %(off)s, "
        + _ENTRY_COLUMNS.format(scope="%(prefix)s || scope")
        + f" FROM entries WHERE id IN ({picked})",
        # the chunks of the copied entries (own body and a lossy entry's original)
        "CREATE TEMP TABLE copied ON COMMIT DROP AS SELECT DISTINCT m.chunk_id AS id "
        f"FROM entry_chunks m WHERE m.entry_id IN ({picked})",
        'INSERT INTO chunks (id, block_id, start_line, end_line, start, "end", term_counts) '
        'SELECT c.id + %(off)s, c.block_id, c.start_line, c.end_line, c.start, c."end", '
        "c.term_counts FROM chunks c JOIN copied k ON k.id = c.id",
        "INSERT INTO search_body (rowid, terms) SELECT b.rowid + %(off)s, b.terms "
        "FROM search_body b JOIN copied k ON k.id = b.rowid",
        "INSERT INTO search_meta (rowid, topic, summary, tags, labels, source, tsv) "
        "SELECT rowid + %(off)s, topic, summary, tags, labels, source, tsv FROM search_meta "
        f"WHERE rowid IN ({picked})",
        "INSERT INTO entry_chunks (entry_id, chunk_id, own) "
        "SELECT m.entry_id + %(off)s, m.chunk_id + %(off)s, m.own FROM entry_chunks m "
        f"WHERE m.entry_id IN ({picked})",
        "INSERT INTO scope_stats (scope, kind, entries, tokens, hot, pinned, slot) "
        "SELECT %(prefix)s || scope, kind, count(*), sum(tokens), "
        "count(*) FILTER (WHERE status = 'hot'), sum(pinned), 0 FROM entries "
        f"WHERE id IN ({picked}) GROUP BY scope, kind",
    ]


def replicate(url: str, copies: int, skip: str) -> None:
    """Add ``copies`` copies of the store's entries (see the module docstring)."""
    with psycopg.connect(url, autocommit=True) as conn:
        top = int(conn.execute(_IDS).fetchone()[0])  # type: ignore[index]
        step = (top // 100_000 + 1) * 100_000
        if conn.execute("SELECT 1 FROM entries WHERE id >= %s LIMIT 1", (step,)).fetchone():
            sys.exit(f"the store holds ids past {step:,} already (copies?)")
        conn.execute("SET maintenance_work_mem = '512MB'")
        conn.execute("DROP INDEX IF EXISTS search_body_terms")
        for n in range(1, copies + 1):
            t = time.perf_counter()
            with conn.transaction():
                conn.execute("SET LOCAL session_replication_role = replica")
                args = {"off": n * step, "prefix": f"c{n}-", "skip": skip, "step": step}
                for sql in _copy_statements():
                    conn.execute(sql, args)
            print(f"  copy {n}/{copies} ({time.perf_counter() - t:.0f} s)", file=sys.stderr)
        t = time.perf_counter()
        conn.execute("CREATE INDEX search_body_terms ON search_body USING gin (terms)")
        for seq, table in (("entries_id_seq", "entries"), ("chunks_id_seq", "chunks")):
            conn.execute(f"SELECT setval('{seq}', (SELECT max(id) FROM {table}))")
        print(f"  index ({time.perf_counter() - t:.0f} s)", file=sys.stderr)
        t = time.perf_counter()
        conn.execute("VACUUM ANALYZE")
        print(f"  vacuum analyze ({time.perf_counter() - t:.0f} s)", file=sys.stderr)
        for table in ("entries", "chunks", "search_body", "search_meta", "entry_chunks"):
            n = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # type: ignore[index]
            print(f"{table}: {n:,}")


def main() -> None:
    """Command line: ``--url`` (the store to grow) and ``--copies``."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="a postgresql:// store URL (grown in place)")
    ap.add_argument("--copies", type=int, default=9, help="copies of its entries to add")
    ap.add_argument(
        "--skip-scope", default="bench-offload", help="a scope not copied (the bench's puts)"
    )
    args = ap.parse_args()
    replicate(args.url, args.copies, args.skip_scope)


if __name__ == "__main__":
    main()
