"""Running a search: BM25 over chunks, then fallbacks for partial identifiers and typos.

Strictest first: every word (as a phrase) → any word as a prefix → vocabulary expansion
(terms containing a query term, then terms within a small edit distance). Metadata
(topic, summary, tags, source) matches join in with a boost. Final order blends BM25 with
the caller's salience and a recency x frequency access score.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from offload.errors import StoreError
from offload.store import blocks, query
from offload.store.models import Entry, Filters, Hit

if TYPE_CHECKING:
    from offload.store.store import Store

_CHUNK_SQL = (
    "SELECT e.*, b.size AS size, b.lines AS lines, c.id AS chunk_id, c.start_line, c.end_line, "
    "c.start AS cstart, c.end AS cend, b.codec AS codec, CAST(b.data AS BLOB) AS data, "
    "bm25(chunks_fts) AS bm FROM chunks_fts "
    "JOIN chunks c ON c.id = chunks_fts.rowid "
    "JOIN entries e ON e.block_hash = c.block_hash "
    "JOIN blocks b ON b.hash = e.block_hash "
    "WHERE chunks_fts MATCH ? AND {where} ORDER BY bm LIMIT ?"
)
_META_SQL = (
    "SELECT e.*, b.size AS size, b.lines AS lines, bm25(meta_fts, 4.0, 2.0, 3.0, 1.0) AS bm "
    "FROM meta_fts JOIN entries e ON e.id = meta_fts.rowid "
    "JOIN blocks b ON b.hash = e.block_hash "
    "WHERE meta_fts MATCH ? AND {where} ORDER BY bm LIMIT ?"
)
_VOCAB_SCAN_LIMIT = 200_000
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
    hits = _rank(rows, meta, shown, now, width)
    return hits[offset : offset + limit]


def _matches(conn: sqlite3.Connection, p: query.Plan) -> Iterator[tuple[str, list[str]]]:
    """(MATCH expression, terms to highlight), strictest first; the vocabulary is scanned
    only when the cheap expressions find nothing."""
    yield p.all_words(), p.terms()
    yield p.any_prefix(), p.terms()
    expanded = _expand(conn, p.terms())
    if expanded:
        yield query.any_of(expanded), expanded


def _expand(conn: sqlite3.Connection, terms: list[str]) -> list[str]:
    """Vocabulary terms that contain a query term, or are a typo away from one."""
    wanted = [t for t in terms if len(t) >= 3]
    if not wanted:
        return []
    found: dict[str, None] = {}
    rows = conn.execute("SELECT term FROM chunks_vocab LIMIT ?", (_VOCAB_SCAN_LIMIT,)).fetchall()
    vocab = [r[0] for r in rows]
    for t in wanted:
        hits = [v for v in vocab if t in v and v != t]
        hits.sort(key=lambda v: (len(v), v))
        for v in hits[:_EXPANSIONS]:
            found.setdefault(v, None)
    for t in wanted:
        budget = query.typo_budget(t)
        if not budget:
            continue
        # a typo rarely hits both ends of a word: compare only terms sharing one of them
        near = [
            (d, v)
            for v in vocab
            if abs(len(v) - len(t)) <= budget
            and (v[0] == t[0] or v[-2:] == t[-2:])
            and (d := query.edit_distance(t, v, budget)) <= budget
        ]
        near.sort()
        for _d, v in near[:_EXPANSIONS]:
            found.setdefault(v, None)
    return list(found)


def _run(
    conn: sqlite3.Connection, sql: str, match: str, params: list[Any], limit: int
) -> list[sqlite3.Row]:
    try:
        return conn.execute(sql, (match, *params, limit)).fetchall()
    except sqlite3.OperationalError as exc:
        # every term is quoted, so this is not the user's syntax; report it plainly
        raise StoreError(f"search failed: {exc}") from exc


def _rank(
    rows: list[sqlite3.Row], meta: list[sqlite3.Row], terms: list[str], now: float, width: int
) -> list[Hit]:
    hits: list[Hit] = []
    seen: set[tuple[int, int | None]] = set()
    for r in rows:
        entry = Entry.from_row(r)
        key = (entry.id, int(r["chunk_id"]))
        if key in seen:
            continue
        seen.add(key)
        body = blocks.unpack(entry.block_hash, r["codec"], bytes(r["data"]))
        chunk = body[r["cstart"] : r["cend"]]
        line, snip = query.snippet(chunk, terms, int(r["start_line"]), width)
        hits.append(
            Hit(
                entry=entry,
                chunk_id=int(r["chunk_id"]),
                start_line=int(r["start_line"]),
                end_line=int(r["end_line"]),
                match_line=line,
                score=_score(float(r["bm"]), entry, now),
                snippet=snip,
                text=chunk,
            )
        )
    chunked = {h.entry.id for h in hits}
    for r in meta:
        entry = Entry.from_row(r)
        if entry.id in chunked or (entry.id, None) in seen:
            continue
        seen.add((entry.id, None))
        about = " · ".join(x for x in (entry.topic, entry.summary) if x)
        hits.append(
            Hit(
                entry=entry,
                chunk_id=None,
                start_line=1,
                end_line=entry.lines,
                match_line=1,
                score=_score(float(r["bm"]), entry, now) * 1.2,
                snippet=about[:width],
                text="",
            )
        )
    hits.sort(key=lambda h: (-h.score, h.entry.id, h.start_line))
    return hits


def _score(bm25: float, entry: Entry, now: float) -> float:
    # bm25() is negative, lower is better; flip it and let salience and use nudge the order
    relevance = -bm25
    return relevance * (1.0 + 0.5 * entry.salience + 0.25 * entry.access_score(now))
