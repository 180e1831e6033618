"""Searching inside a narrow filter: BM25 over the rows the filter keeps, by rowid range.

Whole-store BM25 takes the index's best rows and drops those the filter does not keep,
reaching deeper until enough are left. For a small scope in a big store that reaches the
bottom of the index: every matching row is scored, then mapped to its entry and filtered
(seconds at 100k entries for a 300-entry scope). A filter that keeps few entries is read
instead: their chunk ids and entry ids, as a few runs of consecutive ids (entries arrive
together, so a scope's rows mostly sit side by side), and FTS5 scores only the rows inside
those runs (a rowid range is a seek in FTS5's doclists). bm25() takes its statistics from
the whole index either way, so a row scores exactly as in the whole-store query: the
ranking inside the filter is the whole-store ranking restricted to it.

A search of the whole store, a filter that keeps many entries or a large share of the
store (the whole-store query's first pool already answers it), or one whose rows are
scattered over many runs, is searched the whole-store way. PostgreSQL has its own ranking
statement: it always is.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from offload.store import query
from offload.store.backend import Conn
from offload.store.models import Filters

# A filter keeping at most this many entries is searched inside its own rows: reading their
# ids (tens of ms at this size on an idle core) costs less than the whole-store query
# reaching deep enough to keep enough of them.
NARROW_ENTRIES = 20_000
# ... and at most this share of the store: the whole-store query's first pool (4 x the
# entries needed) keeps fewer than needed of such a filter's rows and reaches 8x deeper,
# while a broader filter is answered by that first pool, faster than reading its ids
# (bench_store's one scope holding every entry: 236 ms p50 that way, 473 ms read as runs).
NARROW_SHARE = 0.25
# ... as long as its rows fall into at most this many runs of consecutive ids (one FTS5
# query each).
MAX_RUNS = 32

_COUNT = "SELECT count(*) FROM (SELECT 1 FROM entries e WHERE {where} LIMIT ?)"
_ENTRY_IDS = "SELECT e.id FROM entries e WHERE {where} ORDER BY e.id"
# a lossy entry's kept original is indexed too (as offload.store.search maps it)
_CHUNK_IDS = (
    "SELECT m.chunk_id AS cid, e.id AS eid, m.own AS own FROM entries e "
    "CROSS JOIN entry_chunks m ON m.entry_id = e.id WHERE {where}"
)


@dataclass(frozen=True)
class Runs:
    """The filter's chunk ids and entry ids as inclusive (first, last) runs, and the
    entries of the chunks of their own bodies (not a lossy entry's kept original)."""

    chunks: tuple[tuple[int, int], ...]
    entries: tuple[tuple[int, int], ...]
    owners: dict[int, list[int]]


def runs_of(ids: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """Sorted ids as maximal runs of consecutive values."""
    out: list[tuple[int, int]] = []
    for i in ids:
        if out and i == out[-1][1] + 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return tuple(out)


def filter_runs(conn: Conn, where: str, params: list[Any]) -> Runs | None:
    """The runs of a narrow filter's rows; None when the whole-store search suits it better
    (many entries, rows scattered, or a store that is not SQLite's)."""
    if not isinstance(conn, sqlite3.Connection):
        return None
    if params and (where, params) == query.filter_sql(Filters(), params[0]):
        return None  # no filter but expiry: nothing is lost by the whole-store search
    kept = conn.execute(_COUNT.format(where=where), (*params, NARROW_ENTRIES + 1)).fetchone()
    stored = conn.execute("SELECT coalesce(sum(entries), 0) FROM scope_stats").fetchone()
    if int(kept[0]) > NARROW_ENTRIES or NARROW_SHARE * int(stored[0]) < int(kept[0]):
        return None
    entries = runs_of([int(r[0]) for r in conn.execute(_ENTRY_IDS.format(where=where), params)])
    if len(entries) > MAX_RUNS:
        return None
    owners: dict[int, list[int]] = {}
    every: set[int] = set()
    for r in conn.execute(_CHUNK_IDS.format(where=where), params):
        every.add(int(r[0]))
        if r[2]:
            owners.setdefault(int(r[0]), []).append(int(r[1]))
    chunks = runs_of(sorted(every))
    if len(chunks) > MAX_RUNS:
        return None
    return Runs(chunks, entries, owners)


def holders(conn: Conn, runs: Runs, term: str) -> int:
    """How many of the filter's entries hold ``term`` in their own body."""
    sql = "SELECT rowid FROM search_body WHERE search_body MATCH ? AND rowid BETWEEN ? AND ?"
    quoted = '"' + term.replace('"', '""') + '"'
    held: set[int] = set()
    for first, last in runs.chunks:
        for (cid,) in conn.execute(sql, (quoted, first, last)):
            held.update(runs.owners.get(int(cid), ()))
    return len(held)


def ranged(top_sql: str) -> str:
    """A whole-index BM25 statement (``... WHERE t MATCH ? ORDER BY s LIMIT ?``) limited to
    one rowid run: ``(match, first, last, limit)``."""
    head, tail = top_sql.split(" ORDER BY ")
    return f"{head} AND rowid BETWEEN ? AND ? ORDER BY {tail}"


def scores(
    conn: Conn, top_sql: str, match: str, runs: Sequence[tuple[int, int]], limit: int
) -> dict[int, float]:
    """The best ``limit`` rows of each run matching ``match`` (BM25, higher is better)."""
    sql = ranged(top_sql)
    out: dict[int, float] = {}
    for first, last in runs:
        for r in conn.execute(sql, (match, first, last, limit)):
            out[int(r[0])] = -float(r[1])
    return out
