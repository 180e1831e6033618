"""PostgreSQL's chunk rows since a token (store/search/memory/pgchunks.py), on a real server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from offload.core.tokens import EstimateCounter
from offload.store.backend import Sql
from offload.store.search.memory import pgchunks
from offload.store.store import Store
from wordcorpus import built_view, index_term

pytestmark = pytest.mark.slow

_CHUNK = (
    'INSERT INTO chunks (block_id, start_line, end_line, start, "end", term_counts) '
    "VALUES (0, 1, 1, 0, 1, %s) RETURNING id"
)


@pytest.fixture
def store(pg_database: str) -> Iterator[Store]:
    with Store(pg_database, counter=EstimateCounter()) as s:
        yield s


def _ids(rows: list[tuple[int, str]]) -> list[int]:
    return [cid for cid, _ in rows]


def _generation(store: Store) -> int:
    return int(store.conn.execute(Sql("SELECT value FROM chunk_generation")).fetchone()[0])


def test_a_full_read_gives_every_chunk_with_its_counts_and_a_watermark(store: Store) -> None:
    store.put("alpha bravo\n")
    store.put_many([f"charlie {i}\n" for i in range(3)])
    generation, watermark, rows, keep = pgchunks.read_rows(store.conn, None)
    assert len(rows) == 4 and _ids(rows) == sorted(_ids(rows))
    assert json.loads(rows[0][1])[""] == 2  # the length leads
    assert generation == _generation(store) and watermark > 0 and keep == []


def test_a_chunk_committed_after_a_larger_id_was_read_is_still_read_once(
    store: Store, pg_database: str
) -> None:
    store.put("first row\n")
    _, watermark, _, keep = pgchunks.read_rows(store.conn, None)
    with psycopg.connect(pg_database) as slow, psycopg.connect(pg_database) as quick:
        # the slow writer draws the smaller id, the quick one commits a larger one first
        early = slow.execute(_CHUNK, ('{"":1,"slow":1}',)).fetchone()
        late = quick.execute(_CHUNK, ('{"":1,"quick":1}',)).fetchone()
        assert early is not None and late is not None and early[0] < late[0]
        quick.commit()
        _, watermark, rows, keep = pgchunks.read_rows(store.conn, watermark, keep)
        assert _ids(rows) == [late[0]]
        slow.commit()
    _, watermark, rows, keep = pgchunks.read_rows(store.conn, watermark, keep)
    assert _ids(rows) == [early[0]]  # found, and the quick one not handed out again
    _, _, rows, _ = pgchunks.read_rows(store.conn, watermark, keep)
    assert rows == []


def test_rows_of_an_open_transaction_are_read_after_it_commits_and_never_if_it_rolls_back(
    store: Store, pg_database: str
) -> None:
    _, watermark, _, keep = pgchunks.read_rows(store.conn, None)
    with psycopg.connect(pg_database) as a, psycopg.connect(pg_database) as b:
        kept: Any = a.execute(_CHUNK, ('{"":1,"kept":1}',)).fetchone()
        b.execute(_CHUNK, ('{"":1,"dropped":1}',))
        _, watermark, rows, keep = pgchunks.read_rows(store.conn, watermark, keep)
        assert rows == []
        b.rollback()
        a.commit()
    _, _, rows, _ = pgchunks.read_rows(store.conn, watermark, keep)
    assert _ids(rows) == [kept[0]]


def test_a_deleted_or_rewritten_chunk_moves_the_generation_and_a_statement_of_no_rows_does_not(
    store: Store,
) -> None:
    e = store.put("to be forgotten\n").entry
    store.put("to be kept\n")
    before = _generation(store)
    store.conn.execute(Sql("DELETE FROM chunks WHERE id < 0"))
    store.conn.execute(Sql("UPDATE chunks SET term_counts = term_counts WHERE id < 0"))
    assert _generation(store) == before
    store.forget(e.ref)
    gone = _generation(store)
    assert gone > before
    store.conn.execute(Sql("UPDATE chunks SET term_counts = term_counts"))
    assert _generation(store) > gone


def test_a_full_read_in_pages_gives_each_row_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.put_many([f"row number {i}\n" for i in range(7)])
    monkeypatch.setattr(pgchunks, "PAGE", 2)
    _, _, rows, _ = pgchunks.read_rows(store.conn, None)
    every = [int(r[0]) for r in store.conn.execute(Sql("SELECT id FROM chunks ORDER BY id"))]
    assert _ids(rows) == every


def test_an_old_store_gets_the_watermark_column_and_lengths_leading_its_counts(
    store: Store, pg_database: str
) -> None:
    store.put("old words here\n")
    conn = store.conn
    # what a store had before these migrations: counts without the length, no watermark
    conn.execute(Sql('UPDATE chunks SET term_counts = \'{"old":1,"words":2}\''))
    conn.execute(Sql("DROP TABLE chunk_generation"))
    conn.execute(Sql("DROP FUNCTION offload_chunk_generation() CASCADE"))
    conn.execute(Sql("ALTER TABLE chunks DROP COLUMN changed"))
    conn.execute(
        Sql(
            "DELETE FROM _migrations WHERE name IN ('pg_chunk_term_counts_length', 'pg_chunk_changes')"
        )
    )
    with Store(pg_database, counter=EstimateCounter()) as again:
        _, watermark, rows, _ = pgchunks.read_rows(again.conn, None)
        assert [json.loads(t) for _, t in rows] == [{"": 3, "old": 1, "words": 2}]
        assert list(json.loads(rows[0][1])) == ["", "old", "words"]  # the length first
        added = again.put("new words\n").entry
        _, _, rows, _ = pgchunks.read_rows(again.conn, watermark)
        assert len(rows) == 1 and json.loads(rows[0][1])["new"] == 1
        assert added.id


def _resident(url: str) -> Store:
    return Store(url, counter=EstimateCounter(), resident_mb=64)


def test_two_machines_see_each_others_writes_in_their_in_memory_indexes(pg_database: str) -> None:
    with _resident(pg_database) as one, _resident(pg_database) as two:
        one.put("Caroline said, the lake was calm", scope="chat")
        two.put("Melanie said, the river was high", scope="chat")
        built_view(one), built_view(two)
        mine = one.put("Caroline said, a zebrafinch sang", scope="chat").entry
        theirs = two.put("Melanie said, a quokka visited", scope="chat").entry
        for store in (one, two):
            view = store.resident.view(store.conn)  # type: ignore[union-attr]
            assert view is not None and view.rows == 4
            assert view.df([index_term("zebrafinch"), index_term("quokka")]) == {
                index_term("zebrafinch"): 1,
                index_term("quokka"): 1,
            }
            assert [h.entry.id for h in store.search("zebrafinch")] == [mine.id]
            assert [h.entry.id for h in store.search("quokka")] == [theirs.id]


def test_a_chunk_committed_out_of_order_reaches_the_in_memory_index(
    pg_database: str,
) -> None:
    with _resident(pg_database) as store:
        store.put("first row\n")
        built_view(store)
        with psycopg.connect(pg_database) as slow, psycopg.connect(pg_database) as quick:
            slow.execute(_CHUNK, ('{"":1,"slowword":1}',))
            quick.execute(_CHUNK, ('{"":1,"quickword":1}',))
            quick.commit()
            assert store.resident.view(store.conn).df(["slowword", "quickword"]) == {  # type: ignore[union-attr]
                "slowword": 0,
                "quickword": 1,
            }
            slow.commit()
        view = store.resident.view(store.conn)  # type: ignore[union-attr]
        assert view is not None and view.rows == 3
        assert view.df(["slowword", "quickword"]) == {"slowword": 1, "quickword": 1}


def test_a_forgotten_entry_leaves_the_in_memory_index_after_a_rebuild(pg_database: str) -> None:
    with _resident(pg_database) as store:
        store.put("Caroline said, the lake was calm")
        gone = store.put("Caroline said, a quokka visited").entry
        built_view(store)
        store.forget(gone.ref)
        assert store.resident.view(store.conn) is None  # type: ignore[union-attr]
        assert store.search("quokka") == []
        assert built_view(store).df([index_term("quokka")]) == {index_term("quokka"): 0}


def test_with_the_in_memory_index_a_search_reads_no_term_counts_from_the_server(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from offload.store.postgres import pgconn, pgsql

    with _resident(pg_database) as store:
        store.put_many([f"Caroline said, the lake number {i}" for i in range(20)])
        tagged = store.put("Melanie said, hello", topic="zuluword").entry
        built_view(store)
        ran: list[str] = []
        real = pgconn.PgConn.execute

        def counted(self: pgconn.PgConn, sql: Sql, parameters: Any = ()) -> pgconn.PgCursor:
            ran.append(sql)
            return real(self, sql, parameters)

        monkeypatch.setattr(pgconn.PgConn, "execute", counted)
        assert len(store.search("When did Caroline see the lake?")) == 5
        assert [h.entry.id for h in store.search("zuluword")] == [tagged.id]  # metadata only
    assert pgsql.search_stats_sql() not in ran
    assert ran.count(pgsql.META_TERMS) == 2  # which terms the metadata holds: one a search
