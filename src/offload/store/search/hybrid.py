"""Hybrid ranking: the lexical candidates fused with the nearest entries by embedding.

Called by :func:`offload.store.search.pipeline.search_hits` on its final lexical ranking
(neighbourhood, phrases, salience and use: measured better there than before it, see
docs/benchmarks/search.md). Without an embedding model, or with no vector stored yet, the lexical
ranking passes through unchanged: an entry whose vector has not landed is still found by
its words. A query that matches no word finds nothing: the embedding re-orders and adds to
a lexical answer, it never makes one up from nearest neighbours alone (a typo or a
nonsense word would otherwise always "find" something).

What it adds is near, not merely among the nearest (the nearest entries of a small store
are all of it): an entry only the embedding brings in is kept only where its similarity
stands above the corpus's typical one (the floor), and a hit whose fused score is 0 is
never kept. A lookup (no function words: a name, an identifier) asks for its words: an
entry without them may displace a weaker match but never extends the list past the
matches (as a neighbour in ranking.py), so its answer does not depend on whether the scan
ran (:func:`offload.store.search.semantic.answered_by_words`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from offload.core.fusion import calibrated_weight, fuse
from offload.store.backend import Sql
from offload.store.search import semantic
from offload.store.search.state import Candidate, Fusion, SearchState

if TYPE_CHECKING:
    from offload.store.handle import StoreHandle as Store

_KEYS = (
    "e.id AS eid, e.scope AS scope, e.kind AS kind, e.salience AS salience, "
    "e.accessed AS accessed, e.access_count AS uses"
)
# the entries of these ids the filter keeps; the ids drive the join (see
# offload.store.search.lexical._BODY_ENTRIES)
_BY_IDS = Sql(
    f"SELECT {_KEYS} FROM json_each(?) j CROSS JOIN entries e WHERE e.id = j.value AND {{where}}",
    f"SELECT {_KEYS} FROM offload_ids(%s) j CROSS JOIN entries e "
    "WHERE e.id = j.value AND {where}",
)


@dataclass(frozen=True, slots=True)
class Fused:
    """The fused order: its first ``keep`` hits (the state's; all without it), how many
    hits the whole order holds (``total``), and whether no entry beyond the nearest ones
    the semantic side read could join it (``every``: a deeper search adds none)."""

    ranked: list[Candidate]
    total: int
    every: bool


def fused_candidates(
    store: Store,
    probe: semantic.Probe | None,
    found: list[Candidate],
    state: SearchState,
    *,
    lookup: bool = False,
) -> Fused:
    """``found`` (lexical, best first) fused with the ``need`` nearest entries the filter
    keeps (``probe``: the query's scan, :func:`offload.store.search.semantic.start`), at the
    share :func:`~offload.core.fusion.calibrated_weight` gives this query; scores become the
    fused ones (core.fusion, set on ``found``'s candidates), best first, only the hits
    :func:`answer` keeps (``lookup``: the query is one). With the state's ``keep``, the
    first ``keep`` of that list only (the page and what precedes it). Without a semantic
    side ``found`` is returned whole. The state's ``gate``: the filter and the entries'
    columns in memory (store/search/memory/entrykeys.py), tested there before any
    statement."""
    if not found or probe is None:
        return Fused(found, len(found), True)
    keep = state.keep
    ids = [c.entry_id for c in found]
    side = semantic.finish(store, probe, state, ids)
    if side is None:
        return Fused(found, len(found), True)
    # the share follows how clearly each side picks its best for this query
    weight = calibrated_weight(
        store.semantic_weight, [c.score for c in found], side.scores.values(), side.floor
    )
    lexical = [(c.entry_id, c.score) for c in found]
    order = answer(
        fuse(lexical, side.scores, weight=weight, floor=side.floor), found, side, lookup=lookup
    )
    every = _every(order, found, side, weight, lookup=lookup)
    by_id = {c.entry_id: c for c in found}
    only = [e for e, _ in order[:keep] if e not in by_id]
    by_id.update(_semantic_only(state, only))
    if keep is not None and any(e not in by_id for e in only):
        # one the filter no longer keeps (forgotten since the semantic side's check) gives
        # way to the next
        by_id.update(_semantic_only(state, [e for e, _ in order[keep:] if e not in by_id]))
        order = [(e, score) for e, score in order if e in by_id]
    if state.trace is not None:
        state.trace.fusion = _fusion(found, side.scores, weight, side.floor)
    out = []
    for eid, score in order[:keep]:
        c = by_id.get(eid)
        if c is not None:  # rescored in place: ``found`` is the caller's to rank anew
            c.score = score
            out.append(c)
    return Fused(out, len(order), every)


def answer(
    order: list[tuple[int, float]],
    found: list[Candidate],
    side: semantic.Nearest,
    *,
    lookup: bool = False,
) -> list[tuple[int, float]]:
    """The hits of a fused ``order`` (entry id, fused score; best first) worth showing: a
    fused score above 0, and for an entry only the embedding brought in (not in ``found``)
    a similarity above the semantic side's floor, the typical text's. An entry a
    neighbour brought in keeps the place the lexical ranking gave it (ranking.py: it
    displaces a weaker match or is not there), whatever its similarity: the turn that
    answers a question is often unlike it. For a ``lookup`` the list ends at its last
    direct hit: what the embedding adds there may displace a weaker match, never follow
    the matches."""
    lexical = {c.entry_id for c in found}
    sim, floor = side.scores, side.floor
    out = [(e, score) for e, score in order if score > 0.0 and (e in lexical or sim[e] > floor)]
    if lookup:
        direct = {c.entry_id for c in found if c.direct}
        last = max((i for i, (e, _) in enumerate(out) if e in direct), default=-1)
        out = out[: last + 1]
    return out


def _every(
    order: list[tuple[int, float]],
    found: list[Candidate],
    side: semantic.Nearest,
    weight: float,
    *,
    lookup: bool,
) -> bool:
    """Whether no entry further away than the semantic side's nearest could join the
    answer ``order``: the best fused score one can reach (its similarity at most the last
    nearest's, its lexical part 0) is 0, or for a ``lookup`` no more than the last direct
    hit's (it would follow the matches)."""
    if side.deepest is None:
        return True
    span = max(side.scores.values()) - side.floor
    reach = weight * min(1.0, max(0.0, (side.deepest - side.floor) / span)) if span > 0 else 0.0
    if not lookup:
        return reach <= 0.0
    direct = {c.entry_id for c in found if c.direct}
    last = next((score for e, score in reversed(order) if e in direct), None)
    return last is None or reach <= last


def _fusion(
    found: list[Candidate], similarity: Mapping[int, float], weight: float, floor: float
) -> Fusion:
    """What the fusion weighed, for an explanation: each side's score mapped to [0, 1] as
    :func:`~offload.core.fusion.fuse` maps it (the similarity alone with ``weight`` 1)."""
    lexical = [(c.entry_id, c.score) for c in found]
    lex_unit = dict(fuse(lexical, {}, weight=0.0, floor=floor))
    sem_unit = dict(fuse([], similarity, weight=1.0, floor=floor))
    return Fusion(weight, floor, dict(similarity), lex_unit, sem_unit)


def _semantic_only(state: SearchState, ids: list[int]) -> dict[int, Candidate]:
    """Candidates for entries only the embedding found, if the search's filter keeps them
    (their first chunk is shown)."""
    gate = state.gate
    out: dict[int, Candidate] = {}
    if gate is not None:  # the held entries from memory, the others by id
        held, ids = gate.rows(ids)
        out = {eid: Candidate.of_entry(row) for eid, row in held.items() if row is not None}
    if not ids:
        return out
    rows = state.conn.execute(
        _BY_IDS.fill(where=state.where),
        (json.dumps(ids), *state.params),
    ).fetchall()
    out.update((int(r["eid"]), Candidate.of_entry(r)) for r in rows)
    return out
