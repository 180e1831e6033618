"""Running a search: any-term BM25 over analysed terms, then the neighbourhood, then hits.

The pipeline, one function per step (the seam for hybrid ranking is between 2 and 3: a
semantic retriever adds its own :class:`Candidate` list and a fusion merges the two):

1. :func:`offload.core.text.analysis.analyse_query` turns the text into index terms exactly as
   bodies were analysed; stopwords are dropped unless nothing else is left. A word the
   index does not know is expanded through the vocabulary (known words containing it, or a
   typo or two away), so partial identifiers and misspellings still match. A term that
   a large share of the searched entries hold (a speaker's name in a conversation's scope)
   is not searched for when the query has others (:mod:`offload.core.selectivity`).
2. :func:`offload.store.search.lexical.lexical_candidates` (store/search/lexical.py): every chunk and
   every entry's metadata matching *any* term, ranked by BM25 over all matches (metadata
   columns weighted above bodies), filtered.
3. :func:`offload.store.search.ranking.rank` (store/search/ranking.py): part of each strong hit's score
   flows to its neighbours (the entries just before and after it in the same scope and
   kind: memories arrive in sequence, and the turn that answers a question often sits next
   to the one that names it), a phrase boost for query words found side by side, then the
   caller's salience and recency x frequency of use, then the time preference: the dates
   the query names (:func:`named_times`) and whether it asks when.
   After the fusion with the embedding's nearest entries (store/search/hybrid.py), on
   either backend, each of the best hits is raised by how well the stretch it was told in (the
   entries of its scope and kind at its event time) holds the query's words
   (:func:`offload.store.search.neighbours.with_stretches`).
4. :func:`offload.store.search.page.hits` (store/search/page.py): rows, chunk text and snippets (the
   best-matching lines, numbered) for the page shown only.

Steps 2 and 3 read one :class:`~offload.store.search.state.SearchState` (the filter, the
time, the statistics, the in-memory copies, the page's needs), built once here;
:func:`~offload.store.search.state.scoring_path` is the one choice of which code scores
the hits. :func:`hit_page` with ``explain`` runs the same search with a trace and says,
for each hit, what each step added (store/search/explain.py).

User text never reaches FTS5 syntax unquoted: every term is a quoted string.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from offload.core.text import analysis, timeexpr
from offload.errors import StoreError
from offload.store.backend import Conn, Sql
from offload.store.models import Filters, Hit
from offload.store.search import (
    hybrid,
    lexical,
    narrow,
    neighbours,
    page,
    query,
    ranking,
    scope_terms,
    selective,
    semantic,
)
from offload.store.search.explain import Explanation, explanations
from offload.store.search.memory import entrykeys, entrymap, postings
from offload.store.search.shown import ShownChunks
from offload.store.search.state import SearchState, Trace

if TYPE_CHECKING:
    from offload.store.handle import StoreHandle as Store

_TYPO_CANDIDATES = 20_000
_EXPANSIONS = 24
# how many events named by words (``before the trip``) a query's dates are counted from
_ANCHORS = 2
# the newest time an entry the filter keeps tells of (relative dates count from it)
_NEWEST_TIME = Sql("SELECT max(coalesce(e.event_time, e.created)) FROM entries e WHERE {where}")


@dataclass(frozen=True, slots=True)
class PageAsked:
    """Which page of the ranking a search shows: ``limit`` hits after ``offset``, each
    snippet at most ``width`` characters; ``as_of``: the time a query's relative dates
    (``yesterday``, ``last May``) count from (None: the newest event time searched)."""

    limit: int
    offset: int
    width: int
    as_of: float | None = None

    def bounded(self) -> PageAsked:
        """The page within the store's bounds (1 to 200 hits, no negative offset)."""
        return PageAsked(
            max(1, min(int(self.limit), 200)), max(0, int(self.offset)), self.width, self.as_of
        )


@dataclass(frozen=True, slots=True)
class Ranking:
    """One search's page: its ``hits``, the ``terms`` searched, how many hits the whole
    ranking holds (``total``: those before the page, on it and after it) and whether that
    is every hit the query has (``every``; False: the search read only as far as the page
    asked for needed, so there are at least ``total``)."""

    hits: list[Hit]
    terms: list[str]
    total: int
    every: bool


