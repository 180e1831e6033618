"""A narrow filter is searched inside its own rows, ranked as the whole store ranks them."""

from __future__ import annotations

import pytest

from offload.store.models import Filters
from offload.store.search import narrow
from offload.store.search.query import filter_sql
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
    monkeypatch.setattr(narrow, "NARROW_SHARE", 0.0)  # every filter searched the whole way
    wide = store.search(query, scope="a", limit=10)
    assert [(h.entry.id, h.chunk_id) for h in narrowed] == [(h.entry.id, h.chunk_id) for h in wide]
    assert [round(h.score, 9) for h in narrowed] == [round(h.score, 9) for h in wide]


# -- filters of every shape: mid-size in two runs, scattered, broad ----------------------

_WORDS = [
    "harbour",
    "pelican",
    "lantern",
    "copper",
    "violet",
    "meadow",
    "glacier",
    "saffron",
    "orchard",
    "turbine",
    "ledger",
    "quartz",
    "falcon",
]
_MORE = [
    "anchor",
    "bramble",
    "cobalt",
    "dune",
    "ember",
    "fjord",
    "grotto",
    "heron",
    "iris",
    "juniper",
    "kestrel",
    "lagoon",
    "marble",
    "nutmeg",
    "opal",
    "prairie",
    "quill",
]
SHAPE_QUERIES = (
    "where is the copper lantern",
    "pelican over the glacier meadow",
    "falcon ledger for the turbine",
    "opal lagoon and juniper heron",
    "saffron orchard kestrel",
)


def _text(i: int) -> str:
    # each word in 1/13 or 1/17 of the entries: common in no scope (core.selectivity), and
    # a query matches fewer entries than ranking.NEIGHBOUR_SOURCES in the whole store (the
    # best hits a scoped search passes context from are then the whole store's too)
    return f"{_WORDS[i % 13]} {_MORE[(i * 7) % 17]} note {i}"


def _shapes(store: Store) -> None:
    """310 entries: "mid" (10 %) in two runs with some long bodies, "scat" (8 %) one
    entry in four, "wide" (29 %, searched the whole-store way), filler between."""
    n = 0

    def put(scope: str, long: bool = False) -> None:
        nonlocal n
        body = _text(n)
        if long:  # many chunks: the filter's chunk ids are not its entry ids
            lines = [f"line {k}: a plain row of filler\n" for k in range(300)]
            lines[150] = body + "\n"
            body = "".join(lines)
        store.put(body, scope=scope)
        n += 1

    for _ in range(40):
        put("z")
    for _ in range(2):
        for k in range(15):
            put("mid", long=k % 7 == 3)
        for _ in range(25):
            put("z")
    for _ in range(25):
        put("scat")
        for _ in range(3):
            put("z")
    for _ in range(90):
        put("wide")


@pytest.mark.parametrize("scope", ["mid", "scat", "wide"])
def test_a_filter_of_any_shape_ranks_as_the_whole_store_search_restricted_to_it(
    store: Store, scope: str
) -> None:
    _shapes(store)
    for query in SHAPE_QUERIES:
        whole = store.search(query, limit=200)
        restricted = [h.entry.id for h in whole if h.entry.scope == scope]
        scoped = _ids(store, query, scope)[:20]
        assert scoped, f"the corpus must answer {query!r} in {scope}"
        assert restricted[: len(scoped)] == scoped, query


@pytest.mark.parametrize("scope", ["mid", "scat"])
def test_a_mid_size_or_scattered_filter_ranks_alike_inside_its_rows_and_the_whole_way(
    store: Store, scope: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _shapes(store)
    narrowed = {q: store.search(q, scope=scope, limit=10) for q in SHAPE_QUERIES}
    monkeypatch.setattr(narrow, "NARROW_SHARE", 0.0)  # every filter searched the whole way
    for q, hits in narrowed.items():
        wide = store.search(q, scope=scope, limit=10)
        assert [(h.entry.id, h.chunk_id) for h in hits] == [(h.entry.id, h.chunk_id) for h in wide]
        assert [round(h.score, 9) for h in hits] == [round(h.score, 9) for h in wide]


def _plan(store: Store, filters: Filters) -> narrow.Narrow | None:
    where, params = filter_sql(filters, store.clock())
    return narrow.plan(store.conn, filters, where, params)


@pytest.mark.sqlite_only
def test_a_filter_keeping_a_small_share_is_read_once_with_the_spans_of_its_rows(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _shapes(store)
    mid, scat = _plan(store, Filters(scope="mid")), _plan(store, Filters(scope="scat"))
    assert mid is not None and mid.entries == 30 and not mid.meta.dense  # two runs
    assert mid.chunks.last - mid.chunks.first + 1 > mid.entries  # its long bodies
    assert scat is not None and scat.entries == 25 and not scat.chunks.dense
    store.put("one more pelican", scope="tail")
    tail = _plan(store, Filters(scope="tail"))
    assert tail is not None and tail.chunks.dense and tail.meta.dense
    assert tail.chunks.first == tail.chunks.last
    assert _plan(store, Filters(scope="nobody")) == narrow.Narrow(
        0, narrow.Span("narrow_chunks", 1, 0, True), narrow.Span("narrow_entries", 1, 0, True)
    )
    assert _plan(store, Filters(scope="wide")) is None  # 90 of 310: a broad share
    assert _plan(store, Filters()) is None  # the whole store
    monkeypatch.setattr(narrow, "NARROW_SHARE", 0.05)  # 30 of 311: broad now
    assert _plan(store, Filters(scope="mid")) is None


def test_a_filters_size_comes_from_the_scope_sums_less_the_expired_entries(store: Store) -> None:
    for i in range(5):
        store.put(f"live note {i}", scope="a", kind="note")
    store.put("gone soon", scope="a", kind="note", expires=store.clock() - 1)
    store.put("another kind", scope="a", kind="log")

    def size(f: Filters, bound: int = 100) -> int:
        where, params = filter_sql(f, store.clock())
        return narrow.filter_size(store.conn, f, where, params, bound)

    assert size(Filters(scope="a")) == 6 == store.count(Filters(scope="a"))
    assert size(Filters(scope="a", kinds=("note",))) == 5
    assert size(Filters(kinds=("note", "log"))) == 6
    assert size(Filters(scope="a"), bound=3) == 3
    assert size(Filters(scope="a", status="cold"), bound=4) == 4  # counted, up to the bound
    assert size(Filters(scope="a", status="cold")) == 6


def test_a_narrow_filter_keeps_out_what_it_does_not_hold(store: Store) -> None:
    _two_scopes(store)
    store.put("the kettle whistles loudly", scope="c")
    hits = store.search("kettle whistles", scope="a", limit=10)
    assert hits and all(h.entry.scope == "a" for h in hits)
    assert [h.entry.scope for h in store.search("kettle whistles", scope="c")] == ["c"]
