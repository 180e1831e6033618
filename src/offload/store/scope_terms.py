"""Counting how common each query term is among the entries a search covers (SQLite).

The decision is :func:`offload.core.selectivity.selective`; this module only counts. A
term's count in the whole index comes from FTS5's own vocabulary (``fts5vocab``, a temp
table per connection: no schema change), so a term rarer than the cap overall is never
counted under the filter; only the few frequent ones are, and each count stops at the cap.
A search of the whole store (no filter but expiry) takes its shares over the index's chunks
from that vocabulary alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from offload.core import selectivity
from offload.store import query
from offload.store.backend import Conn
from offload.store.models import Filters

_VOCAB = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.search_body_rows "
    "USING fts5vocab(main, search_body, row)"
)
_HELD = (
    "SELECT count(*) FROM (SELECT DISTINCT e.id FROM search_body s "
    "JOIN chunks c ON c.id = s.rowid JOIN blocks b ON b.id = c.block_id "
    "JOIN entries e ON e.block_hash = b.hash "
    "WHERE search_body MATCH ? AND {where} LIMIT ?)"
)


def selective_terms(conn: Conn, terms: Sequence[str], where: str, params: list[Any]) -> list[str]:
    """``terms`` less those held by a large share of the entries under the filter."""
    if len(terms) < 2:
        return list(terms)
    if params and (where, params) == query.filter_sql(Filters(), params[0]):
        return _over_the_index(conn, terms)
    searched = int(
        conn.execute(f"SELECT count(*) FROM entries e WHERE {where}", params).fetchone()[0]
    )
    cap = selectivity.common_cap(searched)
    if cap is None:
        return list(terms)
    held = {}
    for t, chunks in _index_counts(conn, terms).items():
        if chunks >= cap:  # frequent overall: under the filter too?
            row = conn.execute(
                _HELD.format(where=where),
                ('"' + t.replace('"', '""') + '"', *params, cap),
            ).fetchone()
            held[t] = int(row[0])
    return selectivity.selective(terms, held, searched)


def _over_the_index(conn: Conn, terms: Sequence[str]) -> list[str]:
    """``terms`` less those most of the index's chunks hold, when the search covers the
    whole store (no filter but expiry): the shares come from the vocabulary alone. Counting
    entries under the filter instead costs a scan of the entries and, per common term, a
    join over up to a quarter of them (~0.4 s for one common word at 100k entries)."""
    chunks = int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
    cap = selectivity.common_cap(chunks)
    if cap is None:
        return list(terms)
    return selectivity.selective(terms, _index_counts(conn, terms), chunks)


def _index_counts(conn: Conn, terms: Sequence[str]) -> dict[str, int]:
    """How many of the index's chunks hold each of ``terms`` (the ones it knows)."""
    conn.execute(_VOCAB)
    counts = {}
    for t in dict.fromkeys(terms):
        row = conn.execute("SELECT doc FROM temp.search_body_rows WHERE term = ?", (t,)).fetchone()
        if row is not None:
            counts[t] = int(row[0])
    return counts
