"""store.search.ranking's time preference: a date the query names raises the entries whose
event time lies near it, softly, on both backends; a question asking when raises the hits
that say when."""

from __future__ import annotations

from datetime import UTC, datetime

from offload.store.search import ranking
from offload.store.store import Store


def _t(year: int, month: int, day: int) -> float:
    return datetime(year, month, day, 12, tzinfo=UTC).timestamp()


def _cooked(store: Store) -> dict[str, int]:
    """Turns equally relevant to 'pasta', each told on another day (the newest last), each
    of its own kind (no neighbours: each is scored alone)."""
    days = {
        "we cooked pasta on the stove": _t(2023, 5, 8),
        "we cooked pasta on the grill": _t(2023, 6, 20),
        "we cooked pasta on the porch": _t(2023, 8, 1),
        "we cooked pasta on the beach": _t(2023, 8, 30),
    }
    ids = {}
    for text, when in days.items():
        last = text.rsplit(" ", 1)[1]
        ids[last] = store.put(text, scope="s", kind=last, event_time=when).entry.id
    store.put("we went hiking all day", scope="s", kind="hike", event_time=_t(2023, 5, 8))
    return ids


def _first(store: Store, query: str, **kw: float) -> int:
    return store.search(query, scope="s", limit=3, **kw)[0].entry.id  # type: ignore[arg-type]


def test_without_a_date_equally_relevant_entries_keep_the_newest_first(store: Store) -> None:
    ids = _cooked(store)
    assert _first(store, "cooked pasta") == ids["beach"]


def test_an_absolute_date_in_the_query_ranks_the_entry_told_then_first(store: Store) -> None:
    ids = _cooked(store)
    assert _first(store, "cooked pasta on 8 May 2023") == ids["stove"]
    assert _first(store, "what pasta did we cook in June 2023?") == ids["grill"]
    assert _first(store, "pasta 2023-08-01") == ids["porch"]


def test_a_relative_date_counts_from_the_newest_event_time_searched(store: Store) -> None:
    ids = _cooked(store)
    # the newest event time is 30 August 2023: "last month" is July, the porch (1 August)
    # was told just after it, the grill (June) long before
    assert _first(store, "what pasta did we cook last month") == ids["porch"]
    assert _first(store, "pasta last May") == ids["stove"]


def test_a_relative_date_counts_from_the_time_the_search_is_given(store: Store) -> None:
    ids = _cooked(store)
    assert _first(store, "pasta yesterday", as_of=_t(2023, 6, 21)) == ids["grill"]
    assert _first(store, "pasta yesterday") == ids["beach"]


def test_a_date_never_brings_in_an_entry_matching_none_of_the_words(store: Store) -> None:
    _cooked(store)
    hits = store.search("pasta on 8 May 2023", scope="s", limit=10)
    assert "hiking" not in " ".join(h.text for h in hits)


def test_entries_without_an_event_time_are_placed_by_when_they_were_stored(
    store: Store,
) -> None:
    now = [_t(2023, 5, 8)]
    store.clock = lambda: now[0]
    old = store.put("the deploy failed on the runner", scope="s", kind="a").entry
    now[0] = _t(2023, 8, 30)
    store.put("the deploy failed on the server", scope="s", kind="b")
    assert _first(store, "deploy failed in May 2023") == old.id


def test_a_question_asking_when_ranks_the_hit_that_says_when_first(store: Store) -> None:
    store.put("Melanie loved the camping trip with the kids yesterday", scope="s", kind="a")
    store.put("Melanie loved the camping trip with the kids outdoors", scope="s", kind="b")
    store.put("the kids played chess at home", scope="s", kind="c")  # the words' idf
    explained = store.explain("When did Melanie go on the camping trip?", scope="s", limit=2)
    assert "yesterday" in explained[0][0].text
    assert [e.time for _, e in explained] == [1.0 + ranking.ASKED_TIME_BOOST, 1.0]
    plain = store.explain("Melanie camping trip", scope="s", limit=2)
    assert [e.time for _, e in plain] == [1.0, 1.0]


def test_closeness_is_one_inside_a_span_and_decays_faster_before_it_than_after() -> None:
    from offload.core.text import timeexpr

    june = timeexpr.spans("June 2023", 0.0)
    inside = ranking.closeness(june, _t(2023, 6, 15))
    before = ranking.closeness(june, _t(2023, 5, 22))
    after = ranking.closeness(june, _t(2023, 7, 10))
    assert inside == 1.0
    assert 0.0 < before < after < 1.0


def test_an_amount_of_time_before_an_event_named_by_words_counts_from_that_event(
    store: Store,
) -> None:
    store.put("we flew to Lisbon for the trip", scope="s", kind="t", event_time=_t(2023, 7, 1))
    _cooked(store)

    def first_pasta(query: str) -> str:
        hits = store.search(query, scope="s", limit=10)
        return next(h.text for h in hits if "pasta" in h.text).rsplit(" ", 1)[1]

    # two weeks before the trip (1 July): 17-24 June, the grill's (20 June)
    assert first_pasta("what pasta did we cook two weeks before the Lisbon trip") == "grill"
    assert first_pasta("what pasta did we cook before the Lisbon trip") == "beach"  # no amount
