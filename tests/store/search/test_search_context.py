"""An entry scored with its neighbourhood as one document (BM25F over neighbour fields)."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from offload.core.text import analysis
from offload.core.tokens import EstimateCounter
from offload.store.backend import Sql
from offload.store.life.maintenance import reindex
from offload.store.models import Filters
from offload.store.search import context
from offload.store.sqlite import migrations
from offload.store.store import Store
from offload.store.write import index, packed_counts

IDF = {"lake": 2.0, "paint": 1.5}


def _field(weight: float, text: str) -> tuple[float, Counter[str], int]:
    words = text.split()
    return (weight, Counter(words), len(words))


def test_a_term_held_by_an_entry_and_its_neighbour_saturates() -> None:
    alone = context.bm25f(["lake"], [_field(1.0, "lake a b c")], IDF, 4.0)
    both = context.bm25f(["lake"], [_field(1.0, "lake a b c"), _field(0.5, "lake d e f")], IDF, 6.0)
    # more than the entry alone, less than the entry plus half its neighbour's own score
    assert alone < both < 1.5 * alone


def test_a_neighbours_other_query_term_counts_in_full_idf() -> None:
    same = context.bm25f(
        ["lake", "paint"], [_field(1.0, "lake a b c"), _field(0.5, "lake d e f")], IDF, 6.0
    )
    other = context.bm25f(
        ["lake", "paint"], [_field(1.0, "lake a b c"), _field(0.5, "paint d e f")], IDF, 6.0
    )
    assert other > same


def test_a_long_neighbours_word_counts_less_than_a_short_ones() -> None:
    short = context.bm25f(["lake"], [_field(1.0, "a b"), _field(0.5, "lake c")], IDF, 4.0)
    long = context.bm25f(["lake"], [_field(1.0, "a b"), _field(0.5, "lake " + "c " * 20)], IDF, 4.0)
    assert 0.0 < long < short


def test_one_field_alone_scores_as_fts5_bm25() -> None:
    got = context.bm25f(["lake"], [_field(1.0, "lake lake a b c f")], IDF, 4.0)
    norm = 1.0 - context.B + context.B * 6 / 4.0
    assert got == pytest.approx(2.0 * 2 * (context.K1 + 1) / (2 + context.K1 * norm))


@pytest.mark.parametrize(
    "texts",
    [
        ["lake lake a b c f", "paint d", "lake paint e", "x y z", "paint"],
        ["a b", "lake c", "", "lake " + "c " * 20],
        ["paint lake", "lake", "paint paint paint"],
        [""],
    ],
)
def test_neighbourhood_scores_equal_bm25f_over_all_fields_and_the_first_alone(
    texts: list[str],
) -> None:
    side_weights = [*context.field_weights(0.5, 2), *context.field_weights(0.5, 2)]
    fields = [_field(w, t) for w, t in zip([1.0, *side_weights], texts, strict=False)]
    terms = ["lake", "paint", "absent"]
    # the texts as rows (a column per term), a row of zeros after them; one neighbourhood
    # for each text as its own field, the others around it as far as there are any
    counts = np.array([[f[1].get(t, 0) for t in terms] for f in fields] + [[0] * len(terms)])
    lengths = np.array([f[2] for f in fields] + [0])
    none = len(fields)
    own, sides, expected = [], [], []
    for i in range(len(fields)):
        around = [j for j in range(len(fields)) if j != i][: len(side_weights)]
        own.append(i)
        sides.append(around + [none] * (len(side_weights) - len(around)))
        mine = [(1.0, fields[i][1], fields[i][2])]
        mine += [
            (w, fields[j][1], fields[j][2]) for w, j in zip(side_weights, around, strict=False)
        ]
        expected.append(
            (context.bm25f(terms, mine, IDF, 4.5), context.bm25f(terms, mine[:1], IDF, 4.5))
        )
    ctx, alone = context.neighbourhood_scores(
        counts,
        lengths,
        np.array(own),
        np.array(sides),
        side_weights,
        [IDF.get(t, 0.0) for t in terms],
        4.5,
    )
    # the same floats, not approximately: pages are compared score for score
    assert list(zip(ctx.tolist(), alone.tolist(), strict=True)) == expected


def test_field_weights_halve_with_distance() -> None:
    assert context.field_weights(0.5, 3) == [0.5, 0.25, 0.125]


def _turns(n: int) -> list[str]:
    out = [f"note {i} about nothing much" for i in range(n)]
    out[5] = "the lake at dawn"
    out[6] = "the lake again"
    out[12] = "the lake at dusk"
    out[13] = "I paint it"
    for i in (20, 25, 30, 35, 38):
        out[i] = f"paint drying number {i}"
    return out


@pytest.mark.sqlite_only
def test_a_turn_beside_the_other_query_word_outranks_one_beside_the_same_word(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        ids = [r.entry.id for r in store.put_many(_turns(40), kind="turn", scope="chat")]
        found = [h.entry.id for h in store.search("paint lake", scope="chat", limit=10)]
    # "lake" beside "paint" (rarer words, the neighbourhood holds both) before "lake" beside
    # "lake" again: a share of each neighbour's score would put it the other way round
    assert found.index(ids[12]) < found.index(ids[5])
    assert found.index(ids[13]) < found.index(ids[5])


@pytest.mark.sqlite_only
def test_a_neighbour_of_another_scope_or_kind_adds_nothing(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        store.put_many([f"note {i} about nothing much" for i in range(30)], scope="chat")
        hit = store.put("the lake at dawn", kind="turn", scope="chat").entry
        store.put("I paint it", kind="doc", scope="chat")
        store.put("I paint it", kind="turn", scope="other")
        alone = store.put("the lake at dusk", kind="turn", scope="chat").entry
        found = store.search("paint lake", Filters(kinds=("turn",)), scope="chat", limit=10)
    # the two lake turns are each other's only neighbours and score alike: the paint
    # entries (another kind, another scope) right after the first one count for nothing
    assert {h.entry.id for h in found} == {hit.id, alone.id}
    assert found[0].score == pytest.approx(found[1].score)


def _neighbours_by_hand(store: Store, window: int) -> dict[int, list[int | None]]:
    rows = store.conn.execute(Sql("SELECT id, scope, kind FROM entries ORDER BY id")).fetchall()
    runs: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        runs.setdefault((r[1], r[2]), []).append(int(r[0]))
    out: dict[int, list[int | None]] = {}
    for run in runs.values():
        for at, i in enumerate(run):
            before = run[max(0, at - window) : at][::-1]
            after = run[at + 1 : at + 1 + window]
            pad: list[int | None] = [None] * window
            out[i] = [*(before + pad)[:window], *(after + pad)[:window]]
    return out


@pytest.mark.sqlite_only
@pytest.mark.parametrize(("window", "reach"), [(1, 0), (2, 0), (2, 4), (3, 0), (3, 5)])
def test_neighbours_read_from_known_runs_equal_those_read_for_each_id(
    tmp_path: Path, window: int, reach: int
) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        # three interleaved runs of scope and kind, with holes where entries were forgotten
        refs = [
            store.put(f"note {i}", kind="turn" if i % 3 else "doc", scope=f"s{i % 2}").entry
            for i in range(60)
        ]
        for e in refs[7:60:9]:
            store.forget(e.ref)
        want = _neighbours_by_hand(store, window)
        every = sorted(want)
        assert context.neighbour_ids(store.conn, every, window) == want
        for seeds in (every[:3], every[10:40:4], every[-2:], []):
            runs = context.Runs()
            known = runs.slots(store.conn, seeds, window, reach=reach)
            assert known == {i: want[i] for i in seeds}
            # the seeds' neighbours (the case with_context asks for), others, an id not stored
            asked = [n for i in seeds for n in known[i] if n is not None]
            asked += [every[0], every[25], every[-1], refs[7].id, 10**9]
            got = runs.slots(store.conn, asked, window)
            gone = [None] * (2 * window)
            assert got == {i: want.get(i, gone) for i in asked}


_TRICKY = [
    'tool said {"m":"ok\\nZebrawordx failed"} at src/offload/store/context.py',
    "parseHTTPResponse and snake_case_name in v1.2.3 ünïcödé Straße",
    "the the the lake lake, painting painted paints",
]


def test_a_chunks_cached_term_counts_are_its_analysed_terms_counted_after_its_length() -> None:
    for text in [*_TRICKY, *_turns(40)[:8]]:
        cached = json.loads(index.term_counts(analysis.index_text(text)))
        length = cached.pop(index.LENGTH_KEY)
        assert cached == Counter(analysis.index_terms(text))
        assert length == len(analysis.index_terms(text))
        # a put counts them once, before its write transaction, for both backends
        (chunk,) = index.prepare(text, 10_000, 10**6).chunks or (None,)
        if chunk is not None:
            assert chunk.term_counts == index.term_counts(chunk.terms)
            assert chunk.counts == index.count_terms(chunk.terms)


# terms (as index.term_counts receives them, space-separated) that a careless string
# search would confuse: a colon and a comma inside a term and a term reading like a key
# and its count (x, then :1,), a term that is another's tail, a quote, a backslash,
# non-ASCII, nothing at all
_HOSTILE = [
    "x, :1, :) a:1,b 1,b lake lake alake lake: ünï ünï",
    'a"b ":)" say c:\\path lake',
    "",
]


def test_the_query_terms_counts_read_from_the_cache_equal_the_whole_objects() -> None:
    texts = [analysis.index_text(t) for t in [*_TRICKY, *_turns(40)[:8]]]
    for terms in [*texts, *_HOSTILE]:
        cached = index.term_counts(terms)
        whole = json.loads(cached)
        length = whole.pop(index.LENGTH_KEY)
        probes = [*whole, "lake", "1,b", ":1", ":1,", '"', ")", "zzz", "a", "b", "x"]
        quick = context.query_counts(cached, context.term_keys(probes))
        if "\\" in cached:
            assert quick is None  # an escape: parsed whole
            continue
        assert quick is not None
        assert quick == ({t: n for t, n in whole.items()}, length)


def test_a_cache_written_before_the_length_is_not_read_by_string_search() -> None:
    old = json.dumps({"lake": 2, "dawn": 1}, separators=(",", ":"))
    assert context.query_counts(old, context.term_keys(["lake"])) is None


@pytest.mark.sqlite_only
def test_the_migration_puts_each_caches_length_first_and_scores_stay_the_same(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        store.put_many([*_turns(40), *_TRICKY, *_HOSTILE], kind="turn", scope="chat")
        want = _cached_counts(store)
        now = _ranked(store, _QUERIES)
        # the counts as written before the length led them (JSON text, uncompressed)
        for cid, cached in want.items():
            whole = json.loads(cached or "")
            whole.pop(index.LENGTH_KEY)
            old = json.dumps(whole, ensure_ascii=False, separators=(",", ":"))
            store.conn.execute(Sql("UPDATE chunks SET term_counts = ? WHERE id = ?"), (old, cid))
        before = _ranked(store, _QUERIES)
        assert isinstance(store.conn, sqlite3.Connection)
        migrations.m_chunk_term_counts_length(store.conn)
        got = _cached_counts(store)
        after = _ranked(store, _QUERIES)
    assert got == want
    assert all(now)
    assert before == now == after


def _cached_counts(store: Store) -> dict[int, str | None]:
    """Each chunk's cached counts as JSON, however the backend stores them."""
    sqlite = isinstance(store.conn, sqlite3.Connection)
    counts = "coalesce(term_counts, packed_counts)" if sqlite else "term_counts"
    rows = store.conn.execute(Sql(f"SELECT id, {counts} FROM chunks")).fetchall()
    return {int(r[0]): packed_counts.unpack(r[1]) for r in rows}


