"""Bounded BM25 (store/search/selective.py): the same top as bm25() over every match, less work."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest

from offload.core.text import analysis
from offload.core.tokens import EstimateCounter
from offload.store.backend import Sql
from offload.store.models import NO_FILTERS
from offload.store.postgres import pgsql
from offload.store.search import lexical, query, selective
from offload.store.search.state import SearchState
from offload.store.store import Store

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]


def _corpus(store: Store, seed: int, n: int = 400) -> None:
    rng = random.Random(seed)
    texts = []
    for i in range(n):
        # "common" in nine rows of ten, a few mid words, a rare word now and then
        words = ["common"] * (rng.random() < 0.9) + rng.sample(WORDS, rng.randint(1, 4))
        words += [f"rare{rng.randint(0, 60)}"] * (rng.random() < 0.3)
        texts.append(" ".join([*rng.sample(words, len(words)), f"row{i}"]))
    store.put_many(texts, scope="c")


def _top(store: Store, text: str, need: int) -> list[tuple[int, float]]:
    where, params = query.filter_sql(NO_FILTERS, store.clock())
    terms = list(analysis.analyse_query(text).any_of)
    state = SearchState(store.conn, where, params, store.clock(), need)
    found = lexical.lexical_candidates(state, terms)
    return [(c.entry_id, round(c.score, 9)) for c in found[:need]]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("text", ["common alpha", "common bravo rare7", "alpha bravo charlie"])
def test_bounded_bm25_gives_the_top_of_bm25_over_every_match(
    store_location: Path | str, monkeypatch: pytest.MonkeyPatch, seed: int, text: str
) -> None:
    # on PostgreSQL the bound is ts_rank's (the score there), the partitions tsqueries
    with Store(store_location, counter=EstimateCounter()) as store:
        _corpus(store, seed)
        monkeypatch.setattr(selective, "POSTINGS_BUDGET", 10**9)  # every term scored by FTS5
        full = _top(store, text, 50)
        monkeypatch.setattr(selective, "POSTINGS_BUDGET", 20)  # the rarest term alone
        monkeypatch.setattr(selective, "WHOLE_SHARE", 2.0)  # even where it is common
        assert len(selective.plan(store.conn, "search_body", text.split()).scored) == 1
        bounded = _top(store, text, 50)
    assert [e for e, _ in bounded] == [e for e, _ in full]
    assert [s for _, s in bounded] == pytest.approx([s for _, s in full], rel=1e-9)


def test_ts_rank_bound_covers_any_row_of_the_terms_and_tightens_with_more_of_them() -> None:
    # ts_rank: at most 0.1 per unlabelled term, over log2(1 + positions) >= log2(1 + k)
    assert selective.ts_rank_upper_bound(100, [10]) == pytest.approx(0.1 * selective.idf(100, 10))
    two = selective.ts_rank_upper_bound(100, [10, 10])
    assert two == pytest.approx(0.2 * selective.idf(100, 10) / math.log2(3))
    assert selective.ts_rank_upper_bound(100, [10, 99]) == pytest.approx(
        0.1 * selective.idf(100, 10)  # the common term adds less than it divides
    )
    assert selective.ts_rank_upper_bound(50, [80]) == pytest.approx(0.1e-6)  # estimate lagging


def test_a_word_searched_before_it_was_stored_is_found_once_stored(store: Store) -> None:
    store.put_many([f"common filler {i}" for i in range(50)])
    assert store.search("zebrawordx common")[0].entry.topic == ""
    assert not [h for h in store.search("zebrawordx") if "zebrawordx" in h.text]
    e = store.put("the zebrawordx failed").entry
    assert store.search("zebrawordx")[0].entry.id == e.id


def test_idf_and_bounds_follow_fts5s_formula() -> None:
    assert selective.idf(100, 10) == pytest.approx(math.log(90.5 / 10.5))
    assert selective.idf(100, 80) == 1e-6  # a word in most rows weighs (almost) nothing
    # counts read by two statements between which rows were written: no domain error
    assert selective.idf(100, 101) == 1e-6
    assert selective.upper_bound(100, [10, 10]) == pytest.approx(2 * 2.2 * math.log(90.5 / 10.5))


def test_a_written_form_is_searched_only_where_it_is_rarer_than_its_stem(store: Store) -> None:
    # a name is written one way wherever it occurs: its form would count its rows twice
    for i in range(3):
        store.put(f"Caroline said, note {i}")
    store.put("expected 3 and expected 4")
    store.put("we are expecting it")
    forms = analysis.analyse_query("Caroline expecting").forms
    assert forms == (("caroline", "carolin"), ("expecting", "expect"))
    assert selective.idle_forms(store.conn, "search_body", forms) == {"caroline"}


def test_vocabulary_counts_of_many_terms_at_once_are_each_terms_own_count(
    store: Store,
) -> None:
    store.put_many(["alpha bravo", "alpha charlie", "alpha", "delta bravo"], scope="v")
    create, lookup = selective.vocab_sql("search_body")
    store.conn.execute(create)
    terms = ["alpha", "bravo", "charlie", "nowhere", "alpha"]
    rows = {t: store.conn.execute(lookup, (t,)).fetchone() for t in terms}  # SQLite: None
    one_by_one = {t: 0 if r is None else int(r[0]) for t, r in rows.items()}
    assert selective.vocab_counts(store.conn, "search_body", terms) == one_by_one
    assert one_by_one == {"alpha": 3, "bravo": 2, "charlie": 1, "nowhere": 0}


def test_a_searchs_statistics_give_each_terms_count_and_whether_any_row_holds_it(
    store: Store,
) -> None:
    store.put_many(["alpha bravo", "alpha charlie", "alpha", "delta bravo"], scope="v")
    store.put("echo", topic="zuluword", scope="v")  # held by a metadata row only
    stats = selective.SearchStats(store.conn)
    terms = ["alpha", "bravo", "nowhere", "zuluword"]
    assert stats.counts(terms) == selective.vocab_counts(store.conn, "search_body", terms)
    assert stats.counts(terms)["alpha"] == 3
    assert stats.known([*terms, "echo"]) == {"alpha", "bravo", "zuluword", "echo"}
    assert stats.chunks == int(
        store.conn.execute(Sql("SELECT count(*) FROM chunks", pgsql.chunk_count())).fetchone()[0]
    )


def _stats_statements(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The terms each term-statistics statement asks about, as PostgreSQL runs them."""
    from offload.store.postgres import pgconn, pgsql

    asked: list[list[str]] = []
    real = pgconn.PgConn.execute

    def counted(self: pgconn.PgConn, sql: Sql, parameters: Any = ()) -> pgconn.PgCursor:
        if sql == pgsql.search_stats_sql():
            asked.append(list(parameters[0]))
        return real(self, sql, parameters)

    monkeypatch.setattr(pgconn.PgConn, "execute", counted)
    return asked