@dataclass(frozen=True, slots=True)
class HitPage:
    """A page of hits (``offset`` of them before it) and how many the search holds:
    ``total``, every hit when ``every``, else at least that many; ``why``: each hit's
    explanation, when one was asked for (else empty)."""

    hits: list[Hit]
    offset: int
    total: int
    every: bool
    why: list[Explanation]

    @property
    def after(self) -> int:
        """How many hits the ranking holds after this page (at least, unless ``every``)."""
        return max(0, self.total - self.offset - len(self.hits))


def search_hits(store: Store, text: str, filters: Filters, page_asked: PageAsked) -> list[Hit]:
    """The ranked hits for ``text`` under ``filters`` (see the module docstring)."""
    return search(store, text, filters, page_asked).hits


def hit_page(
    store: Store, text: str, filters: Filters, page_asked: PageAsked, *, explain: bool = False
) -> HitPage:
    """:func:`search_hits` with how many hits the search holds, and with ``explain`` why
    each ranks where it does (``why``, one explanation a hit)."""
    trace = Trace() if explain else None
    found = search(store, text, filters, page_asked, trace)
    offset = page_asked.bounded().offset
    why: list[Explanation] = []
    if trace is not None:
        ranks = range(offset + 1, offset + 1 + len(found.hits))
        why = explanations(trace, found.hits, ranks, found.terms)
    return HitPage(found.hits, offset, found.total, found.every, why)


def search(
    store: Store, text: str, filters: Filters, page_asked: PageAsked, trace: Trace | None = None
) -> Ranking:
    """The ranked hits for ``text`` under ``filters`` on the page asked, the terms
    searched and how many hits the ranking holds; with ``trace``, each step's scores
    recorded there."""
    shows = page_asked.bounded()
    q = analysis.analyse_query(text)
    if q.empty:
        return Ranking([], [], 0, True)
    conn = store.conn
    now = store.clock()
    where, params = query.filter_sql(filters, now)
    # before this search's own steps: an event named by words is searched for first
    times = named_times(store, text, TimeAsked(filters, where, params, shows.as_of))
    view, entry_map, keys = _in_memory(store)
    # the index's statistics this search reads, each once (PostgreSQL: one statement)
    stats = selective.SearchStats(conn, view)
    match_terms = with_expansions(conn, q, stats)
    if view is not None and not all(map(postings.plain_term, match_terms)):
        view = None  # a term FTS5 reads otherwise than the index holds it: FTS5's way
    need = max(50, (shows.limit + shows.offset) * 3)
    keep = shows.offset + shows.limit
    try:
        # the embedding's matrix scan runs on another thread while the lexical side runs
        # here; none for a lookup whose words' rows all fit on the page (semantic.py)
        decided = semantic.answered_by_words(conn, q.lookup, match_terms, stats, keep)
        probe = None if decided else semantic.start(store, text, need)
        # a written form is searched only where it is rarer than its stem (selective.py)
        idle = selective.idle_forms(conn, "search_body", q.forms, stats) - set(q.sequence)
        match_terms = [t for t in match_terms if t not in idle]
        # a term most of the searched entries hold is not searched for (core.selectivity)
        # a narrow filter is searched inside its own rows (store/search/narrow.py)
        narrowed = narrow.plan(conn, filters, where, params)
        telling = scope_terms.selective_terms(
            conn, match_terms, where, params, narrowed, filters=filters, stats=stats
        )
        if narrowed is not None:  # from here on the filter is the entries read, by id
            where, params = narrowed.where
        state = SearchState(
            conn,
            where,
            params,
            now,
            need,
            # the fused order is read deep enough for the stretches' second look
            keep=max(keep, neighbours.STRETCH_SOURCES),
            narrowed=narrowed,
            view=view,
            stats=stats,
            entry_map=entry_map,
            # the filter as a test of the held columns: the same conditions as ``where``
            # (a narrowed ``where`` is the ids that filter kept at this search's start)
            gate=None if keys is None else entrykeys.Gate(keys, entrykeys.keeper(filters, now)),
            trace=trace,
            times=times,
            asks_time=timeexpr.asks_time(text),
        )
        found = lexical.lexical_candidates(state, telling)
        if not found and len(telling) < len(match_terms):
            telling = match_terms
            found = lexical.lexical_candidates(state, telling)
        # the chunks read for the best candidates, kept for every later step
        shown = ShownChunks(store)
        ranked = ranking.rank(store, q, found, state, terms=telling, shown=shown)
        fused = hybrid.fused_candidates(store, probe, ranked, state, lookup=q.lookup)
        if telling:
            # the best hits raised by how well the stretch each was told in holds the words
            fused = neighbours.stretched(store, telling, fused, state)
    except sqlite3.OperationalError as exc:
        # every term is quoted, so this is not the user's syntax; report it plainly
        raise StoreError(f"search failed: {exc}") from exc
    on_page = fused.ranked[shows.offset : shows.offset + shows.limit]
    hits = page.hits(store, on_page, set(match_terms), shows.width, shown)
    # fewer words' candidates than asked for: every entry the words match was read
    every = fused.every and len(found) < need
    return Ranking(hits, telling, fused.total, every)


