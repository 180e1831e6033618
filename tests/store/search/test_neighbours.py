"""A hit's neighbours (store/search/neighbours.py): a share of its score, both sides, the filter kept."""

from __future__ import annotations

import pytest

from offload.store.backend import Sql
from offload.store.models import Filters
from offload.store.search import neighbours, query
from offload.store.search.state import Candidate, SearchState
from offload.store.store import Store


def _candidate(store: Store, entry_id: int, score: float) -> Candidate:
    row = store.conn.execute(
        Sql(
            "SELECT e.id AS eid, e.scope AS scope, e.kind AS kind, e.salience AS salience, "
            "e.accessed AS accessed, e.access_count AS uses FROM entries e WHERE e.id = ?"
        ),
        (entry_id,),
    ).fetchone()
    return Candidate.of_entry(row, score)


def test_a_hit_passes_a_share_of_its_score_to_its_neighbours_on_both_sides(store: Store) -> None:
    ids = [store.put(f"turn number {i}", scope="chat").entry.id for i in range(7)]
    store.put("another scope's turn", scope="other")
    where, params = query.filter_sql(Filters(scope="chat"), store.clock())
    hit = _candidate(store, ids[3], 8.0)
    state = SearchState(store.conn, where, params, store.clock(), 50)
    out = neighbours.with_neighbours([hit], state, share=0.5, window=2, sources=10)
    scores = {c.entry_id: c.score for c in out}
    assert scores == {
        ids[3]: 8.0,
        ids[2]: 4.0,
        ids[4]: 4.0,
        ids[1]: 2.0,
        ids[5]: 2.0,
    }
    assert [c.direct for c in out] == [True, False, False, False, False]


def test_a_neighbour_the_filter_drops_is_not_added_but_a_found_one_still_gains(
    store: Store,
) -> None:
    now = store.clock()
    first = store.put("turn one", scope="chat").entry.id
    gone = store.put("turn two", scope="chat", expires=now - 10).entry.id
    third = store.put("turn three", scope="chat").entry.id
    where, params = query.filter_sql(Filters(scope="chat"), now)
    found = [_candidate(store, third, 4.0), _candidate(store, first, 1.0)]
    state = SearchState(store.conn, where, params, now, 50)
    out = neighbours.with_neighbours(found, state, share=0.5, window=2, sources=10)
    scores = {c.entry_id: c.score for c in out}
    assert gone not in scores  # expired: the filter drops it
    assert scores == {third: pytest.approx(4.0 + 0.25), first: pytest.approx(1.0 + 1.0)}
