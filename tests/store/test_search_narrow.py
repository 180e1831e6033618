"""A narrow filter is searched inside its own rows, ranked as the whole store ranks them."""

from __future__ import annotations

import pytest

from offload.store import narrow
from offload.store.models import Filters
from offload.store.query import filter_sql
from offload.store.store import Store

QUERIES = (
    "which garden needs water",
    "the blue kettle on the stove",
    "server timeout after the deploy",
    "what did the report say about water",
)
_TOPICS = (
    "the garden needs water before noon",
    "a blue kettle sits on the stove",
    "the server timed out after the deploy",
    "the report says the water bill rose",
    "garden tools are in the shed",
    "the deploy log shows a timeout",
)


def _two_scopes(store: Store) -> None:
    # the scopes alternate, so each one's rows are many short runs of ids; fewer than
    # selectivity.MIN_SEARCHED entries each, and no query word common in the whole store
    for i in range(18):
        text = f"{_TOPICS[i % len(_TOPICS)]}, note {i} {'kettle' if i % 5 == 0 else 'pond'}"
        store.put(text, scope="a" if i % 2 else "b")
    for i in range(30):  # so each of the two is a small share of the store
        store.put(f"unrelated zebra record {i} about pipes", scope="z")


def _ids(store: Store, query: str, scope: str | None) -> list[int]:
    return [h.entry.id for h in store.search(query, scope=scope, limit=50)]


def test_runs_of_ids_join_consecutive_values_only() -> None:
    assert narrow.runs_of([1, 2, 3, 7, 9, 10]) == ((1, 3), (7, 7), (9, 10))
    assert narrow.runs_of([]) == ()


@pytest.mark.parametrize("query", QUERIES)
def test_a_scoped_search_ranks_as_the_whole_store_search_restricted_to_the_scope(
    store: Store, query: str
) -> None:
    _two_scopes(store)
    whole = store.search(query, limit=50)
    restricted = [h.entry.id for h in whole if h.entry.scope == "a"]
    scoped = _ids(store, query, "a")
    assert scoped, "the corpus must answer every query"
    # the scoped list ends at its last direct match; the whole store's may run on
    assert restricted[: len(scoped)] == scoped


@pytest.mark.parametrize("query", QUERIES)
def test_the_narrow_path_and_the_whole_store_path_rank_a_scope_alike(
    store: Store, query: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _two_scopes(store)
    narrowed = store.search(query, scope="a", limit=10)
    monkeypatch.setattr(narrow, "NARROW_ENTRIES", 0)  # every filter searched the whole way
    wide = store.search(query, scope="a", limit=10)
    assert [(h.entry.id, h.chunk_id) for h in narrowed] == [(h.entry.id, h.chunk_id) for h in wide]
    assert [round(h.score, 9) for h in narrowed] == [round(h.score, 9) for h in wide]


@pytest.mark.sqlite_only
def test_a_small_filter_is_read_as_runs_and_a_scattered_or_big_one_is_not(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _two_scopes(store)
    where, params = filter_sql(Filters(scope="a"), store.clock())
    runs = narrow.filter_runs(store.conn, where, params)
    assert runs is not None and len(runs.entries) == 9  # every other entry: 9 runs of one
    monkeypatch.setattr(narrow, "MAX_RUNS", 8)
    assert narrow.filter_runs(store.conn, where, params) is None
    monkeypatch.setattr(narrow, "MAX_RUNS", 32)
    monkeypatch.setattr(narrow, "NARROW_ENTRIES", 8)
    assert narrow.filter_runs(store.conn, where, params) is None
    monkeypatch.setattr(narrow, "NARROW_ENTRIES", 20_000)
    monkeypatch.setattr(narrow, "NARROW_SHARE", 0.1)  # 9 of 48 entries: a broad filter now
    assert narrow.filter_runs(store.conn, where, params) is None


def test_a_narrow_filter_keeps_out_what_it_does_not_hold(store: Store) -> None:
    _two_scopes(store)
    store.put("the kettle whistles loudly", scope="c")
    hits = store.search("kettle whistles", scope="a", limit=10)
    assert hits and all(h.entry.scope == "a" for h in hits)
    assert [h.entry.scope for h in store.search("kettle whistles", scope="c")] == ["c"]
