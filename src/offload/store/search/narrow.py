"""Searching inside a filter: BM25 over only the rows the filter keeps (SQLite).

Whole-store BM25 takes the index's best rows and drops those the filter does not keep,
reaching deeper until enough are left. For a filter keeping a small share of the store
that reaches the bottom of the index: every matching row is scored, then mapped to its
entry and filtered (seconds at 100k entries for a 300-entry scope). A filter keeping at
most :data:`NARROW_SHARE` of the store is read instead, once per search, into two
per-connection temp tables: its entry ids, and their chunk ids (through the stored chunk
map, store/write/chunkmap.py: integer keys, ~1-2 us an entry). Every BM25 statement is then
limited to the span of those ids (a rowid range is a seek in FTS5's doclists) and, when
other rows lie inside the span (a scattered scope, or several runs), to the rows in the
temp table (``+rowid IN``: a probe per matching row, after FTS5 found it and before
bm25() scores it). bm25() takes its statistics from the whole index either way, so a row
scores exactly as in the whole-store query, and the selective plan's bounds
(store/search/selective.py) hold unchanged: the ranking inside the filter is the whole-store
ranking restricted to it, at a cost of the filter's size plus the matches in its span.

A search of the whole store, or a filter that keeps a larger share (the whole-store
query's first pool already answers it), is searched the whole-store way. PostgreSQL has
its own ranking statement: it always is.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from dataclasses import dataclass
from typing import Any, TypeGuard

from offload.store.backend import Conn, Sql
from offload.store.models import Filters
from offload.store.search import query

# A filter keeping at most this share of the store is searched inside its own rows: the
# whole-store query's first pool (4 x the entries needed) keeps fewer than needed of such
# a filter's rows and reaches 8x deeper, while a broader one is answered by that first
# pool, faster than reading its ids (bench_store's one scope holding every entry: 236 ms
# p50 that way, 473 ms read as runs).
NARROW_SHARE = 0.25

_TABLES = (
    Sql.sqlite_only("CREATE TEMP TABLE IF NOT EXISTS narrow_entries (id INTEGER PRIMARY KEY)"),
    Sql.sqlite_only("CREATE TEMP TABLE IF NOT EXISTS narrow_chunks (id INTEGER PRIMARY KEY)"),
)
# (PostgreSQL wants a name for a subquery in FROM)
_BOUNDED_COUNT = Sql(
    "SELECT count(*) FROM (SELECT 1 FROM entries e WHERE {where} LIMIT ?)",
    "SELECT count(*) FROM (SELECT 1 FROM entries e WHERE {where} LIMIT %s) AS sub",
)
# in id order, up to a bound: a filter that is not one of scope and kinds is sized by
# the same scan that reads it
_FILL_ENTRIES = Sql.sqlite_only(
    "INSERT INTO temp.narrow_entries SELECT e.id FROM entries e WHERE {where} ORDER BY e.id LIMIT ?"
)
# the entries in id order: their map rows are read in order (neighbouring pages)
_FILL_CHUNKS = Sql.sqlite_only(
    "INSERT OR IGNORE INTO temp.narrow_chunks SELECT m.chunk_id FROM temp.narrow_entries x "
    "CROSS JOIN entry_chunks m ON m.entry_id = x.id"
)
_SPAN = Sql.sqlite_only("SELECT min(id), max(id), count(*) FROM temp.{table}")
# each frequent term's chunks (FTS5 reads a term's rows in C, once per statement), counted
# per entry over one pass of the filter's own chunks
_HELD = Sql.sqlite_only(
    "SELECT {counts} FROM temp.narrow_entries x "
    "CROSS JOIN entry_chunks m ON m.entry_id = x.id AND m.own = 1"
)
_HOLDS = (
    "count(DISTINCT CASE WHEN m.chunk_id IN (SELECT rowid FROM search_body "
    "WHERE search_body MATCH ? AND rowid BETWEEN ? AND ?) THEN x.id END)"
)
# what the rest of the search checks entries against once the filter is read: the same
# entries, by id (a probe of the temp table instead of the filter's own conditions)
KEPT = "e.id IN (SELECT id FROM temp.narrow_entries)"


@dataclass(frozen=True)
class Span:
    """The ids a filter keeps in one table: their range, and whether other rows lie in it."""

    table: str  # the temp table holding them
    first: int
    last: int
    dense: bool  # every id of the range is the filter's (a contiguous scope)

    def restrict(self, top_sql: str) -> Sql:
        """A whole-index BM25 statement (``... WHERE t MATCH ? ORDER BY s LIMIT ?``) limited
        to these rows: parameters ``(match, first, last, limit)``."""
        head, tail = top_sql.split(" ORDER BY ")
        member = "" if self.dense else f" AND +rowid IN (SELECT id FROM temp.{self.table})"
        return Sql.sqlite_only(f"{head} AND rowid BETWEEN ? AND ?{member} ORDER BY {tail}")

    @property
    def params(self) -> tuple[int, int]:
        """The range's bounds, for :meth:`restrict`'s statement."""
        return (self.first, self.last)


@dataclass(frozen=True)
class Narrow:
    """A filter read for one search: how many entries it keeps, and the spans of its
    chunks (``search_body`` rows) and entries (``search_meta`` rows)."""

    entries: int
    chunks: Span
    meta: Span

    @property
    def where(self) -> tuple[str, list[Any]]:
        """The filter as a condition on ``e`` (with its parameters): the entries read, by id."""
        return KEPT, []


def filter_size(
    conn: Conn, filters: Filters | None, where: str, params: list[Any], bound: int
) -> int:
    """How many entries the filter keeps, counted up to ``bound`` (more: ``bound``). A filter
    of scope and kinds alone is read from ``scope_stats`` less the expired entries (a few
    index rows), so a filter every entry passes costs no scan."""
    if _simple(filters):
        conds, args = ["1 = 1"], []
        if filters.scope is not None:
            conds.append("scope = ?")
            args.append(filters.scope)
        if filters.kinds:
            conds.append(f"kind IN ({','.join('?' * len(filters.kinds))})")
            args.extend(filters.kinds)
        cond = " AND ".join(conds)
        total = conn.execute(
            Sql(f"SELECT coalesce(sum(entries), 0) FROM scope_stats WHERE {cond}"), args
        ).fetchone()
        expired = conn.execute(
            Sql(
                f"SELECT count(*) FROM entries WHERE expires IS NOT NULL AND expires <= ? AND {cond}"
            ),
            (params[0], *args),
        ).fetchone()
        return min(bound, int(total[0]) - int(expired[0]))
    return int(conn.execute(_BOUNDED_COUNT.fill(where=where), (*params, bound)).fetchone()[0])


def _simple(filters: Filters | None) -> TypeGuard[Filters]:
    """Whether the filter is one of scope and kinds only (sized from ``scope_stats``)."""
    return filters is not None and dataclasses.replace(filters, scope=None, kinds=()) == Filters()


def stored_entries(conn: Conn) -> int:
    """How many entries the store holds (expired ones included: a cheap sum)."""
    return int(conn.execute(Sql("SELECT coalesce(sum(entries), 0) FROM scope_stats")).fetchone()[0])


def is_whole_store(where: str, params: list[Any]) -> bool:
    """Whether the filter is no filter but expiry."""
    return bool(params) and (where, params) == query.filter_sql(Filters(), params[0])


def plan(conn: Conn, filters: Filters, where: str, params: list[Any]) -> Narrow | None:
    """The filter read for one search, when it keeps at most NARROW_SHARE of the store;
    None when the whole-store search suits it better (or the store is not SQLite's)."""
    if not isinstance(conn, sqlite3.Connection) or is_whole_store(where, params):
        return None
    bound = int(NARROW_SHARE * stored_entries(conn))
    if _simple(filters) and filter_size(conn, filters, where, params, bound + 1) > bound:
        return None
    for sql in _TABLES:
        conn.execute(sql)
    conn.execute(Sql("DELETE FROM temp.narrow_entries"))
    conn.execute(Sql("DELETE FROM temp.narrow_chunks"))
    kept = conn.execute(_FILL_ENTRIES.fill(where=where), (*params, bound + 1)).rowcount
    if kept > bound:
        conn.execute(Sql("DELETE FROM temp.narrow_entries"))
        return None
    conn.execute(_FILL_CHUNKS)
    return Narrow(int(kept), _span(conn, "narrow_chunks"), _span(conn, "narrow_entries"))


def _span(conn: Conn, table: str) -> Span:
    first, last, n = conn.execute(_SPAN.fill(table=table)).fetchone()
    if not n:  # nothing kept: a range no row falls in
        return Span(table, 1, 0, True)
    return Span(table, int(first), int(last), int(n) == int(last) - int(first) + 1)


def holders(conn: Conn, narrowed: Narrow, terms: list[str]) -> dict[str, int]:
    """How many of the filter's entries (``narrowed``, the last :func:`plan`) hold each of
    ``terms`` in their own body (not a lossy entry's kept original)."""
    sql = _HELD.fill(counts=", ".join([_HOLDS] * len(terms)))
    args: list[Any] = []
    for t in terms:
        args += ['"' + t.replace('"', '""') + '"', *narrowed.chunks.params]
    row = conn.execute(sql, args).fetchone()
    return {t: int(row[i]) for i, t in enumerate(terms)}
