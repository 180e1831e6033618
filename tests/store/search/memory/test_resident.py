"""A store's in-memory index: the SQL path's pages, fresh after every write, never stale."""

from __future__ import annotations

import random
import sqlite3
import threading
from pathlib import Path

import pytest

from offload.config import SearchSettings
from offload.core.text import analysis
from offload.core.tokens import EstimateCounter
from offload.errors import ConfigError
from offload.store.backend import Conn, Sql
from offload.store.models import Filters
from offload.store.search.memory import postings
from offload.store.search.memory.resident import ResidentIndex
from offload.store.store import Store
from wordcorpus import WORDS, built_view, index_term

QUESTIONS = (
    "When did Caroline go to the lake?",
    "What does Melanie paint?",
    "support group adoption",
    "violin school friends",
    "Where is the museum by the river?",
    "dog",
)


def _fill(store: Store, n: int = 150, seed: int = 5) -> None:
    rnd = random.Random(seed)
    for i in range(n):
        speaker = ("Caroline", "Melanie")[i % 2]
        words = " ".join(rnd.choices(WORDS, k=rnd.randint(2, 25)))
        store.put(f"{speaker} said, {words} n{i}", scope=f"chat{i % 2}")


def _open(path: Path, resident_mb: int = 64) -> Store:
    return Store(path, counter=EstimateCounter(), resident_mb=resident_mb)


def _page(store: Store, text: str, **kw: object) -> list[tuple[int, int | None, float]]:
    return [(h.entry.id, h.chunk_id, h.score) for h in store.search(text, limit=10, **kw)]  # type: ignore[arg-type]


