"""Running a search: any-term BM25 over analysed terms, then the neighbourhood, then hits.

The pipeline, one function per step (the seam for hybrid ranking is between 2 and 3: a
semantic retriever adds its own :class:`Candidate` list and a fusion merges the two):

1. :func:`offload.core.analysis.analyse_query` turns the text into index terms exactly as
   bodies were analysed; stopwords are dropped unless nothing else is left. A word the
   index does not know is expanded through the vocabulary (known words containing it, or a
   typo or two away), so partial identifiers and misspellings still match. A term that
   a large share of the searched entries hold (a speaker's name in a conversation's scope)
   is not searched for when the query has others (:mod:`offload.core.selectivity`).
2. :func:`lexical_candidates`: every chunk and every entry's metadata matching *any* term,
   ranked by BM25 over all matches (metadata columns weighted above bodies), filtered.
3. :func:`rank`: part of each strong hit's score flows to its neighbours (the entries just
   before and after it in the same scope and kind: memories arrive in sequence, and the turn
   that answers a question often sits next to the one that names it), a phrase boost for
   query words found side by side, then the caller's salience and recency x frequency of use.
4. :func:`hits`: rows, chunk text and snippets (the best-matching lines, numbered) for the
   page shown only.

User text never reaches FTS5 syntax unquoted: every term is a quoted string.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from offload.core import analysis
from offload.errors import StoreError
from offload.store import (
    context,
    entrykeys,
    entrymap,
    hybrid,
    index,
    narrow,
    neighbours,
    pgsql,
    postings,
    query,
    scope_terms,
    selective,
    semantic,
)
from offload.store.backend import Conn, Row
from offload.store.candidate import Candidate
from offload.store.models import Entry, Filters, Hit, access_score
from offload.store.shown import ShownChunks

if TYPE_CHECKING:
    from offload.store.backend import StoreHandle as Store

# Share of a hit's score each of its neighbours receives; a neighbour that matches nothing
# itself joins the candidates with it. One half: a turn is evidence on its own first,
# context second (checked on both halves of the dev data, docs/benchmarks.md "Search").
NEIGHBOUR_SHARE = 0.5
# How far a hit's score reaches (in entries of the same scope and kind), halving each step.
NEIGHBOUR_WINDOW = 2
# How many of the best direct hits pass score to their neighbours.
NEIGHBOUR_SOURCES = 100
# Weight of a query's adjacent word pairs found side by side in a hit (a phrase).
PHRASE_BOOST = 0.5
_PHRASE_CHECKED = 30
# A lookup's case check: how many of the best hits, and how many chunks of each entry
_EXACT_CHECKED = 30
_EXACT_CHUNKS = 4
_MIN_POOL = 200
_TYPO_CANDIDATES = 20_000
_EXPANSIONS = 24
_SNIPPET_LINES = 3

_BODY_TOP = (
    "SELECT rowid, bm25(search_body) AS s FROM search_body "
    "WHERE search_body MATCH ? ORDER BY s LIMIT ?"
)
_META_TOP = (
    "SELECT rowid, bm25(search_meta, {w}) AS s FROM search_meta "
    "WHERE search_meta MATCH ? ORDER BY s LIMIT ?"
).format(w=", ".join(str(w) for w in index.META_WEIGHTS))
_KEYS = (
    "e.id AS eid, e.scope AS scope, e.kind AS kind, e.salience AS salience, "
    "e.accessed AS accessed, e.access_count AS uses"
)
# The scored ids drive these joins (CROSS JOIN fixes SQLite's join order), and a chunk is
# mapped to its entry before the filter is applied to the entries by id: left free, the
# planner walked a scope's entries by index and probed every id for each of them, the
# scope's size times the ids' (a minute for a 12,500-entry scope of a 100k store).
# (store/chunkmap.py: a chunk's entries by integer keys; a lossy entry's kept original is
# indexed too, so a word only it holds finds the entry)
_BODY_ENTRIES = (
    "SELECT m.chunk_id AS cid, m.entry_id AS eid FROM json_each(?) j "
    "CROSS JOIN entry_chunks m WHERE m.chunk_id = j.value"
)
_META_ENTRIES = (
    f"SELECT NULL AS cid, {_KEYS} FROM json_each(?) j CROSS JOIN entries e "
    "WHERE e.id = j.value AND {where}"
)


def search_hits(
    store: Store, text: str, filters: Filters, *, limit: int, offset: int, width: int
) -> list[Hit]:
    """The ranked hits for ``text`` under ``filters`` (see the module docstring)."""
    limit = max(1, min(int(limit), 200))
    offset = max(0, int(offset))
    q = analysis.analyse_query(text)
    if q.empty:
        return []
    conn = store.conn
    now = store.clock()
    # the in-memory index, brought up to date (None: the SQL path, store/resident.py)
    view = None if store.resident is None else store.resident.view(conn)
    # and the chunk -> entry map (None: through entry_chunks, store/entrymap.py)
    entry_map = None if store.resident is None else store.resident.entry_map.current(conn)
    # PostgreSQL: the entries' filter and ranking columns (None: read by id, store/entrykeys.py)
    keys = None if store.resident is None else store.resident.entry_keys.current(conn)
    where, params = query.filter_sql(filters, now)
    # the index's statistics this search reads, each once (PostgreSQL: one statement)
    stats = selective.SearchStats(conn, view)
    match_terms = with_expansions(conn, q, stats)
    if view is not None and not all(map(postings.plain_term, match_terms)):
        view = None  # a term FTS5 reads otherwise than the index holds it: FTS5's way
    need = max(50, (limit + offset) * 3)
    try:
        # the embedding's matrix scan runs on another thread while the lexical side runs here
        probe = semantic.start(store, text, need)
        # a written form is searched only where it is rarer than its stem (selective.py)
        idle = selective.idle_forms(conn, "search_body", q.forms, stats) - set(q.sequence)
        match_terms = [t for t in match_terms if t not in idle]
        # a term most of the searched entries hold is not searched for (core.selectivity)
        # a narrow filter is searched inside its own rows (store/narrow.py)
        narrowed = narrow.plan(conn, filters, where, params)
        telling = scope_terms.selective_terms(
            conn, match_terms, where, params, narrowed, filters=filters, stats=stats
        )
        if narrowed is not None:  # from here on the filter is the entries read, by id
            where, params = narrowed.where
        # the filter as a test of the held columns: the same conditions as ``where``
        gate = (
            None
            if keys is None or narrowed is not None
            else entrykeys.Gate(keys, entrykeys.keeper(filters, now))
        )

        def lexical(terms: list[str]) -> list[Candidate]:
            return lexical_candidates(
                conn,
                terms,
                where,
                params,
                need,
                narrowed,
                view=view,
                stats=stats,
                entry_map=entry_map,
                gate=gate,
            )

        found = lexical(telling)
        if not found and len(telling) < len(match_terms):
            telling = match_terms
            found = lexical(telling)
        # the chunks read for the best candidates, kept for every later step
        shown = ShownChunks(store)
        ranked = rank(
            store, q, found, where, params, now, terms=telling, view=view, shown=shown, gate=gate
        )
        ranked = hybrid.fused_candidates(
            store, probe, ranked, where, params, need, keep=offset + limit
        )
    except sqlite3.OperationalError as exc:
        # every term is quoted, so this is not the user's syntax; report it plainly
        raise StoreError(f"search failed: {exc}") from exc
    return hits(store, ranked[offset : offset + limit], set(match_terms), width, shown)


# -- 1. query terms ----------------------------------------------------------------------


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def match_expression(terms: list[str]) -> str:
    """An FTS5 MATCH for any of ``terms`` (each quoted: user text is never syntax)."""
    return " OR ".join(_quote(t) for t in dict.fromkeys(terms))


def with_expansions(
    conn: Conn, q: analysis.QueryTerms, stats: selective.SearchStats | None = None
) -> list[str]:
    """The query's terms plus, for each word piece the index does not know, the known
    vocabulary words that contain it or are a typo or two away from it (their terms).

    Whether the index knows a piece's forms, and the row counts of the query's own terms
    and written forms that the search reads next, are asked in one go (``stats``)."""
    stats = stats or selective.SearchStats(conn)
    out = dict.fromkeys(q.any_of)
    pieces: dict[str, set[str]] = {}
    for word in q.words:
        for piece in analysis.pieces(word):
            if len(piece) >= 3:
                pieces.setdefault(piece, {piece, *analysis.word_terms(piece)})
    asked = [t for forms in pieces.values() for t in sorted(forms)]
    stats.prefetch([*q.any_of, *(t for pair in q.forms for t in pair), *asked])
    known = stats.known(asked)
    unknown = [piece for piece, forms in pieces.items() if not forms & known]
    for found in _expand(conn, unknown):
        out.setdefault(found, None)  # the whole word: an identifier's whole term
        for t in analysis.word_terms(found):
            out.setdefault(t, None)
    return list(out)


def _expand(conn: Conn, words: list[str]) -> list[str]:
    """Known words that contain a query word, or are a typo or two away from one.

    Scans the vocabulary in SQL (C speed); only the few length- and edge-compatible
    candidates reach the edit-distance check in Python.
    """
    found: dict[str, None] = {}
    for t in words:
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


# -- 2. lexical candidates -----------------------------------------------------------------


def lexical_candidates(
    conn: Conn,
    terms: list[str],
    where: str,
    params: list[Any],
    need: int,
    narrowed: narrow.Narrow | None = None,
    *,
    view: postings.View | None = None,
    stats: selective.SearchStats | None = None,
    entry_map: entrymap.EntryMap | None = None,
    gate: entrykeys.Gate | None = None,
) -> list[Candidate]:
    """Entries matching any of ``terms`` under the filter, best BM25 first.

    Score = the best chunk's BM25 + the metadata row's weighted BM25 (both flipped to
    higher-is-better). BM25 is computed by FTS5 over every match; the top of that ranking
    is then mapped to entries and filtered, reaching deeper only when the filter keeps too
    few of them; with ``narrowed`` (store/narrow.py) only the filter's rows are scored.
    With ``view`` (store/resident.py) the body's rows are scored in memory, to the same
    scores and the same pools (a narrowed search still asks FTS5); on PostgreSQL that is
    FTS5's BM25 there too. With ``entry_map`` the scored chunks' entries are looked up in
    memory (store/entrymap.py); with ``gate`` (PostgreSQL, store/entrykeys.py) the filter
    and the entries' columns too.
    """
    match = match_expression(terms)
    chunks = None if narrowed is None else narrowed.chunks
    meta_rows = None if narrowed is None else narrowed.meta
    if chunks is None and view is not None and len(terms) <= postings.MAX_TERMS:
        body = _top_body(
            conn, terms, where, params, need, view=view, entry_map=entry_map, gate=gate
        )
        if not isinstance(conn, sqlite3.Connection):
            # PostgreSQL ranks metadata by ts_rank: a body term is brought to its scale (the
            # most it adds, idf * (k1 + 1), becomes ts_rank's most, 0.1 * idf)
            for c in body.values():
                c.score *= pgsql.BODY_TERM_WEIGHT / (selective.K1 + 1.0)
    else:
        body = _top_body(
            conn, terms, where, params, need, chunks, stats=stats, entry_map=entry_map, gate=gate
        )
    held = None if stats is None else stats.meta_held(terms)
    meta: dict[int, Candidate] = {}
    if held is None or held:  # no metadata row holds a term: nothing to rank there
        meta = _top_entries(
            conn, _META_TOP, _META_ENTRIES, match, where, params, need, meta_rows, gate
        )
    out: dict[int, Candidate] = dict(body)
    for eid, c in meta.items():
        have = out.get(eid)
        if have is None:
            out[eid] = c
        else:
            have.score += c.score
    return sorted(out.values(), key=lambda c: (-c.score, -c.entry_id))


def _top_entries(
    conn: Conn,
    top_sql: str,
    entries_sql: str,
    match: str,
    where: str,
    params: list[Any],
    need: int,
    span: narrow.Span | None = None,
    gate: entrykeys.Gate | None = None,
) -> dict[int, Candidate]:
    pool = max(_MIN_POOL, need * 4)
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
                entries_sql.format(where=where), (json.dumps(ask), *params)
            ).fetchall()
        best = _best_per_entry(rows, bm25)
        if len(best) >= need or len(scored) < pool:
            return best
        pool *= 8


class _Mapping:
    """Scored chunks mapped to the entries the filter keeps, remembered for one search: a
    widening pass of :func:`_top_body` scores the same best chunks again, and only the
    chunks and entries not seen yet are read (each pass read them all: ~1.75 passes a
    search at 100k)."""

    def __init__(
        self,
        conn: Conn,
        where: str,
        params: list[Any],
        held: entrymap.EntryMap | None = None,
        gate: entrykeys.Gate | None = None,
    ) -> None:
        self.conn, self.where, self.params, self.held = conn, where, params, held
        self.gate = gate
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
            sql = _META_ENTRIES.format(where=self.where)
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
    conn: Conn,
    terms: list[str],
    where: str,
    params: list[Any],
    need: int,
    span: narrow.Span | None = None,
    *,
    view: postings.View | None = None,
    stats: selective.SearchStats | None = None,
    entry_map: entrymap.EntryMap | None = None,
    gate: entrykeys.Gate | None = None,
) -> dict[int, Candidate]:
    """The best chunks' entries, with BM25's work bounded by term selectivity
    (store/selective.py): only rows matching a rare term are scored, exactly; once no row
    matching only common terms can reach the top, that is the top; otherwise the next
    rarest term joins the rare ones (at worst every term: the plain OR query). With
    ``view`` the same plan and pools are taken from the in-memory index; ``stats``, the
    search's term counts (the SQL path); ``entry_map``, the chunk -> entry map in memory;
    ``gate``, the filter over the entries' columns in memory (PostgreSQL)."""
    # only the rows of the rare terms are read, so only they are scored (the common terms
    # looked up there); a widened plan scores the rows of its new rare terms
    scored_by: dict[int, postings.Scored] = {}
    order: list[str] = []
    if view is not None:
        p = selective.plan_of(view.df(list(dict.fromkeys(terms))), view.totals())
        # FTS5 numbers a partition's phrases in the plan's order: so are the scores summed
        order = [*p.scored, *p.rest]
    else:
        p = selective.plan(conn, "search_body", terms, stats)
    pool = max(_MIN_POOL, need * 4)
    # a narrow filter: only its rows are scored (store/narrow.py)
    top, bounds = (_BODY_TOP, ()) if span is None else (span.restrict(_BODY_TOP), span.params)
    mapped = _Mapping(conn, where, params, entry_map, gate)
    while True:
        bm25: dict[int, float] = {}
        exhausted = True
        if view is not None:
            rare = len(p.scored)
            if rare not in scored_by:
                scored_by[rare] = view.score(order, rare)
            for got in _resident_partitions(scored_by[rare], p, pool):
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
    top: str,
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


