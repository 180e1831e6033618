"""Counting how common each query term is among the entries a search covers (SQLite).

The decision is :func:`offload.core.selectivity.selective`; this module only counts. A
term's count in the whole index comes from FTS5's own vocabulary (``fts5vocab``, a temp
table per connection: no schema change), so a term rarer than the cap overall is never
counted under the filter; only the few frequent ones are, and each count stops at the cap.
A search of the whole store (no filter but expiry), or under a filter that keeps most of it
(:data:`BROAD_SHARE`), takes its shares over the index's chunks from that vocabulary alone.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from typing import Any

from offload.core import selectivity
from offload.store.backend import Conn, Sql, pg_markers
from offload.store.models import Filters
from offload.store.postgres import pgsql
from offload.store.search import narrow, selective

# Each frequent term's chunks (FTS5 reads a term's rows in C, once per query), counted per
# entry over one pass of the entries the filter keeps: the filter's size bounds the work,
# not the terms' (driven from a term's rows instead, the joins cost ~0.4 s for one common
# word at 100k entries).
# (store/write/chunkmap.py: an entry's own chunks by its id)
_HELD_TEXT = (
    "SELECT {counts} FROM entries e JOIN entry_chunks m ON m.entry_id = e.id AND m.own = 1 "
    "WHERE {where}"
)
_HOLDS = (
    "count(DISTINCT CASE WHEN m.chunk_id IN "
    "(SELECT rowid FROM search_body WHERE search_body MATCH ?) THEN e.id END)"
)
# PostgreSQL's: the row's tsvector holds the term's tsquery
_HOLDS_PG = (
    "count(DISTINCT CASE WHEN m.chunk_id IN "
    "(SELECT rowid FROM search_body WHERE terms @@ %s::tsquery) THEN e.id END)"
)
# A filter keeping at least this share of the store's entries is searched with the index's
# own shares (as the whole store is): counting under it would cost a pass over most entries.
BROAD_SHARE = 0.5


def selective_terms(
    conn: Conn,
    terms: Sequence[str],
    where: str,
    params: list[Any],
    narrowed: narrow.Narrow | None = None,
    *,
    filters: Filters | None = None,
    stats: selective.SearchStats | None = None,
) -> list[str]:
    """``terms`` less those held by a large share of the entries under the filter (with
    ``narrowed``, the filter as store/search/narrow.py read it for this search: each count reads
    only its rows; ``filters``, what ``where`` says, lets a filter of scope and kinds be
    sized without a scan; ``stats``, the search's term counts)."""
    if len(terms) < 2:
        return list(terms)
    if narrow.is_whole_store(where, params):
        return _over_the_index(conn, terms, stats)
    if narrowed is not None:
        searched = narrowed.entries
    else:
        broad = math.ceil(BROAD_SHARE * narrow.stored_entries(conn))
        searched = narrow.filter_size(conn, filters, where, params, broad)
        if searched >= broad:
            return _over_the_index(conn, terms, stats)
    cap = selectivity.common_cap(searched)
    if cap is None:
        return list(terms)
    # a term fewer chunks hold than the cap is rare under any filter: only the others count
    frequent = [t for t, chunks in _index_counts(conn, terms, stats).items() if chunks >= cap]
    if not frequent:
        return list(terms)
    if narrowed is not None:
        held = narrow.holders(conn, narrowed, frequent)
    else:
        sql = _held(len(frequent), where)
        quoted = ['"' + t.replace('"', '""') + '"' for t in frequent]
        row = conn.execute(sql, (*quoted, *params)).fetchone()
        held = {t: int(row[i]) for i, t in enumerate(frequent)}
    return selectivity.selective(terms, held, searched)


def _held(n: int, where: str) -> Sql:
    """How many of the filter's entries hold each of ``n`` terms (their MATCH strings
    first, then the filter's parameters)."""
    return Sql(
        _HELD_TEXT.format(counts=", ".join([_HOLDS] * n), where=where),
        _HELD_TEXT.format(counts=", ".join([_HOLDS_PG] * n), where=pg_markers(where)),
        params=pgsql.tsqueries_at(*range(n)),
    )


def _over_the_index(
    conn: Conn, terms: Sequence[str], stats: selective.SearchStats | None = None
) -> list[str]:
    """``terms`` less those most of the index's chunks hold, when the search covers the
    whole store (no filter but expiry): the shares come from the vocabulary alone. Counting
    entries under the filter instead costs a scan of the entries and, per common term, a
    join over up to a quarter of them (~0.4 s for one common word at 100k entries)."""
    if stats is not None:
        chunks = stats.chunks
    else:
        chunks = int(
            conn.execute(Sql("SELECT count(*) FROM chunks", pgsql.chunk_count())).fetchone()[0]
        )
    cap = selectivity.common_cap(chunks)
    if cap is None:
        return list(terms)
    return selectivity.selective(terms, _index_counts(conn, terms, stats), chunks)


def _index_counts(
    conn: Conn, terms: Sequence[str], stats: selective.SearchStats | None = None
) -> dict[str, int]:
    """How many of the index's chunks hold each of ``terms`` (the ones it knows)."""
    if stats is not None:
        return {t: n for t, n in stats.counts(terms).items() if n}
    if isinstance(conn, sqlite3.Connection):  # the cached counts (store/search/selective.py)
        cached = selective.stats_for(conn, "search_body")
        cached.totals(conn)
        return {t: n for t, n in cached.df(conn, list(dict.fromkeys(terms))).items() if n}
    return selective.vocab_counts(conn, "search_body", terms)  # PostgreSQL: one statement
