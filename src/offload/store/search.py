"""Running a search: BM25 over chunks, then fallbacks for partial identifiers and typos.

Strictest first: every term → any word, its last term as a prefix → vocabulary expansion
over the table of known terms (terms containing a query term, then terms within a small
edit distance). Metadata
(topic, summary, tags, source) matches join in with a boost. Final order blends BM25 with
the caller's salience and a recency x frequency access score.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from offload.errors import StoreError
from offload.store import query
from offload.store.models import Entry, Filters, Hit

if TYPE_CHECKING:
    from offload.store.store import Store

# The newest CANDIDATES matches are scored; a term found in most of a 100k-entry store
# would otherwise cost a BM25 evaluation per match (~250 ms). The inner query walks the
# index newest-first and stops; if too few survive the filters, the search runs uncapped.
_CANDIDATES = 2000
_CHUNK_SQL = (
    "SELECT e.*, b.size AS size, b.lines AS lines, c.id AS chunk_id, c.start_line, c.end_line, "
    "c.start AS cstart, c.end AS cend, m.bm AS bm FROM "
    "(SELECT rowid AS rid, bm25(chunks_fts) AS bm FROM chunks_fts WHERE chunks_fts MATCH ? "
    "ORDER BY rowid DESC LIMIT ?) m "
    "JOIN chunks c ON c.id = m.rid "
    "JOIN blocks b ON b.id = c.block_id "
    "JOIN entries e ON e.block_hash = b.hash "
    "WHERE {where} ORDER BY m.bm LIMIT ?"
)
_META_SQL = (
    "SELECT e.*, b.size AS size, b.lines AS lines, m.bm AS bm FROM "
    "(SELECT rowid AS rid, bm25(meta_fts, 4.0, 2.0, 3.0, 1.0) AS bm FROM meta_fts "
    "WHERE meta_fts MATCH ? ORDER BY rowid DESC LIMIT ?) m "
    "JOIN entries e ON e.id = m.rid "
    "JOIN blocks b ON b.hash = e.block_hash "
    "WHERE {where} ORDER BY m.bm LIMIT ?"
)
_TYPO_CANDIDATES = 20_000
_EXPANSIONS = 24


def search_hits(
    store: Store, text: str, filters: Filters, *, limit: int, offset: int, width: int
) -> list[Hit]:
    """The ranked hits for ``text`` under ``filters`` (see the module docstring)."""
    limit = max(1, min(int(limit), 200))
    offset = max(0, int(offset))
    p = query.plan(text)
    if p.empty:
        return []
    now = store.clock()
    where, params = query.filter_sql(filters, now)
    want = (limit + offset) * 3 + 10
    conn = store.conn
    rows: list[sqlite3.Row] = []
    meta: list[sqlite3.Row] = []
    shown = p.terms()
    for match, terms in _matches(conn, p):
        rows = _run(conn, _CHUNK_SQL.format(where=where), match, params, want)
        meta = _run(conn, _META_SQL.format(where=where), match, params, want)
        if rows or meta:
            shown = terms
            break
    ranked = _rank(rows, meta, now)[offset : offset + limit]
    # only the hits shown are decompressed (through the store's verified body cache)
    return [_hit(store, c, shown, width) for c in ranked]


def _matches(conn: sqlite3.Connection, p: query.Plan) -> Iterator[tuple[str, list[str]]]:
    """(MATCH expression, terms to highlight), strictest first; the vocabulary is scanned
    only when the cheap expressions find nothing."""
    yield p.all_words(), p.terms()
    yield p.any_prefix(), p.terms()
    expanded = _expand(conn, p.terms())
    if expanded:
        yield query.any_of(expanded), expanded


def _expand(conn: sqlite3.Connection, terms: list[str]) -> list[str]:
    """Known terms that contain a query term, or are a typo or two away from one.

    Scans the vocabulary in SQL (C speed); only the few length- and edge-compatible
    candidates reach the edit-distance check in Python.
    """
    found: dict[str, None] = {}
    for t in (t for t in terms if len(t) >= 3):
        rows = conn.execute(
            "SELECT term FROM terms WHERE instr(term, ?) > 0 AND term != ? "
            "ORDER BY length(term), term LIMIT ?",
            (t, t, _EXPANSIONS),
        ).fetchall()
        for (v,) in rows:
            found.setdefault(v, None)
        budget = query.typo_budget(t)
        if not budget:
            continue
        # a typo rarely hits both ends of a word: compare terms sharing one of them
        rows = conn.execute(
            "SELECT term FROM terms WHERE length(term) BETWEEN ? AND ? "
            "AND (substr(term, 1, 2) = ? OR substr(term, -2) = ?) LIMIT ?",
            (len(t) - budget, len(t) + budget, t[:2], t[-2:], _TYPO_CANDIDATES),
        ).fetchall()
        near = sorted(
            (d, v) for (v,) in rows if v != t and (d := query.edit_distance(t, v, budget)) <= budget
        )
        for _d, v in near[:_EXPANSIONS]:
            found.setdefault(v, None)
    return list(found)


def _run(
    conn: sqlite3.Connection, sql: str, match: str, params: list[Any], limit: int
) -> list[sqlite3.Row]:
    """Newest candidates first; uncapped when the cap may have hidden filtered matches."""
    try:
        rows = conn.execute(sql, (match, _CANDIDATES, *params, limit)).fetchall()
        if len(rows) < limit:
            # fewer than wanted: either that is all there is (cheap to confirm: few
            # matches) or the filters dropped many of the newest; look at every match
            rows = conn.execute(sql, (match, -1, *params, limit)).fetchall()
        return rows
    except sqlite3.OperationalError as exc:
        # every term is quoted, so this is not the user's syntax; report it plainly
        raise StoreError(f"search failed: {exc}") from exc


@dataclass(frozen=True)
class _Candidate:
    entry: Entry
    score: float
    chunk: tuple[int, int, int, int, int] | None  # id, start_line, end_line, start, end


def _rank(rows: list[sqlite3.Row], meta: list[sqlite3.Row], now: float) -> list[_Candidate]:
    out: list[_Candidate] = []
    seen: set[tuple[int, int]] = set()
    for r in rows:
        key = (int(r["id"]), int(r["chunk_id"]))
        if key in seen:
            continue
        seen.add(key)
        entry = Entry.from_row(r)
        chunk = (
            int(r["chunk_id"]),
            int(r["start_line"]),
            int(r["end_line"]),
            int(r["cstart"]),
            int(r["cend"]),
        )
        out.append(_Candidate(entry, _score(float(r["bm"]), entry, now), chunk))
    chunked = {c.entry.id for c in out}
    for r in meta:
        entry = Entry.from_row(r)
        if entry.id in chunked:
            continue
        chunked.add(entry.id)
        out.append(_Candidate(entry, _score(float(r["bm"]), entry, now) * 1.2, None))
    out.sort(key=lambda c: (-c.score, c.entry.id, c.chunk[1] if c.chunk else 0))
    return out


def _hit(store: Store, c: _Candidate, terms: list[str], width: int) -> Hit:
    if c.chunk is None:
        about = " · ".join(x for x in (c.entry.topic, c.entry.summary) if x)
        return Hit(c.entry, None, 1, c.entry.lines, 1, c.score, about[:width], "")
    chunk_id, first, last, start, end = c.chunk
    text = store.block_text(c.entry.block_hash)[start:end]
    line, snip = query.snippet(text, terms, first, width)
    return Hit(c.entry, chunk_id, first, last, line, c.score, snip, text)


def _score(bm25: float, entry: Entry, now: float) -> float:
    # bm25() is negative, lower is better; flip it and let salience and use nudge the order
    relevance = max(0.0, -bm25) + 1e-6  # tiny floor: with no IDF signal, salience decides
    return relevance * (1.0 + 0.5 * entry.salience + 0.25 * entry.access_score(now))
