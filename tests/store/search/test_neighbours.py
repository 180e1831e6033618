"""A hit's neighbours (store/search/neighbours.py): a share of its score, both sides, the filter kept;
its stretch (the entries of its scope and kind told at its event time, scored as one
document) raises it, no shared event time changes nothing; on both backends, through SQL
and through the entries' columns and index held in memory."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from offload.core.tokens import EstimateCounter
from offload.store.backend import Sql
from offload.store.models import Filters
from offload.store.search import neighbours, query
from offload.store.search.state import Candidate, SearchState
from offload.store.store import Store
from wordcorpus import built_view


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


FILLER = ("the weather was grey", "we talked about work", "lunch was late again")


def _t(day: int) -> float:
    return datetime(2023, 5, day, 12, tzinfo=UTC).timestamp()


def _sessions(store: Store, *, dated: bool) -> tuple[int, int]:
    """Two sessions, each with a turn about swimming in the lake (the same words); the
    first also names the puppy, more than two turns away from its swimmer. The swimmer of
    the second session is stored last."""
    first = [
        "we adopted a puppy named Rex",
        *FILLER,
        "Tom swims in the lake every day",
    ]
    second = [*FILLER, "Ann swims in the lake every day"]
    ids: list[int] = []
    for day, texts in ((1, first), (2, second)):
        when = _t(day) if dated else None
        ids.extend(r.entry.id for r in store.put_many(texts, scope="chat", event_time=when))
    return ids[len(first) - 1], ids[-1]


def _order(store: Store, text: str) -> list[int]:
    return [h.entry.id for h in store.search(text, scope="chat", limit=10)]


def test_a_hit_told_in_the_stretch_that_holds_the_questions_other_words_ranks_first(
    store: Store,
) -> None:
    tom, ann = _sessions(store, dated=True)
    order = _order(store, "Who swims in the lake with the puppy?")
    assert order.index(tom) < order.index(ann)


def test_the_stretch_raises_its_hit_through_the_columns_and_index_held_in_memory(
    store_location: Path | str,
) -> None:
    with Store(store_location, counter=EstimateCounter(), resident_mb=64) as store:
        tom, ann = _sessions(store, dated=True)
        built_view(store)
        resident = store.resident
        assert resident is not None
        resident.entry_keys.current(store.conn)  # the first ask starts the build
        assert resident.entry_keys.wait(60)
        assert resident.entry_keys.current(store.conn) is not None
        order = _order(store, "Who swims in the lake with the puppy?")
        assert order.index(tom) < order.index(ann)


def test_without_event_times_equal_hits_keep_the_newest_first(store: Store) -> None:
    tom, ann = _sessions(store, dated=False)
    order = _order(store, "Who swims in the lake with the puppy?")
    assert order.index(ann) < order.index(tom)


def test_hits_sharing_no_event_time_with_a_neighbour_keep_their_scores(store: Store) -> None:
    a = store.put("swims in the lake", scope="chat", event_time=_t(1)).entry.id
    b = store.put("swims in the sea", scope="chat", event_time=_t(2)).entry.id
    c = store.put("swims in the pool", scope="chat").entry.id
    where, params = query.filter_sql(Filters(scope="chat"), store.clock())
    state = SearchState(store.conn, where, params, store.clock(), 50)
    found = [_candidate(store, e, s) for e, s in ((a, 3.0), (b, 2.0), (c, 1.0))]
    out = neighbours.with_stretches(store, ["swim"], found, state)
    assert [(x.entry_id, x.score) for x in out] == [(a, 3.0), (b, 2.0), (c, 1.0)]


def test_a_stretch_ends_where_the_event_time_changes(store: Store) -> None:
    # the puppy is told the day before the second swimmer, right beside it: not its stretch
    rex = store.put("we adopted a puppy named Rex", scope="chat", event_time=_t(1)).entry.id
    tom = store.put("Tom swims in the lake", scope="chat", event_time=_t(1)).entry.id
    ann = store.put("Ann swims in the lake", scope="chat", event_time=_t(2)).entry.id
    store.put("the weather was grey", scope="chat", event_time=_t(2))
    where, params = query.filter_sql(Filters(scope="chat"), store.clock())
    state = SearchState(store.conn, where, params, store.clock(), 50)
    found = [_candidate(store, e, 1.0) for e in (ann, tom, rex)]
    out = neighbours.with_stretches(store, ["swim", "lake", "puppi"], found, state)
    scores = {x.entry_id: x.score for x in out}
    assert scores[tom] == scores[rex] > scores[ann] > 1.0
