"""Step 2 of a search: the lexical candidates, any-term BM25 over every match.

Every chunk and every entry's metadata matching *any* of the query's terms is ranked by
BM25 (metadata columns weighted above bodies); the top of that ranking is mapped to the
entries the filter keeps, reaching deeper only when it keeps too few. BM25's work is
bounded by term selectivity (store/search/selective.py) and, with the in-memory index
(store/search/memory/resident.py), done without FTS5; the result is the same either way.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any

from offload.store import schema
from offload.store.backend import Conn, Row, Sql
from offload.store.postgres import pgsql
from offload.store.search import narrow, selective
from offload.store.search.memory import postings
from offload.store.search.query import match_expression
from offload.store.search.state import POSTINGS, Candidate, SearchState, scoring_path

_MIN_POOL = 200
# a lookup's case check (store/search/ranking.py) reads up to this many chunks of an entry
_EXACT_CHUNKS = 4

# the best rows of a MATCH; on PostgreSQL ts_rank weighted by each term's IDF (pgsql.top)
_BODY_TOP = Sql(
    "SELECT rowid, bm25(search_body) AS s FROM search_body "
    "WHERE search_body MATCH ? ORDER BY s LIMIT ?",
    pgsql.top("search_body"),
    params=pgsql.top_params,
)
_META_TOP = Sql(
    "SELECT rowid, bm25(search_meta, {w}) AS s FROM search_meta "
    "WHERE search_meta MATCH ? ORDER BY s LIMIT ?".format(
        w=", ".join(str(w) for w in schema.META_WEIGHTS)
    ),
    pgsql.top("search_meta"),
    params=pgsql.top_params,
)
_KEYS = (
    "e.id AS eid, e.scope AS scope, e.kind AS kind, e.salience AS salience, "
    "e.accessed AS accessed, e.access_count AS uses"
)
# The scored ids drive these joins (CROSS JOIN fixes SQLite's join order), and a chunk is
# mapped to its entry before the filter is applied to the entries by id: left free, the
# planner walked a scope's entries by index and probed every id for each of them, the
# scope's size times the ids' (a minute for a 12,500-entry scope of a 100k store).
# (store/write/chunkmap.py: a chunk's entries by integer keys; a lossy entry's kept original is
# indexed too, so a word only it holds finds the entry)
_BODY_ENTRIES = Sql(
    "SELECT m.chunk_id AS cid, m.entry_id AS eid FROM json_each(?) j "
    "CROSS JOIN entry_chunks m WHERE m.chunk_id = j.value",
    (
        "SELECT m.chunk_id AS cid, m.entry_id AS eid FROM offload_ids(%s) j CROSS "
        "JOIN entry_chunks m WHERE m.chunk_id = j.value"
    ),
)
_META_ENTRIES = Sql(
    f"SELECT NULL AS cid, {_KEYS} FROM json_each(?) j CROSS JOIN entries e "
    "WHERE e.id = j.value AND {where}",
    f"SELECT NULL AS cid, {_KEYS} FROM offload_ids(%s) j CROSS JOIN entries e "
    "WHERE e.id = j.value AND {where}",
)


def lexical_candidates(state: SearchState, terms: list[str]) -> list[Candidate]:
    """Entries matching any of ``terms`` under the search's filter, best BM25 first.

    Score = the best chunk's BM25 + the metadata row's weighted BM25 (both flipped to
    higher-is-better). BM25 is computed by FTS5 over every match; the top of that ranking
    is then mapped to entries and filtered, reaching deeper only when the filter keeps too
    few of them. Which code scores the body's rows is :func:`~offload.store.search.state.
    scoring_path`'s choice: a narrow filter's rows only (store/search/narrow.py), the
    in-memory index (store/search/memory/resident.py, to the same scores and the same
    pools; on PostgreSQL that is FTS5's BM25 there too), or the database's statements.
    With the state's ``entry_map`` the scored chunks' entries are looked up in memory
    (store/search/memory/entrymap.py); with its ``gate`` (store/search/memory/entrykeys.py)
    the filter and the entries' columns too.
    """
    match = match_expression(terms)
    path = scoring_path(state, terms)
    if path.lexical == POSTINGS:
        body = _top_body(state, terms, view=state.view)
        if not state.on_sqlite:
            # PostgreSQL ranks metadata by ts_rank: a body term is brought to its scale (the
            # most it adds, idf * (k1 + 1), becomes ts_rank's most, 0.1 * idf)
            for c in body.values():
                c.score *= pgsql.BODY_TERM_WEIGHT / (selective.K1 + 1.0)
    else:
        chunks = None if state.narrowed is None else state.narrowed.chunks
        body = _top_body(state, terms, chunks, stats=state.stats)
    held = None if state.stats is None else state.stats.meta_held(terms)
    meta: dict[int, Candidate] = {}
    if held is None or held:  # no metadata row holds a term: nothing to rank there
        meta_rows = None if state.narrowed is None else state.narrowed.meta
        meta = _top_entries(state, _META_TOP, _META_ENTRIES, match, meta_rows)
    trace = state.trace
    if trace is not None:  # each side's score, before the sum below changes the body's
        body_scores, meta_scores = trace.scores(body.values()), trace.scores(meta.values())
    out: dict[int, Candidate] = dict(body)
    for eid, c in meta.items():
        have = out.get(eid)
        if have is None:
            out[eid] = c
        else:
            have.score += c.score
    found = sorted(out.values(), key=lambda c: (-c.score, -c.entry_id))
    if trace is not None:
        trace.path = path
        trace.lexical_step(body_scores, meta_scores, found)
    return found


def _top_entries(
    state: SearchState,
    top_sql: Sql,
    entries_sql: Sql,
    match: str,
    span: narrow.Span | None = None,
) -> dict[int, Candidate]:
    conn, where, params, gate = state.conn, state.where, state.params, state.gate
    pool = max(_MIN_POOL, state.need * 4)
    top, bounds = (top_sql, ()) if span is None else (span.restrict(top_sql), span.params)
    while True:
        scored = conn.execute(top, (match, *bounds, pool)).fetchall()
        bm25 = {int(r[0]): -float(r[1]) for r in scored}
        held: list[Row] = []
        ask = list(bm25)
        if gate is not None:  # the held entries' rows from memory, the others by id
            got, ask = gate.rows(ask)
            held = [r for r in got.values() if r is not None]
        rows = held
        if ask:
            rows += conn.execute(
                entries_sql.fill(where=where), (json.dumps(ask), *params)
            ).fetchall()
        best = _best_per_entry(rows, bm25)
        if len(best) >= state.need or len(scored) < pool:
            return best
        pool *= 8


class _Mapping:
    """Scored chunks mapped to the entries the filter keeps, remembered for one search: a
    widening pass of :func:`_top_body` scores the same best chunks again, and only the
    chunks and entries not seen yet are read (each pass read them all: ~1.75 passes a
    search at 100k)."""

    def __init__(self, state: SearchState) -> None:
        self.conn, self.where, self.params = state.conn, state.where, state.params
        self.held, self.gate = state.entry_map, state.gate
        self.entries_of: dict[int, list[int]] = {}  # chunk id -> its entries' ids
        self.rows: dict[int, Row | None] = {}  # entry id -> its row (None: filtered out)
        self.chunks: dict[int, list[tuple[float, int]]] = {}  # the last call's, per entry

    def __call__(self, bm25: dict[int, float]) -> dict[int, tuple[float, int]]:
        """Each entry's best score and chunk of ``bm25``, for the entries the filter
        keeps (:meth:`candidates` makes them candidates: only the last pass's are)."""
        new = [cid for cid in bm25 if cid not in self.entries_of]
        if new and self.held is not None:
            unknown = []  # chunks written since the map was read: asked of the table
            for cid in new:
                got = self.held.entries(cid)
                if got is None:
                    unknown.append(cid)
                else:
                    self.entries_of[cid] = list(got)
            new = unknown
        if new:
            for cid in new:
                self.entries_of[cid] = []
            for r in self.conn.execute(_BODY_ENTRIES, (json.dumps(new),)).fetchall():
                self.entries_of[int(r["cid"])].append(int(r["eid"]))
        best: dict[int, tuple[float, int]] = {}  # entry id -> (score, chunk id)
        chunks: dict[int, list[tuple[float, int]]] = {}  # entry id -> every scored chunk
        for cid, score in bm25.items():  # the scored order: a tie keeps the first chunk
            for eid in self.entries_of[cid]:
                chunks.setdefault(eid, []).append((score, cid))
                have = best.get(eid)
                if have is None or score > have[0]:
                    best[eid] = (score, cid)
        fresh = [e for e in best if e not in self.rows]
        if fresh and self.gate is not None:  # the held entries' rows from memory
            held, fresh = self.gate.rows(fresh)
            self.rows.update(held)
        if fresh:
            for e in fresh:
                self.rows[e] = None
            sql = _META_ENTRIES.fill(where=self.where)
            for r in self.conn.execute(sql, (json.dumps(fresh), *self.params)).fetchall():
                self.rows[int(r["eid"])] = r
        self.chunks = chunks
        return {eid: sc for eid, sc in best.items() if self.rows[eid] is not None}

    def candidates(self, kept: dict[int, tuple[float, int]]) -> dict[int, Candidate]:
        """The last call's entries as candidates, with their next best chunks
        (:attr:`Candidate.others`)."""
        out: dict[int, Candidate] = {}
        for eid, (score, cid) in kept.items():
            r = self.rows[eid]
            if r is not None:  # always: only the entries the filter kept are passed
                c = _candidate(r, score)
                c.chunk_id = cid
                c.others = _next_best(self.chunks[eid], cid)
                out[eid] = c
        return out


def _next_best(scored: list[tuple[float, int]], shown: int) -> tuple[int, ...]:
    """The chunk ids after ``shown`` a lookup's case check reads (best first)."""
    if len(scored) < 2:
        return ()
    top = sorted(scored, key=lambda s: (-s[0], s[1]))[:_EXACT_CHUNKS]
    return tuple(cid for _s, cid in top if cid != shown)[: _EXACT_CHUNKS - 1]


def _best_per_entry(rows: Iterable[Row], bm25: dict[int, float]) -> dict[int, Candidate]:
    """Each entry's best-scored row (a row is an entry's chunk, or the entry itself)."""
    best: dict[int, Candidate] = {}
    for r in rows:
        key = int(r["eid"]) if r["cid"] is None else int(r["cid"])
        score = bm25.get(key, 0.0)
        eid = int(r["eid"])
        have = best.get(eid)
        if have is None or score > have.score:
            best[eid] = _candidate(r, score)
    return best


def _top_body(
    state: SearchState,
    terms: list[str],
    span: narrow.Span | None = None,
    *,
    view: postings.View | None = None,
    stats: selective.SearchStats | None = None,
) -> dict[int, Candidate]:
    """The best chunks' entries, with BM25's work bounded by term selectivity
    (store/search/selective.py): only rows matching a rare term are scored, exactly; once no row
    matching only common terms can reach the top, that is the top; otherwise the next
    rarest term joins the rare ones (at worst every term: the plain OR query). With
    ``view`` the same plan and pools are taken from the in-memory index; ``stats``, the
    search's term counts (the SQL path); the state's ``entry_map``, the chunk -> entry map
    in memory; its ``gate``, the filter over the entries' columns in memory."""
    conn, need = state.conn, state.need
    # only the rows of the rare terms are read, so only they are scored (the common terms
    # looked up there); a widened plan scores the rows of its new rare terms
    widening: postings.Widening | None = None
    if view is not None:
        p = selective.plan_of(view.df(list(dict.fromkeys(terms))), view.totals())
        # FTS5 numbers a partition's phrases in the plan's order: so are the scores summed
        widening = view.widening([*p.scored, *p.rest])
    else:
        p = selective.plan(conn, "search_body", terms, stats)
    pool = max(_MIN_POOL, need * 4)
    # a narrow filter: only its rows are scored (store/search/narrow.py)
    top, bounds = (_BODY_TOP, ()) if span is None else (span.restrict(_BODY_TOP), span.params)
    mapped = _Mapping(state)
    while True:
        bm25: dict[int, float] = {}
        exhausted = True
        if widening is not None:
            for got in _resident_partitions(widening.upto(len(p.scored)), p, pool):
                exhausted = exhausted and len(got) < pool
                bm25.update(got)
        else:
            for match in _partitions(p):
                scored = _ranked(conn, top, (match, *bounds, pool), p, stats)
                exhausted = exhausted and len(scored) < pool
                bm25.update((int(r[0]), -float(r[1])) for r in scored)
        best = mapped(bm25)
        if len(best) < need and not exhausted:
            pool *= 8  # the filter keeps few of the best: reach deeper
            continue
        if not p.rest:
            return mapped.candidates(best)
        kept = sorted((score for score, _cid in best.values()), reverse=True)
        if len(kept) >= need and kept[need - 1] >= p.bound:
            return mapped.candidates(best)
        if len(kept) < need:
            p.widen_all()  # the filter keeps few rows of the rare terms: one pass over all
        else:
            p.widen()


def _ranked(
    conn: Conn,
    top: Sql,
    args: tuple[Any, ...],
    p: selective.Plan,
    stats: selective.SearchStats | None,
) -> list[Row]:
    """One ranking statement's rows; on PostgreSQL with the search's counts, the terms'
    weights are computed here from them (pgsql.RANKED_BODY) instead of read again by
    every ranking statement."""
    if stats is None or isinstance(conn, sqlite3.Connection) or len(args) != 2:
        return conn.execute(top, args).fetchall()
    rows = p.totals.rows

    def weight(term: str) -> float:
        df = p.df.get(term, 0)
        return selective.idf(max(rows, df), df)

    sql, params = pgsql.RANKED_BODY, pgsql.ranked_body_params(args[0], weight, args[1])
    return conn.execute(sql, params).fetchall()


def _partitions(p: selective.Plan) -> list[str]:
    """MATCH expressions covering every row that matches a rare term, disjointly, each
    holding every term once (so bm25() scores a row as the plain OR query would)."""
    rare = match_expression(p.scored)
    if not p.rest:
        return [rare]
    common = match_expression(p.rest)
    return [f"({rare}) AND ({common})", f"({rare}) NOT ({common})"]


def _resident_partitions(
    scored: postings.Scored, p: selective.Plan, pool: int
) -> list[list[tuple[int, float]]]:
    """:func:`_partitions`' rows from the in-memory scores (``scored`` holds the rows of
    the plan's rare terms, with the terms in the order scored + rest, one mask bit each)."""
    rare = (1 << len(p.scored)) - 1
    if not p.rest:
        return [scored.top(rare, pool)]
    common = ((1 << (len(p.scored) + len(p.rest))) - 1) & ~rare
    return [scored.top(rare, pool, also=common), scored.top(rare, pool, none_of=common)]


def _candidate(r: Row, score: float, *, direct: bool = True) -> Candidate:
    chunk = None if r["cid"] is None else int(r["cid"])
    return Candidate.of_entry(r, score, chunk_id=chunk, direct=direct)
