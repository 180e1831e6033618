"""A hit ranked by the stretch it was told in: the entries of its scope and kind stored one
after another with its event time (a conversation's session, the notes of one meeting).

A question's words are often spread over a stretch: the turn that answers it says "he" or
"it" where a turn a few lines earlier named the dog, the trip, the band. The neighbourhood
(store/search/context.py) reaches two entries each side; this reaches the whole stretch,
scored as one document: BM25 of the searched terms over the stretch's text (the terms'
idf of the index, the length normalised by the stretches read), divided by the best such
score among the hits, multiplies each hit's score by ``1 + STRETCH_WEIGHT * that share``.
A hit told in the stretch that holds most of the question's words rises above an equal hit
told elsewhere; hits without an event time, or alone at theirs, are each a stretch of one.

A stretch is read around each of the best ``STRETCH_SOURCES`` hits, ``STRETCH_REACH``
entries each side at most, as far as the event time stays the same (ids in order within
the scope and kind, from the entries' columns in memory when held): a bounded read, by
primary key, whatever the store's size. When no hit has an event time shared with
another entry, nothing changes.

Measured on LoCoMo (docs/benchmarks/search.md, "A hit ranked by its stretch"): the weight
chosen on conversations 1-2 among 0.1-1.0, reported on 3-5.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING

from offload.store.backend import Sql
from offload.store.search import context
from offload.store.search.hybrid import Fused
from offload.store.search.memory import entrykeys
from offload.store.search.state import Candidate, SearchState

if TYPE_CHECKING:
    from offload.store.handle import StoreHandle as Store

# The most a stretch's share of the best stretch's score multiplies a hit's score by
# (1 + this): the best LoCoMo R@10 on conversations 1-2 of 0.2, 0.3, 0.5 and 1.0 tried
STRETCH_WEIGHT = 0.5
# How many of the best hits have their stretch read
STRETCH_SOURCES = 50
# How far a stretch is read each side of a hit, in entries of its scope and kind
STRETCH_REACH = 32
# a stretch: its scope, kind and event time; or, for an entry without one, the entry's id
Stretch = tuple[str, str, float | None, int | None]
_EVENT_TIMES = Sql(
    "SELECT e.id AS eid, e.event_time AS t FROM json_each(?) j CROSS JOIN entries e "
    "WHERE e.id = j.value",
    "SELECT e.id AS eid, e.event_time AS t FROM offload_ids(%s) j CROSS JOIN entries e "
    "WHERE e.id = j.value",
)


def reranked(store: Store, terms: Sequence[str], fused: Fused, state: SearchState) -> Fused:
    """The fused order with :func:`with_stretches` applied to it (the same hits, counted
    alike)."""
    return Fused(with_stretches(store, terms, fused.ranked, state), fused.total, fused.every)


def with_stretches(
    store: Store, terms: Sequence[str], ranked: list[Candidate], state: SearchState
) -> list[Candidate]:
    """``ranked`` (best first) with each of its best hits' scores multiplied by its
    stretch's factor (the module docstring), best first again; unchanged when no hit
    shares its event time with a neighbour."""
    top = sorted(ranked, key=attrgetter("score"), reverse=True)[:STRETCH_SOURCES]
    if not top or not terms:
        return ranked
    when = _event_times(store, [c.entry_id for c in top], state)
    dated = [c.entry_id for c in top if when.get(c.entry_id) is not None]
    if not dated:
        return ranked
    runs = context.Runs() if state.gate is None else context.HeldRuns(state.gate.keys)
    slots = runs.slots(store.conn, dated, STRETCH_REACH)
    near = [n for s in slots.values() for n in s if n is not None and n not in when]
    when.update(_event_times(store, near, state))
    members = {e: _stretch(e, slots[e], when) for e in dated}
    if all(len(m) == 1 for m in members.values()):
        return ranked
    # a stretch is a distinct (scope, kind, time): the union of what was read around its
    # hits; a hit without an event time is a stretch of its own
    stretches: dict[Stretch, set[int]] = defaultdict(set)
    key: dict[int, Stretch] = {}
    for c in top:
        t = when.get(c.entry_id)
        key[c.entry_id] = (c.scope, c.kind, t, None if t is not None else c.entry_id)
        stretches[key[c.entry_id]].update(members.get(c.entry_id, [c.entry_id]))
    scores = _stretch_scores(store, terms, list(stretches.values()), state)
    best = max(scores, default=0.0)
    if best <= 0.0:
        return ranked
    share = dict(zip(stretches, (s / best for s in scores), strict=True))
    for c in top:
        c.score *= 1.0 + STRETCH_WEIGHT * share[key[c.entry_id]]
    out = sorted(ranked, key=attrgetter("entry_id"), reverse=True)
    out.sort(key=attrgetter("score"), reverse=True)
    return out


def _event_times(store: Store, ids: Sequence[int], state: SearchState) -> dict[int, float | None]:
    """Each id's event time (None: none given): from the entries' columns in memory when
    held (the state's ``gate``), the others read by id."""
    out: dict[int, float | None] = {}
    rest = list(dict.fromkeys(ids))
    if state.gate is not None:
        keys, rest = state.gate.keys, []
        for e in dict.fromkeys(ids):
            k = keys.get(e)
            if k is None:
                rest.append(e)
            else:
                out[e] = k[entrykeys.EVENT_TIME]
    if rest:
        for r in store.conn.execute(_EVENT_TIMES, (json.dumps(rest),)):
            out[int(r["eid"])] = None if r["t"] is None else float(r["t"])
    return out


def _stretch(e: int, slots: list[int | None], when: dict[int, float | None]) -> list[int]:
    """``e`` and its neighbours (``slots``: before, nearest first, then after) up to the
    first on each side told at another time."""
    t = when.get(e)
    out = [e]
    reach = len(slots) // 2
    for side in (slots[:reach], slots[reach:]):
        for n in side:
            if n is None or when.get(n) != t:
                break
            out.append(n)
    return out


def _stretch_scores(
    store: Store, terms: Sequence[str], stretches: list[set[int]], state: SearchState
) -> list[float]:
    """BM25 of ``terms`` over each stretch's text as one document (each entry's first
    chunk, its counts as context.count_matrix reads them)."""
    distinct = list(dict.fromkeys(terms))
    entries = sorted({e for s in stretches for e in s})
    counts, lengths = context.count_matrix(store, {}, entries, distinct, state.view)
    _, idf = context.term_weights(store.conn, state.view, distinct)
    row = {e: i for i, e in enumerate(entries)}
    fields = []
    for members in stretches:
        at = [row[e] for e in sorted(members)]
        summed = counts[at].sum(axis=0).tolist()
        fields.append((dict(zip(distinct, summed, strict=True)), int(lengths[at].sum())))
    avg = sum(n for _, n in fields) / len(fields)
    return [context.bm25f(distinct, [(1.0, c, n)], idf, avg) for c, n in fields]