@dataclass(frozen=True, slots=True)
class TimeAsked:
    """What a query's dates are resolved against: the search's filter (as ``where`` on
    ``entries e`` and its parameters, and as :class:`Filters` for a search of an event's
    words) and the reference time it was given (None: the newest event time searched)."""

    filters: Filters
    where: str
    params: list[Any]
    as_of: float | None


def named_times(store: Store, text: str, asked: TimeAsked) -> tuple[timeexpr.Span, ...]:
    """The stretches of time ``text`` names; a relative phrase counts from ``as_of``, or
    from the newest event time (or, without one, the time stored) among the entries
    searched: a conversation's "yesterday" is the day before its last message. An amount
    of time before or after an event named by words (``two weeks before the trip``)
    counts from the time of the best hit for those words."""
    found = timeexpr.phrases(text)
    events = timeexpr.anchored(text)[:_ANCHORS]
    if not found and not events:
        return ()
    now = asked.as_of
    if now is None and any(p.relative for p in found):
        row = store.conn.execute(
            _NEWEST_TIME.fill(where=asked.where),
            asked.params,
        ).fetchone()
        now = None if row is None or row[0] is None else float(row[0])
    out = [p.span(now or 0.0) for p in found if now is not None or not p.relative]
    for event in events:
        # the event's words are shorter than the text: a nested search ends
        hits = search(store, event.words, asked.filters, PageAsked(1, 0, 40, asked.as_of)).hits
        if hits:
            out.append(event.span(hits[0].entry.when))
    return tuple(out)


def _in_memory(
    store: Store,
) -> tuple[postings.View | None, entrymap.EntryMap | None, entrykeys.EntryKeys | None]:
    """The in-memory copies, brought up to date, a search reads (all None without them,
    or each None while it is not ready: the SQL way for that part)."""
    resident = store.resident
    if resident is None:
        return None, None, None
    conn = store.conn
    resident.read_ahead(conn)  # PostgreSQL: the three refreshes' reads in one trip
    # the index (store/search/memory/resident.py), the chunk -> entry map (entrymap.py),
    # the entries' filter and ranking columns (entrykeys.py)
    return resident.view(conn), resident.entry_map.current(conn), resident.entry_keys.current(conn)


# -- 1. query terms ----------------------------------------------------------------------


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
            Sql(
                "SELECT term FROM terms WHERE instr(term, ?) > 0 AND term != ? "
                "ORDER BY length(term), term LIMIT ?",
                (
                    "SELECT term FROM terms WHERE strpos(term, %s) > 0 AND term != %s ORDER BY "
                    "length(term), term LIMIT %s"
                ),
            ),
            (t, t, _EXPANSIONS),
        ).fetchall()
        for (v,) in rows:
            found.setdefault(v, None)
        budget = query.typo_budget(t)
        if not budget:
            continue
        # a typo rarely hits both ends of a word: compare terms sharing one of them
        rows = conn.execute(
            Sql(
                "SELECT term FROM terms WHERE length(term) BETWEEN ? AND ? "
                "AND (substr(term, 1, 2) = ? OR substr(term, -2) = ?) LIMIT ?",
                (
                    "SELECT term FROM terms WHERE length(term) BETWEEN %s AND %s AND "
                    "(substr(term, 1, 2) = %s OR right(term, 2) = %s) LIMIT %s"
                ),
            ),
            (len(t) - budget, len(t) + budget, t[:2], t[-2:], _TYPO_CANDIDATES),
        ).fetchall()
        near = sorted(
            (d, v) for (v,) in rows if v != t and (d := query.edit_distance(t, v, budget)) <= budget
        )
        for _d, v in near[:_EXPANSIONS]:
            found.setdefault(v, None)
    return list(found)