# -- 3. final ranking -----------------------------------------------------------------------


def rank(
    store: Store,
    q: analysis.QueryTerms,
    found: list[Candidate],
    where: str,
    params: list[Any],
    now: float,
    *,
    terms: Sequence[str] = (),
    view: postings.View | None = None,
    shown: ShownChunks | None = None,
    gate: entrykeys.Gate | None = None,
) -> list[Candidate]:
    """The final order: neighbourhood, phrase boost, then salience and use (``shown``:
    the search's chunk reads, kept for its hits; ``gate``: the filter and the entries'
    columns in memory, PostgreSQL).

    With the searched ``terms`` the best hits are scored with their neighbourhood as one
    document (:mod:`offload.store.context`); without them, or on PostgreSQL (whose rank
    is not FTS5's BM25), each passes a share of its score on (:func:`offload.store.neighbours.with_neighbours`).
    Entries that only a neighbour brought in are kept where they outrank a direct match;
    after the last direct match the list ends."""
    if terms and isinstance(store.conn, sqlite3.Connection):
        ranked = context.with_context(
            store,
            terms,
            found,
            where,
            params,
            share=NEIGHBOUR_SHARE,
            window=NEIGHBOUR_WINDOW,
            sources=NEIGHBOUR_SOURCES,
            view=view,
        )
    else:
        ranked = neighbours.with_neighbours(
            store.conn,
            found,
            where,
            params,
            share=NEIGHBOUR_SHARE,
            window=NEIGHBOUR_WINDOW,
            sources=NEIGHBOUR_SOURCES,
            gate=gate,
        )
    shown = shown or ShownChunks(store)
    ranked = _phrase_boost(q, ranked, shown)
    for c in ranked:
        c.score = _use_score(c, now)
    scored = ranked
    # equal scores: a direct match first, then the newer entry
    # (stable sorts from the last key to the first: the order of one sort by
    # (-score, not direct, -entry_id), without a key tuple per candidate)
    out = sorted(scored, key=attrgetter("entry_id"), reverse=True)
    out.sort(key=attrgetter("direct"), reverse=True)
    out.sort(key=attrgetter("score"), reverse=True)
    # a neighbour may displace a weaker match, never extend the list past the matches
    last = max((i for i, c in enumerate(out) if c.direct), default=-1)
    return _as_written_first(q, out[: last + 1], shown)