def _ranked(store: Store, queries: list[str]) -> list[list[tuple[int, float]]]:
    return [
        [(h.entry.id, h.score) for h in store.search(q, scope="chat", limit=20)] for q in queries
    ]


_QUERIES = ["paint lake", "lake at dawn", "Zebrawordx failed", "parse http response", "note 7"]


@pytest.mark.sqlite_only
def test_scores_from_cached_term_counts_equal_scores_from_the_text_analysed_again(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        store.put_many([*_turns(40), *_TRICKY, *_turns(40)[:10]], kind="turn", scope="chat")
        cached = _ranked(store, _QUERIES)
        # a store written before the cache: every chunk scored from its text
        store.conn.execute(Sql("UPDATE chunks SET term_counts = NULL, packed_counts = NULL"))
        uncached = _ranked(store, _QUERIES)
    assert all(cached)
    assert cached == uncached


@pytest.mark.sqlite_only
def test_doctor_reindex_fills_in_the_term_counts_of_chunks_stored_before_the_cache(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        store.put_many(_turns(40), kind="turn", scope="chat")
        before = _ranked(store, _QUERIES)
        store.conn.execute(Sql("UPDATE chunks SET term_counts = NULL, packed_counts = NULL"))
        reindex(store)
        missing = store.conn.execute(
            Sql("SELECT count(*) FROM chunks WHERE coalesce(term_counts, packed_counts) IS NULL")
        )
        assert missing.fetchone()[0] == 0
        assert _ranked(store, _QUERIES) == before


@pytest.mark.sqlite_only
def test_rebuilding_the_index_from_its_chunks_rewrites_their_term_counts(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        store.put_many(_turns(40), kind="turn", scope="chat")
        want = _cached_counts(store)
        # counts left by an older analysis: a migration that re-derives the terms redoes them
        store.conn.execute(Sql("UPDATE chunks SET term_counts = '{\"stale\":1}'"))
        store.conn.execute(
            Sql(
                "INSERT INTO search_body (search_body) VALUES ('delete-all')",
                "DELETE FROM search_body",
            )
        )
        index.reindex_chunks(store.conn)
        got = _cached_counts(store)
    assert got == want


def test_every_chunk_written_carries_its_term_counts(store: Store) -> None:
    store.put_many(_TRICKY, kind="turn", scope="chat")
    counts = _cached_counts(store).values()
    assert counts
    assert all(json.loads(c or "") for c in counts)


def test_the_searched_terms_counts_read_from_the_cache_equal_those_of_the_text_analysed_again(
    store: Store,
) -> None:
    texts = [*_TRICKY, *_turns(40)[:14]]
    ids = [r.entry.id for r in store.put_many(texts, kind="turn", scope="chat")]
    cached = [json.loads(index.term_counts(analysis.index_text(t))) for t in texts]
    lengths = [c.pop(index.LENGTH_KEY) for c in cached]
    # every other term of each text, and one held by none
    terms = [*dict.fromkeys(t for c in cached for t in list(c)[::2]), "absentwordq"]
    want = {
        e: ({t: n for t, n in c.items() if t in terms}, n_all)
        for e, c, n_all in zip(ids, cached, lengths, strict=True)
    }

    def read() -> dict[int, tuple[dict[str, int], int]]:
        got = context.term_counts(store, {}, ids, terms)
        return {
            e: ({t: n for t, n in c.items() if t in terms and n}, n) for e, (c, n) in got.items()
        }

    assert read() == want
    # chunks stored before the cache: counted from their text
    sqlite = isinstance(store.conn, sqlite3.Connection)
    store.conn.execute(
        Sql("UPDATE chunks SET term_counts = NULL" + (", packed_counts = NULL" if sqlite else ""))
    )
    assert read() == want