def test_a_postgresql_search_asks_its_term_statistics_in_one_statement(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(pg_database, counter=EstimateCounter()) as store:
        store.put_many([f"the parser failed on input {i}" for i in range(30)])
        asked = _stats_statements(monkeypatch)
        assert store.search("Why did the parser fail on a nonexistentword?")
    assert len(asked) == 1  # the vocabulary checks, the counts and the plan share it
    assert {"parser", "fail", "nonexistentword"} <= set(asked[0])


def test_a_common_terms_count_is_kept_across_searches_until_the_index_grows_past_the_drift(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(pg_database, counter=EstimateCounter()) as store:
        store.put_many([f"common words in row {i}" for i in range(100)])
        store.put("rare words")
        asked = _stats_statements(monkeypatch)
        first = selective.SearchStats(store.conn).counts(["common", "rare"])
        again = selective.SearchStats(store.conn).counts(["common", "rare"])
        assert first == again == {"common": 100, "rare": 1}
        # the common count was read once; the rare one, which a put may change, each time
        assert asked == [["common", "rare"], ["rare"]]
        store.put_many([f"common words in a later row {i}" for i in range(10)])  # 10 % more
        grown = selective.SearchStats(store.conn).counts(["common", "rare"])
    assert grown == {"common": 110, "rare": 1}


@pytest.mark.parametrize("table", ["search_body", "search_meta"])
def test_each_vocabulary_lookup_counts_the_rows_of_the_table_asked_about_on_both_backends(
    table: str,
) -> None:
    other = {"search_body": "search_meta", "search_meta": "search_body"}[table]
    for sql in (selective.vocab_sql(table)[1], selective.vocab_rows_sql(table)):
        assert f"{table}_vocab" in sql and other not in sql
        assert f"FROM {table} " in sql.postgres and other not in sql.postgres


def _meta_and_body_counts(location: Path | str, terms: list[str]) -> dict[str, Any]:
    """What a store's vocabulary says of ``terms`` in each index, by every way it is read."""
    with Store(location, counter=EstimateCounter()) as store:
        # "kestrelword" is in the topic of twelve entries and the body of one other
        for i in range(12):
            store.put(f"filler note number {i}", topic=f"kestrelword report {i}", scope="m")
        store.put("the kestrelword nested in the body", topic="unrelated", scope="m")
        store.put_many([f"plain body {i}" for i in range(20)], scope="m")
        conn = store.conn
        create, lookup = selective.vocab_sql("search_meta")
        conn.execute(create)
        one = {t: conn.execute(lookup, (t,)).fetchone() for t in terms}
        return {
            "meta": selective.vocab_counts(conn, "search_meta", terms),
            "meta_one": {t: 0 if r is None else int(r[0]) for t, r in one.items()},
            "meta_plan": selective.plan(conn, "search_meta", terms).df,
            "body": selective.vocab_counts(conn, "search_body", terms),
        }


def test_a_terms_metadata_row_count_on_postgresql_is_sqlites_not_the_bodys(
    tmp_path: Path, pg_database: str
) -> None:
    terms = ["kestrelword", "report", "filler"]
    on_sqlite = _meta_and_body_counts(tmp_path / "offload.db", terms)
    on_pg = _meta_and_body_counts(pg_database, terms)
    assert on_sqlite["meta"]["kestrelword"] == 12 and on_sqlite["body"]["kestrelword"] == 1
    assert on_pg == on_sqlite