def _phrase_boost(
    q: analysis.QueryTerms, ranked: list[Candidate], shown: ShownChunks
) -> list[Candidate]:
    """Raise hits where the query's adjacent words stand side by side (checked on the
    best few: positions are not kept in the index, so this reads their text)."""
    pairs = analysis.bigrams(q.sequence)
    if not pairs:
        return ranked
    checked = ranked[:_PHRASE_CHECKED]
    shown.read((c.entry_id, c.chunk_id) for c in checked)
    for c in checked:
        text = shown.text(c.entry_id, c.chunk_id) or ""
        found = pairs & analysis.bigrams(analysis.content_terms(text)) if text else set()
        c.score *= 1.0 + PHRASE_BOOST * len(found) / len(pairs)
    return ranked


def _as_written_first(
    q: analysis.QueryTerms, ranked: list[Candidate], shown: ShownChunks
) -> list[Candidate]:
    """A lookup's best few, reordered: a hit holding a query word only in another case
    (``Checking`` nine times, for ``checking``) moves below the hits holding more of the
    query's words exactly as written, the index being case-folded; every other pair keeps
    its order. Each hit shows, of its entry's best few matching chunks, the first holding
    the most of them as written. The window's scores are dealt out again in the new
    order, so what follows (fusion, paging) sees a descending list."""
    written = [w for w in q.words if w.lower() != w.upper() and len(w) <= analysis.MAX_TERM_CHARS]
    if not q.lookup or not written:
        return ranked
    window = ranked[:_EXACT_CHECKED]
    # every chunk compared below, read at once
    shown.read(
        (c.entry_id, cid)
        for c in window
        if c.chunk_id is not None
        for cid in (c.chunk_id, *c.others)
    )
    exact: dict[int, int] = {}
    other_case: set[int] = set()
    for c in window:
        if c.chunk_id is None:
            continue  # a neighbour or a semantic hit: no matching text to compare
        best, picked = -1, ""
        for cid in (c.chunk_id, *c.others):
            text = shown.text(c.entry_id, cid) or ""
            n = _written_count(text, written)
            if n > best:
                best, picked, c.chunk_id = n, text, cid
        exact[c.entry_id] = best
        folded = picked.casefold()
        if any(
            _written_count(folded, [w.casefold()]) and not _written_count(picked, [w])
            for w in written
        ):
            other_case.add(c.entry_id)
    out = list(window)
    for c in [c for c in window if c.entry_id in other_case]:
        i = out.index(c)
        above = [
            j for j in range(i + 1, len(out)) if exact.get(out[j].entry_id, 0) > exact[c.entry_id]
        ]
        if above:
            out.insert(above[-1], out.pop(i))  # just below the last hit holding more
    if out == window:
        return ranked
    for c, score in zip(out, [c.score for c in window], strict=True):
        c.score = score
    return out + ranked[_EXACT_CHECKED:]


