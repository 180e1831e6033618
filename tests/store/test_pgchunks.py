"""PostgreSQL's chunk rows since a token (store/pgchunks.py), on a real server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from offload.core.tokens import EstimateCounter
from offload.store import pgchunks
from offload.store.store import Store

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
    return int(store.conn.execute("SELECT value FROM chunk_generation").fetchone()[0])


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
    store.conn.execute("DELETE FROM chunks WHERE id < 0")
    store.conn.execute("UPDATE chunks SET term_counts = term_counts WHERE id < 0")
    assert _generation(store) == before
    store.forget(e.ref)
    gone = _generation(store)
    assert gone > before
    store.conn.execute("UPDATE chunks SET term_counts = term_counts")
    assert _generation(store) > gone


def test_a_full_read_in_pages_gives_each_row_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.put_many([f"row number {i}\n" for i in range(7)])
    monkeypatch.setattr(pgchunks, "PAGE", 2)
    _, _, rows, _ = pgchunks.read_rows(store.conn, None)
    every = [int(r[0]) for r in store.conn.execute("SELECT id FROM chunks ORDER BY id")]
    assert _ids(rows) == every


def test_an_old_store_gets_the_watermark_column_and_lengths_leading_its_counts(
    store: Store, pg_database: str
) -> None:
    store.put("old words here\n")
    conn = store.conn
    # what a store had before these migrations: counts without the length, no watermark
    conn.execute('UPDATE chunks SET term_counts = \'{"old":1,"words":2}\'')
    conn.execute("DROP TABLE chunk_generation")
    conn.execute("DROP FUNCTION offload_chunk_generation() CASCADE")
    conn.execute("ALTER TABLE chunks DROP COLUMN changed")
    conn.execute(
        "DELETE FROM _migrations WHERE name IN ('pg_chunk_term_counts_length', 'pg_chunk_changes')"
    )
    with Store(pg_database, counter=EstimateCounter()) as again:
        _, watermark, rows, _ = pgchunks.read_rows(again.conn, None)
        assert [json.loads(t) for _, t in rows] == [{"": 3, "old": 1, "words": 2}]
        assert list(json.loads(rows[0][1])) == ["", "old", "words"]  # the length first
        added = again.put("new words\n").entry
        _, _, rows, _ = pgchunks.read_rows(again.conn, watermark)
        assert len(rows) == 1 and json.loads(rows[0][1])["new"] == 1
        assert added.id
