"""Step 3 of a search: the final order of the lexical candidates.

Part of each strong hit's score flows to its neighbours (the entries just before and
after it in the same scope and kind: memories arrive in sequence, and the turn that
answers a question often sits next to the one that names it), a phrase boost for query
words found side by side, then the caller's salience and recency x frequency of use, and
a time preference when the query names a date or asks when; a lookup's best few are reordered by the
query's words as written.

The time preference is soft: each candidate's score is multiplied by
``1 + TIME_WEIGHT * closeness``, closeness 1 for an entry whose event time (else the time
it was stored) lies in a stretch the query names, decaying exponentially with its distance
in days outside it. Text tells of what happened before it more often than of what will, so
an entry told after the stretch decays over a week or the stretch's length (whichever is
longer), one told before it over half that. Entries all equally near keep their order.
A question asking when (``When did...``, ``what year``, ``how long``) multiplies the
factor of each of its best few hits whose text says when or how long by
``1 + ASKED_TIME_BOOST``: the turn that answers it names the time (``yesterday``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING

from offload.core.text import analysis, timeexpr
from offload.store.backend import Sql
from offload.store.models import access_score
from offload.store.search import context, neighbours
from offload.store.search.shown import ShownChunks
from offload.store.search.state import CONTEXT, Candidate, SearchState, scoring_path

if TYPE_CHECKING:
    from offload.store.handle import StoreHandle as Store

# Share of a hit's score each of its neighbours receives; a neighbour that matches nothing
# itself joins the candidates with it. One half: a turn is evidence on its own first,
# context second (checked on both halves of the dev data, docs/benchmarks/search.md "Search").
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
# The most a date the query names multiplies an entry's score by (1 + this), for an entry
# whose event time lies in it: as strong as every query word found side by side twice
TIME_WEIGHT = 1.0
# A question asking when: the factor (1 + this) of a hit whose text says when or how long,
# as strong as the phrase boost's most
ASKED_TIME_BOOST = 0.5
# How many of the best candidates the time preference reads the event times of
_TIME_CHECKED = 2000
_EVENT_TIMES = Sql(
    "SELECT e.id AS eid, coalesce(e.event_time, e.created) AS t FROM json_each(?) j "
    "CROSS JOIN entries e WHERE e.id = j.value",
    "SELECT e.id AS eid, coalesce(e.event_time, e.created) AS t FROM offload_ids(%s) j "
    "CROSS JOIN entries e WHERE e.id = j.value",
)


def rank(
    store: Store,
    q: analysis.QueryTerms,
    found: list[Candidate],
    state: SearchState,
    *,
    terms: Sequence[str] = (),
    shown: ShownChunks | None = None,
) -> list[Candidate]:
    """The final order: neighbourhood, phrase boost, then salience and use (``shown``:
    the search's chunk reads, kept for its hits; ``state``: the search's filter, time and
    in-memory copies).

    With the searched ``terms`` on SQLite the best hits are scored with their
    neighbourhood as one document (:mod:`offload.store.search.context`); without them, or
    on PostgreSQL (whose rank is not FTS5's BM25), each passes a share of its score on
    (:func:`offload.store.search.neighbours.with_neighbours`): the choice is
    :func:`~offload.store.search.state.scoring_path`'s. Entries that only a neighbour
    brought in are kept where they outrank a direct match; after the last direct match
    the list ends."""
    if scoring_path(state, tuple(terms)).neighbourhood == CONTEXT:
        ranked = context.with_context(
            store,
            terms,
            found,
            state,
            share=NEIGHBOUR_SHARE,
            window=NEIGHBOUR_WINDOW,
            sources=NEIGHBOUR_SOURCES,
        )
    else:
        ranked = neighbours.with_neighbours(
            found,
            state,
            share=NEIGHBOUR_SHARE,
            window=NEIGHBOUR_WINDOW,
            sources=NEIGHBOUR_SOURCES,
        )
    trace = state.trace
    if trace is not None:
        trace.neighbourhood = trace.scores(ranked)
    shown = shown or ShownChunks(store)
    ranked = _phrase_boost(q, ranked, shown)
    if trace is not None:
        trace.phrase = trace.scores(ranked)
    for c in ranked:
        c.score = _use_score(c, state.now)
    if trace is not None:
        trace.use = trace.scores(ranked)
    if state.times or state.asks_time:
        factors = time_factors(state, ranked) if state.times else {}
        if state.asks_time:
            _says_when(ranked, shown, factors)
        for c in ranked:
            c.score *= factors.get(c.entry_id, 1.0)
        if trace is not None:
            trace.time = factors
    scored = ranked
    # equal scores: a direct match first, then the newer entry
    # (stable sorts from the last key to the first: the order of one sort by
    # (-score, not direct, -entry_id), without a key tuple per candidate)
    out = sorted(scored, key=attrgetter("entry_id"), reverse=True)
    out.sort(key=attrgetter("direct"), reverse=True)
    out.sort(key=attrgetter("score"), reverse=True)
    # a neighbour may displace a weaker match, never extend the list past the matches
    last = max((i for i, c in enumerate(out) if c.direct), default=-1)
    out = _as_written_first(q, out[: last + 1], shown)
    if trace is not None:
        trace.ranked = trace.scores(out)
    return out


def time_factors(state: SearchState, ranked: Sequence[Candidate]) -> dict[int, float]:
    """Each of the best candidates' time factor (see the module docstring): how near its
    event time lies to the stretches of time the query names."""
    best = sorted(ranked, key=attrgetter("score"), reverse=True)[:_TIME_CHECKED]
    if not best:
        return {}
    rows = state.conn.execute(_EVENT_TIMES, (json.dumps([c.entry_id for c in best]),)).fetchall()
    return {int(r["eid"]): 1.0 + TIME_WEIGHT * closeness(state.times, float(r["t"])) for r in rows}


def _says_when(ranked: Sequence[Candidate], shown: ShownChunks, factors: dict[int, float]) -> None:
    """A question asking when: of its best few hits, those whose text says when or how
    long (core/text/timeexpr.py's grammar) have their time factor raised by ``ASKED_TIME_BOOST``."""
    checked = sorted(ranked, key=attrgetter("score"), reverse=True)[:_PHRASE_CHECKED]
    shown.read((c.entry_id, c.chunk_id) for c in checked)
    for c in checked:
        text = shown.text(c.entry_id, c.chunk_id) or ""
        if text and timeexpr.mentions_time(text):
            factors[c.entry_id] = factors.get(c.entry_id, 1.0) * (1.0 + ASKED_TIME_BOOST)


def closeness(spans: Sequence[timeexpr.Span], t: float) -> float:
    """How near ``t`` lies to the nearest of ``spans``: 1 inside one, decaying with the
    days outside it (faster before it than after it)."""
    best = 0.0
    for span in spans:
        width = (span.end - span.start) / timeexpr.DAY
        reach = max(1.0, width) / 2.0 if t < span.start else max(7.0, width)
        best = max(best, math.exp(-span.distance_days(t) / reach))
    return best


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