def _written_count(text: str, written: list[str]) -> int:
    """How many of ``written`` occur in ``text`` exactly, each not within a longer word."""
    n = 0
    for w in written:
        at = text.find(w)
        while at >= 0:
            end = at + len(w)
            if (at == 0 or not text[at - 1].isalnum()) and (
                end == len(text) or not text[end].isalnum()
            ):
                n += 1
                break
            at = text.find(w, at + 1)
    return n


def _use_score(c: Candidate, now: float) -> float:
    # a tiny floor: with no BM25 signal at all, salience still decides
    relevance = max(0.0, c.score) + 1e-6
    # never used: access_score is 0.0 exactly (log1p(0) = 0); most candidates, skipped
    use = access_score(c.accessed, c.uses, now) if c.uses else 0.0
    return relevance * (1.0 + 0.5 * c.salience + 0.25 * use)


# -- 4. hits ------------------------------------------------------------------------------


def hits(
    store: Store,
    page: list[Candidate],
    terms: set[str],
    width: int,
    shown: ShownChunks | None = None,
) -> list[Hit]:
    """Rows, text and snippets for the candidates shown (only these are decompressed;
    ``shown``: the chunks the search read already)."""
    if not page:
        return []
    conn = store.conn
    rows = {
        int(r["id"]): r
        for r in conn.execute(
            "SELECT e.*, b.size AS size, b.lines AS lines FROM entries e "
            "JOIN blocks b ON b.hash = e.block_hash WHERE e.id IN (SELECT value FROM json_each(?))",
            (json.dumps([c.entry_id for c in page]),),
        )
    }
    shown = shown or ShownChunks(store)
    with_text = [c for c in page if c.chunk_id is not None or c.direct is False]
    shown.read((c.entry_id, c.chunk_id) for c in with_text)
    out = []
    for c in page:
        r = rows.get(c.entry_id)
        if r is None:
            continue  # forgotten since the ranking
        entry = Entry.from_row(r)
        has_text = c.chunk_id is not None or c.direct is False
        chunk = shown.row(c.entry_id, c.chunk_id) if has_text else None
        text = shown.text(c.entry_id, c.chunk_id) if chunk is not None else None
        if chunk is None or text is None:
            about = " · ".join(x for x in (entry.topic, entry.summary) if x)
            out.append(Hit(entry, None, 1, entry.lines, 1, c.score, about[:width], ""))
            continue
        best = best_lines(text, terms, int(chunk["start_line"]), width)
        line, snip = best[0]
        out.append(
            Hit(
                entry,
                int(chunk["id"]),
                int(chunk["start_line"]),
                int(chunk["end_line"]),
                line,
                c.score,
                snip,
                text,
                tuple(sorted(best)),
                in_original=chunk["block"] != entry.block_hash,
            )
        )
    return out


def best_lines(
    text: str, terms: set[str], first_line: int, width: int, most: int = _SNIPPET_LINES
) -> list[tuple[int, str]]:
    """Up to ``most`` (line number, excerpt) pairs of the lines holding the most distinct
    query terms, best first; the first line when none holds any. A line holding fewer than
    half the best line's terms is left out (it would be noise beside it)."""
    lines = text.splitlines() or [""]
    scored: list[tuple[int, int, int]] = []  # (-terms matched, index, match offset)
    for i, line in enumerate(lines):
        spans = analysis.matching_spans(line, terms)
        if spans:
            matched = len({t for _s, _e, ts in spans for t in ts})
            scored.append((-matched, i, spans[0][0]))
    if not scored:
        return [(first_line, _excerpt(lines[0], 0, width))]
    scored.sort()
    top = -scored[0][0]
    kept = [s for s in scored[:most] if -2 * s[0] >= top]
    return [(first_line + i, _excerpt(lines[i], pos, width)) for _n, i, pos in kept]


def _excerpt(line: str, pos: int, width: int) -> str:
    if len(line) > width:
        start = max(0, pos - width // 3)
        line = ("…" if start else "") + line[start : start + width] + "…"
    return line.strip()