def test_pages_are_those_of_the_sql_path(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with _open(path) as res, _open(path, 0) as sql:
        _fill(res)
        built_view(res)
        for q in QUESTIONS:
            assert _page(res, q) == _page(sql, q)
            assert _page(res, q, scope="chat1") == _page(sql, q, scope="chat1")
            assert _page(res, q, offset=3) == _page(sql, q, offset=3)


def test_a_put_after_the_build_is_searched_through_the_index(tmp_path: Path) -> None:
    with _open(tmp_path / "s.db") as store:
        _fill(store, 40)
        before = built_view(store)
        new = store.put("Melanie said, the zebrafinch sang", scope="chat0").entry.id
        view = store.resident.view(store.conn)  # type: ignore[union-attr]
        assert view is not None and view.rows == before.rows + 1
        assert view.df([index_term("zebrafinch")]) == {index_term("zebrafinch"): 1}
        assert [h.entry.id for h in store.search("zebrafinch")] == [new]


def test_a_forgotten_entrys_chunks_leave_the_index(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with _open(path) as store, _open(path, 0) as sql:
        _fill(store, 40)
        gone = store.put("Caroline said, a quokka visited", scope="chat0")
        built_view(store)
        store.forget(gone.entry.ref)
        # the chunks changed under the index: this search is answered the SQL way
        assert store.resident.view(store.conn) is None  # type: ignore[union-attr]
        assert store.search("quokka") == []
        view = built_view(store)
        assert view.df([index_term("quokka")]) == {index_term("quokka"): 0}
        assert _page(store, "Caroline lake") == _page(sql, "Caroline lake")


def test_a_reused_chunk_id_is_never_scored_with_its_old_terms(tmp_path: Path) -> None:
    with _open(tmp_path / "s.db") as store:
        _fill(store, 20)
        last = store.put("Caroline said, a quokka visited", scope="chat0")
        built_view(store)
        conn = store.conn
        old_chunk = conn.execute(Sql("SELECT max(id) FROM chunks")).fetchone()[0]
        store.forget(last.entry.ref)
        new = store.put("Melanie said, an axolotl swam", scope="chat0").entry.id
        assert conn.execute(Sql("SELECT max(id) FROM chunks")).fetchone()[0] == old_chunk  # reused
        assert store.search("quokka") == []
        view = built_view(store)
        _held, counts, _lengths = view.count_matrix(
            [old_chunk], [index_term("quokka"), index_term("axolotl")]
        )
        assert counts.tolist() == [[0, 1]]
        assert store.search("quokka") == []
        assert [h.entry.id for h in store.search("axolotl")] == [new]


def test_searches_take_the_sql_path_while_the_index_builds(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    gate = threading.Event()
    with _open(path, 0) as store, _open(path, 0) as sql:
        _fill(store, 60)

        def slow_connect() -> Conn:
            gate.wait(60)
            return sqlite3.connect(str(path), check_same_thread=False)

        store.resident = ResidentIndex(slow_connect, max_bytes=64 << 20)
        try:
            for q in QUESTIONS:
                assert _page(store, q) == _page(sql, q)  # the first starts the build
                assert store.resident.view(store.conn) is None
        finally:
            gate.set()
        assert store.resident.built.wait(60)
        assert store.resident.view(store.conn) is not None
        assert [_page(store, q) for q in QUESTIONS] == [_page(sql, q) for q in QUESTIONS]


def test_an_index_over_its_memory_bound_is_not_built_nor_retried(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with _open(path, 0) as store, _open(path, 0) as sql:
        _fill(store, 30)
        store.resident = idx = ResidentIndex(store._own_conn, max_bytes=100)
        idx.start()
        assert idx.built.wait(60)
        assert idx.report is not None and "bound" in idx.report.refused
        assert _page(store, "Caroline lake") == _page(sql, "Caroline lake")
        assert idx.built.is_set()  # no second build was started


def test_an_index_that_grows_past_its_memory_bound_is_dropped_and_stays_off(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    with _open(path, 0) as store, _open(path, 0) as sql:
        _fill(store, 30)
        store.resident = idx = ResidentIndex(store._own_conn, max_bytes=1 << 20)
        built_view(store)
        held = store.resident.view(store.conn)
        assert held is not None
        idx._max_bytes = held.nbytes + 1  # the next rows pass it
        store.put("Melanie said, the zebrafinch sang " * 40, scope="chat0")
        assert idx.view(store.conn) is None
        assert idx.report is not None and "bound" in idx.report.refused
        store.put("Caroline said, the lake froze", scope="chat1")
        assert idx.view(store.conn) is None  # not rebuilt while the store only grows
        assert idx.built.is_set()
        for q in ("zebrafinch", "Caroline lake"):
            assert _page(store, q) == _page(sql, q)


def test_a_chunk_without_cached_counts_keeps_search_on_the_sql_path(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with _open(path) as store, _open(path, 0) as sql:
        _fill(store, 30)
        store.conn.execute(Sql("UPDATE chunks SET term_counts = NULL WHERE id = 3"))
        assert store.resident is not None
        store.resident.start()
        assert store.resident.built.wait(60)
        assert store.resident.report is not None and store.resident.report.refused
        assert store.resident.view(store.conn) is None
        assert _page(store, "Caroline lake") == _page(sql, "Caroline lake")


def test_views_swapped_under_concurrent_searches_and_writes_stay_whole(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with _open(path) as store:
        _fill(store, 40)
        built_view(store)
        idx = store.resident
        assert idx is not None
        start = threading.Barrier(5)
        seen: list[postings.View] = []
        errors: list[BaseException] = []

        def searcher() -> None:
            start.wait()
            try:
                for q in QUESTIONS * 4:
                    store.search(q, limit=5)
                    v = idx.view(store.conn)
                    if v is not None:
                        seen.append(v)
            except BaseException as exc:  # noqa: BLE001 - reported to the test thread
                errors.append(exc)

        def writer() -> None:
            start.wait()
            for i in range(30):
                store.put(f"Melanie said, concurrent note {i}", scope="chat0")

        threads = [threading.Thread(target=searcher) for _ in range(4)]
        threads.append(threading.Thread(target=writer))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        for v in seen:  # every view is one whole: its rows are its segments' and distinct
            ids = [i for s in v.segments for i in s.ids.tolist()]
            assert len(ids) == len(set(ids)) == v.rows
        final = idx.view(store.conn)
        assert final is not None
        assert (
            final.rows
            == store.conn.execute(
                Sql(
                    "SELECT count(*) FROM chunks",
                    "SELECT CASE WHEN c.reltuples >= 100000 THEN c.reltuples::bigint ELSE (SELECT count(*) FROM chunks) END AS n FROM pg_class c WHERE c.oid = 'chunks'::regclass",
                )
            ).fetchone()[0]
        )
        sql = _open(path, 0)
        with sql:
            assert _page(store, "concurrent note", filters=Filters()) == _page(
                sql, "concurrent note", filters=Filters()
            )


def test_a_closed_store_builds_no_index(tmp_path: Path) -> None:
    store = _open(tmp_path / "s.db")
    _fill(store, 5)
    store.close()
    assert store.resident is not None
    store.resident.start()
    assert store.resident.view(store.conn) is None


def test_the_memory_setting_must_not_be_negative() -> None:
    with pytest.raises(ConfigError):
        SearchSettings(resident_mb=-1)


def test_a_long_tail_is_merged_and_folded_into_the_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from offload.store.search.memory import resident

    monkeypatch.setattr(resident, "TAIL_SEGMENTS", 2)
    path = tmp_path / "s.db"
    with _open(path) as store, _open(path, 0) as sql:
        _fill(store, 20)
        built_view(store)
        idx = store.resident
        assert idx is not None
        for i in range(5):  # a segment a search: merged past two
            store.put(f"Caroline said, tail note {i}", scope="chat1")
            view = idx.view(store.conn)
            assert view is not None and len(view.segments) <= 3
        monkeypatch.setattr(resident, "TAIL_ROWS_INLINE", 1)
        store.put("Melanie said, one more tail note", scope="chat1")
        store.put("Melanie said, and another", scope="chat1")
        assert idx.view(store.conn) is not None  # passes the bound: folded in the background
        assert idx.built.wait(60)
        view = idx.view(store.conn)
        assert view is not None and len(view.segments) == 1
        assert (
            view.rows
            == store.conn.execute(
                Sql(
                    "SELECT count(*) FROM chunks",
                    "SELECT CASE WHEN c.reltuples >= 100000 THEN c.reltuples::bigint ELSE (SELECT count(*) FROM chunks) END AS n FROM pg_class c WHERE c.oid = 'chunks'::regclass",
                )
            ).fetchone()[0]
        )
        assert _page(store, "tail note") == _page(sql, "tail note")


def test_an_idle_store_lets_its_index_go_and_answers_the_same_pages_meanwhile(
    tmp_path: Path,
) -> None:
    with Store(
        tmp_path / "s.db", counter=EstimateCounter(), resident_mb=64, resident_idle_s=1e-9
    ) as store:
        _fill(store)
        built_view(store)
        before = {q: _page(store, q) for q in QUESTIONS}
        idx = store.resident
        assert idx is not None and idx.held_bytes > 0
        store.release_idle()  # no search for longer than resident_idle_s
        assert idx.held_bytes == 0
        # the first search after it takes the SQL path (and starts a rebuild)
        assert {q: _page(store, q) for q in QUESTIONS} == before
        assert idx.built.wait(60)
        assert {q: _page(store, q) for q in QUESTIONS} == before
        assert idx.held_bytes > 0


def test_an_idle_store_lets_go_of_the_bodies_it_read_and_the_words_it_analysed(
    tmp_path: Path,
) -> None:
    with Store(
        tmp_path / "s.db", counter=EstimateCounter(), resident_mb=64, resident_idle_s=1e-9
    ) as store:
        _fill(store, 20)
        built_view(store)  # the index built (in the background): its arrays are held too
        pages = {q: _page(store, q) for q in QUESTIONS}
        assert store.body_cache.held_chars > 0 and analysis.cached_analyses() > 0
        held = store.stats()["search_memory_bytes"]
        assert held > store.body_cache.held_chars > 0  # and the index's arrays
        store.release_idle()
        assert store.body_cache.held_chars == 0 and analysis.cached_analyses() == 0
        assert store.stats()["search_memory_bytes"] == 0
        assert {q: _page(store, q) for q in QUESTIONS} == pages  # read and analysed again


def test_a_store_that_keeps_its_copies_does_not_let_the_index_go(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter(), resident_mb=64) as store:
        _fill(store, 20)
        built_view(store)
        store.search("dog")
        store.release_idle()
        assert store.resident is not None and store.resident.held_bytes > 0
