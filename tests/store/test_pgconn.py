"""PgConn's round-trip savings keep a put's results: a new block with its chunks in one
statement, and the dedup look-up sent with BEGIN (store/pgconn.py), on a real server."""

from __future__ import annotations

from typing import Any

import pytest

from offload.config import StoreSettings
from offload.core.hashing import sha256_hex
from offload.core.tokens import EstimateCounter
from offload.errors import StoreError
from offload.store import db
from offload.store.pgconn import PgConn
from offload.store.store import Store

_BODY = "\n".join(f"line {i}: the loader read shard{i % 7} in {i * 3} ms" for i in range(300))


def _open(url: str) -> Store:
    return Store(url, StoreSettings(), counter=EstimateCounter())


def _pg(store: Store) -> PgConn:
    conn = store.conn
    assert isinstance(conn, PgConn)
    return conn


def _chunks(store: Store, digest: str) -> list[Any]:
    return store.conn.execute(
        "SELECT c.id, c.start, c.term_counts FROM chunks c JOIN blocks b ON b.id = c.block_id "
        "WHERE b.hash = ? ORDER BY c.id",
        (digest,),
    ).fetchall()


def test_a_new_block_is_stored_with_its_chunks_in_order_and_searchable(pg_database: str) -> None:
    with _open(pg_database) as store:
        e = store.put(_BODY, scope="s").entry
        found = _chunks(store, e.block_hash)
        assert len(found) > 3  # several chunks, so their order means something
        assert [r["start"] for r in found] == sorted(r["start"] for r in found)
        search_rows = store.conn.execute(
            "SELECT count(*) FROM search_body WHERE rowid IN (SELECT value FROM json_each(?))",
            (str([int(r["id"]) for r in found]),),
        ).fetchone()[0]
        assert search_rows == len(found)
        assert [h.entry.id for h in store.search("shard3 loader", scope="s")] == [e.id]


def test_a_block_stored_before_is_not_indexed_again(pg_database: str) -> None:
    with _open(pg_database) as store:
        first = store.put(_BODY, scope="one").entry
        before = _chunks(store, first.block_hash)
        second = store.put(_BODY, scope="two").entry  # the same block, another entry
        assert second.id != first.id and second.block_hash == first.block_hash
        assert _chunks(store, first.block_hash) == before
        assert {h.entry.id for h in store.search("shard3 loader", limit=10)} == {
            first.id,
            second.id,
        }


def test_an_original_stored_unindexed_is_indexed_when_put_on_its_own(pg_database: str) -> None:
    with _open(pg_database) as store:
        store.put(_BODY, body="a short summary of the loader log", scope="lossy")
        digest = sha256_hex(_BODY.encode())
        assert _chunks(store, digest) == []  # kept as the original, not indexed
        e = store.put(_BODY, scope="whole").entry
        assert e.block_hash == digest and _chunks(store, digest)
        assert e.id in {h.entry.id for h in store.search("shard3 loader", scope="whole")}


def test_the_read_sent_with_begin_answers_only_the_same_next_statement(
    pg_database: str,
) -> None:
    with _open(pg_database) as store:
        conn = _pg(store)
        read = ("SELECT value FROM state WHERE namespace = ? AND key = ?", ("t", "k"))
        with db.write_tx(conn, ["t\0k"], [read]) as tx:
            assert tx.execute(*read).fetchall() == []  # answered by the early read
        with db.write_tx(conn, ["t\0k"], [read]) as tx:
            # another statement runs first: the early read is stale and must not answer
            tx.execute(
                "INSERT INTO state (namespace, key, value, updated) VALUES ('t', 'k', 'v', 0)"
            )
            assert [r[0] for r in tx.execute(*read).fetchall()] == ["v"]
        with db.write_tx(conn, ["t\0k"], [read]) as tx:
            assert [r[0] for r in tx.execute(*read).fetchall()] == ["v"]
            # asked again, it runs again (the early rows answered once)
            tx.execute("UPDATE state SET value = 'w' WHERE namespace = 't' AND key = 'k'")
            assert [r[0] for r in tx.execute(*read).fetchall()] == ["w"]
        other = ("SELECT value FROM state WHERE namespace = ? AND key = ?", ("t", "other"))
        with db.write_tx(conn, ["t\0k"], [read, other]) as tx:
            # a different read (other parameters) is run, not answered by the early one
            assert [r[0] for r in tx.execute(*read).fetchall()] == ["w"]


def test_a_repeated_put_finds_its_entry_through_the_early_read(pg_database: str) -> None:
    with _open(pg_database) as a, _open(pg_database) as b:
        first = a.put(_BODY, scope="s", label="log")
        again = b.put(_BODY, scope="s", pinned=True)
        assert first.created and not again.created
        assert again.entry.id == first.entry.id and again.entry.pinned
        assert again.entry.labels == ("log",)


def test_statements_sent_with_begin_run_in_order_inside_the_transaction(
    pg_database: str,
) -> None:
    with _open(pg_database) as store:
        conn = _pg(store)
        write = (
            "INSERT INTO state (namespace, key, value, updated) VALUES (?, ?, ?, 0)",
            ("t", "a", "1"),
        )
        read = ("SELECT value FROM state WHERE namespace = ? ORDER BY key", ("t",))
        with db.write_tx(conn, ["t\0a"], [write, read]) as tx:
            assert [r[0] for r in tx.execute(*read).fetchall()] == ["1"]  # saw the write
        with pytest.raises(StoreError), db.write_tx(conn, ["t\0a"], [write, read]):
            pass  # the same key again: the transaction fails at its BEGIN
        with db.write_tx(conn, ["t\0b"], [read]) as tx:
            # nothing of the failed one was kept, and the connection works on
            assert [r[0] for r in tx.execute(*read).fetchall()] == ["1"]


def test_values_sent_with_begin_are_read_back_as_written(pg_database: str) -> None:
    odd = "it's 100 % \\ \"quoted\" é 日本 $$ ; -- E'x' \\n"
    with _open(pg_database) as store:
        conn = _pg(store)
        write = ("INSERT INTO state (namespace, key, value, updated) VALUES (?, ?, ?, 0)",)
        read = ("SELECT key, value FROM state WHERE namespace = ? AND key = ?", ("t", odd))
        with db.write_tx(conn, ["t\0odd"], [(*write, ("t", odd, odd)), read]) as tx:
            assert [tuple(r) for r in tx.execute(*read).fetchall()] == [(odd, odd)]
        first = store.put(f"{_BODY}\n{odd}", scope=odd)
        again = store.put(f"{_BODY}\n{odd}", scope=odd)
        assert first.created and not again.created and again.entry.id == first.entry.id
        assert [h.entry.id for h in store.search("quoted", scope=odd)] == [first.entry.id]
