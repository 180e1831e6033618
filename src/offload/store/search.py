"""Running a search: BM25 over chunks, then fallbacks for partial identifiers and typos.

Strictest first: every term → any word, its last term as a prefix → vocabulary expansion
over the table of known terms (terms containing a query term, then terms within a small
edit distance). Metadata
(topic, summary, tags, source) matches join in with a boost. Final order blends BM25 with
the caller's salience and a recency x frequency access score.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from offload.errors import StoreError
from offload.store import query
from offload.store.models import Entry, Filters, Hit, access_score

if TYPE_CHECKING:
    from offload.store.store import Store

# BM25 needs a pass over every match of every phrase (its IDF): ~10 ms per 100k matches.
# So the search first probes, newest first and with the filters applied, for at most
# CANDIDATES + 1 matching chunks (it stops as soon as it has them). Fewer: BM25 scores them.
# More: the terms are so common that IDF says little, and the newest CANDIDATES compete on
# salience and use. Then whole rows are fetched only for the hits that will be shown.
_CANDIDATES = 500
_KEYS = "e.id AS eid, e.salience AS salience, e.accessed AS accessed, e.access_count AS uses"
_CHUNK_PROBE = (
    f"SELECT f.rowid AS rid, {_KEYS} FROM chunks_fts f "
    "JOIN chunks c ON c.id = f.rowid JOIN blocks b ON b.id = c.block_id "
    "JOIN entries e ON e.block_hash = b.hash "
    "WHERE chunks_fts MATCH ? AND {allowed} {where} ORDER BY f.rowid DESC LIMIT ?"
)
# With a selective filter (a small scope in a big shared store) walking every match to test
# the filter is the slow part; then the probe is restricted to the filtered entries' chunks
# (``+rowid``: a set tested per match, never a full-text lookup per allowed row).
_SELECTIVE = 0.2  # of all entries
_CHUNK_ALLOWED = (
    "+f.rowid IN (SELECT c2.id FROM entries e2 JOIN blocks b2 ON b2.hash = e2.block_hash "
    "JOIN chunks c2 ON c2.block_id = b2.id WHERE {where2})"
)
_META_ALLOWED = "+f.rowid IN (SELECT e2.id FROM entries e2 WHERE {where2})"
_CHUNK_BM25 = (
    "SELECT rowid, bm25(chunks_fts) FROM chunks_fts "
    "WHERE chunks_fts MATCH ? AND rowid IN (SELECT value FROM json_each(?))"
)
_META_PROBE = (
    f"SELECT f.rowid AS rid, {_KEYS} FROM meta_fts f JOIN entries e ON e.id = f.rowid "
    "WHERE meta_fts MATCH ? AND {allowed} {where} ORDER BY f.rowid DESC LIMIT ?"
)
_META_BM25 = (
    "SELECT rowid, bm25(meta_fts, 4.0, 2.0, 3.0, 1.0) FROM meta_fts "
    "WHERE meta_fts MATCH ? AND rowid IN (SELECT value FROM json_each(?))"
)
_CHUNK_ROWS = (
    "SELECT e.*, b.size AS size, b.lines AS lines, c.id AS chunk_id, c.start_line, c.end_line, "
    "c.start AS cstart, c.end AS cend FROM chunks c "
    "JOIN blocks b ON b.id = c.block_id JOIN entries e ON e.block_hash = b.hash "
    "WHERE c.id IN (SELECT value FROM json_each(?)) AND e.id IN (SELECT value FROM json_each(?))"
)
_META_ROWS = (
    "SELECT e.*, b.size AS size, b.lines AS lines, NULL AS chunk_id FROM entries e "
    "JOIN blocks b ON b.hash = e.block_hash "
    "WHERE e.id IN (SELECT value FROM json_each(?)) AND e.id IN (SELECT value FROM json_each(?))"
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
    chunk_allowed = meta_allowed = ""
    kept, selective = _kept(store.conn, where, params) if filters != Filters() else (1, False)
    if not kept:
        return []
    if selective:
        where2, params2 = query.filter_sql(filters, now, alias="e2")
        chunk_allowed = _CHUNK_ALLOWED.format(where2=where2) + " AND"
        meta_allowed = _META_ALLOWED.format(where2=where2) + " AND"
        params = params2 + params
    want = (limit + offset) * 3 + 10
    conn = store.conn
    rows: list[Scored] = []
    meta: list[Scored] = []
    shown = p.terms()
    for match, terms in _matches(conn, p):
        chunk_probe = _CHUNK_PROBE.format(allowed=chunk_allowed, where=where)
        meta_probe = _META_PROBE.format(allowed=meta_allowed, where=where)
        chunk_sql = (chunk_probe, _CHUNK_BM25, _CHUNK_ROWS)
        meta_sql = (meta_probe, _META_BM25, _META_ROWS)
        rows = _run(conn, chunk_sql, match, params, want, now)
        meta = _run(conn, meta_sql, match, params, want, now)
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


Scored = tuple[sqlite3.Row, float]


def _kept(conn: sqlite3.Connection, where: str, params: list[Any]) -> tuple[int, bool]:
    """(entries the filters keep, up to the cap; whether that is a _SELECTIVE share)."""
    total = conn.execute("SELECT coalesce(sum(entries), 0) FROM scope_stats").fetchone()[0]
    cap = int(total * _SELECTIVE)
    row = conn.execute(
        f"SELECT count(*) FROM (SELECT 1 FROM entries e WHERE {where} LIMIT ?)",
        (*params, cap + 1),
    ).fetchone()
    return int(row[0]), int(row[0]) <= cap


def _run(
    conn: sqlite3.Connection,
    sql: tuple[str, str, str],
    match: str,
    params: list[Any],
    want: int,
    now: float,
) -> list[Scored]:
    """The best ``want`` (row, score) pairs under the filters (see the constants above)."""
    probe_sql, bm25_sql, rows_sql = sql
    try:
        keys = conn.execute(probe_sql, (match, *params, _CANDIDATES + 1)).fetchall()
        if len(keys) > _CANDIDATES:
            keys = keys[:_CANDIDATES]
            bm25: dict[int, float] = {}
        else:
            rids = json.dumps(sorted({k["rid"] for k in keys}))
            bm25 = {int(r[0]): float(r[1]) for r in conn.execute(bm25_sql, (match, rids))}
        ranked = sorted(
            (
                -_score(bm25.get(k["rid"], 0.0), k["salience"], k["accessed"], k["uses"], now),
                -k["eid"],
                k["rid"],
                k["eid"],
            )
            for k in keys
        )[:want]
        if not ranked:
            return []
        rids = json.dumps(sorted({r[2] for r in ranked}))
        eids = json.dumps(sorted({r[3] for r in ranked}))
        full = {
            (r["chunk_id"] or r["id"], r["id"]): r for r in conn.execute(rows_sql, (rids, eids))
        }
    except sqlite3.OperationalError as exc:
        # every term is quoted, so this is not the user's syntax; report it plainly
        raise StoreError(f"search failed: {exc}") from exc
    return [(full[(rid, eid)], -neg) for neg, _, rid, eid in ranked if (rid, eid) in full]


@dataclass(frozen=True)
class _Candidate:
    entry: Entry
    score: float
    chunk: tuple[int, int, int, int, int] | None  # id, start_line, end_line, start, end


def _rank(rows: list[Scored], meta: list[Scored], now: float) -> list[_Candidate]:
    out: list[_Candidate] = []
    seen: set[tuple[int, int]] = set()
    for r, bm in rows:
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
        out.append(_Candidate(entry, bm, chunk))
    chunked = {c.entry.id for c in out}
    for r, bm in meta:
        entry = Entry.from_row(r)
        if entry.id in chunked:
            continue
        chunked.add(entry.id)
        out.append(_Candidate(entry, bm * 1.2, None))
    # equal scores: the newer entry first, then the earlier chunk
    out.sort(key=lambda c: (-c.score, -c.entry.id, c.chunk[1] if c.chunk else 0))
    return out


def _hit(store: Store, c: _Candidate, terms: list[str], width: int) -> Hit:
    if c.chunk is None:
        about = " · ".join(x for x in (c.entry.topic, c.entry.summary) if x)
        return Hit(c.entry, None, 1, c.entry.lines, 1, c.score, about[:width], "")
    chunk_id, first, last, start, end = c.chunk
    text = store.block_text(c.entry.block_hash)[start:end]
    line, snip = query.snippet(text, terms, first, width)
    return Hit(c.entry, chunk_id, first, last, line, c.score, snip, text)


def _score(bm25: float, salience: float, accessed: float, uses: int, now: float) -> float:
    # bm25() is negative, lower is better; flip it and let salience and use nudge the order
    relevance = max(0.0, -bm25) + 1e-6  # tiny floor: with no IDF signal, salience decides
    return relevance * (1.0 + 0.5 * salience + 0.25 * access_score(accessed, uses, now))
