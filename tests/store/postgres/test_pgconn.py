"""PgConn's round-trip savings keep a put's results: a new block with its chunks in one
statement, and the dedup look-up sent with BEGIN (store/postgres/pgconn.py), on a real server."""

from __future__ import annotations

from typing import Any

import pytest

from offload.config import StoreSettings
from offload.core.hashing import sha256_hex
from offload.core.text import analysis
from offload.core.tokens import EstimateCounter
from offload.errors import StoreError
from offload.store.backend import Sql
from offload.store.postgres.pgconn import PgConn
from offload.store.sqlite import db
from offload.store.store import Store
from offload.store.write import index

_BODY = "\n".join(f"line {i}: the loader read shard{i % 7} in {i * 3} ms" for i in range(300))


def _open(url: str) -> Store:
    return Store(url, StoreSettings(), counter=EstimateCounter())


def _pg(store: Store) -> PgConn:
    conn = store.conn
    assert isinstance(conn, PgConn)
    return conn


def _chunks(store: Store, digest: str) -> list[Any]:
    return store.conn.execute(
        Sql(
            "SELECT c.id, c.start, c.term_counts FROM chunks c JOIN blocks b ON b.id = c.block_id "
            "WHERE b.hash = ? ORDER BY c.id"
        ),
        (digest,),
    ).fetchall()


def _count_trips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gains an item for each statement sent to the server (PgConn._run)."""
    trips: list[int] = []
    real = PgConn._run

    def counted(self: PgConn, fn: Any) -> Any:
        trips.append(1)
        return real(self, fn)

    monkeypatch.setattr(PgConn, "_run", counted)
    return trips


def _count_analyses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A list that gains an item each time a body is analysed (index.prepare)."""
    analysed: list[str] = []
    real_prepare = index.prepare

    def prepare(*args: Any, **kwargs: Any) -> index.PreparedIndex:
        analysed.append("x")
        return real_prepare(*args, **kwargs)

    monkeypatch.setattr(index, "prepare", prepare)
    return analysed


def test_a_new_block_is_stored_with_its_chunks_in_order_and_searchable(pg_database: str) -> None:
    with _open(pg_database) as store:
        e = store.put(_BODY, scope="s").entry
        found = _chunks(store, e.block_hash)
        assert len(found) > 3  # several chunks, so their order means something
        assert [r["start"] for r in found] == sorted(r["start"] for r in found)
        search_rows = store.conn.execute(
            Sql(
                "SELECT count(*) FROM search_body WHERE rowid IN (SELECT value FROM json_each(?))",
                "SELECT count(*) FROM search_body WHERE rowid IN (SELECT value FROM offload_ids(%s))",
            ),
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


# five lines a chunk: 60 chunks of ~210 characters, so a put sends them in two statements
# (index.BATCH_CHARS), and the tests below in three, of ~24 chunks
_CHARS = 5000
_SMALL_CHUNKS = StoreSettings(chunk_lines=5)


def test_a_big_block_sent_in_batches_keeps_every_chunk_as_analysed_at_once(
    pg_database: str,
) -> None:
    with Store(pg_database, _SMALL_CHUNKS, counter=EstimateCounter()) as store:
        assert index.BATCH_CHARS < len(_BODY) <= 3 * index.BATCH_CHARS
        e = store.put(_BODY + "\nthe very last line names zanzibar", scope="s").entry
        found = _chunks(store, e.block_hash)
        whole = index.prepare(
            _BODY + "\nthe very last line names zanzibar", 5, _SMALL_CHUNKS.chunk_chars
        ).chunks
        assert [(r["start"], r["term_counts"]) for r in found] == [
            (c.start, c.term_counts) for c in whole
        ]
        assert [int(r["id"]) for r in found] == sorted(int(r["id"]) for r in found)
        ids = str([int(r["id"]) for r in found])
        assert store.conn.execute(
            Sql(
                "SELECT count(*) FROM search_body WHERE rowid IN (SELECT value FROM json_each(?))",
                "SELECT count(*) FROM search_body WHERE rowid IN (SELECT value FROM offload_ids(%s))",
            ),
            (ids,),
        ).fetchone()[0] == len(whole)
        # a word of the last batch's last chunk, and one of the first batch's first
        assert [h.entry.id for h in store.search("zanzibar", scope="s")] == [e.id]
        assert [h.entry.id for h in store.search("shard3 loader", scope="s")] == [e.id]
        again = store.put(_BODY + "\nthe very last line names zanzibar", scope="t").entry
        assert again.block_hash == e.block_hash and _chunks(store, e.block_hash) == found


def _mapped(store: Store, entry_id: int) -> list[tuple[int, int]]:
    rows = store.conn.execute(
        Sql("SELECT chunk_id, own FROM entry_chunks WHERE entry_id = ? ORDER BY chunk_id"),
        (entry_id,),
    ).fetchall()
    return [(int(r[0]), int(r[1])) for r in rows]


def test_an_entry_sent_amid_its_streamed_chunks_is_mapped_to_every_one(pg_database: str) -> None:
    with Store(pg_database, _SMALL_CHUNKS, counter=EstimateCounter()) as store:
        e = store.put(_BODY, scope="s", topic="loader").entry
        assert e == store.get(e.id)  # the entry returned is the one stored
        own = [(int(r["id"]), 1) for r in _chunks(store, e.block_hash)]
        assert len(own) == 60 and _mapped(store, e.id) == own  # every batch's chunks
        # a lossy put: the body streamed with the entry, the original (indexed) after it
        original = _BODY.replace("loader", "fetcher")
        lossy = store.put(original, body=_BODY + "\nsummed up", index_original=True).entry
        kept = [(int(r["id"]), 0) for r in _chunks(store, sha256_hex(original.encode()))]
        body = [(int(r["id"]), 1) for r in _chunks(store, lossy.block_hash)]
        assert (len(kept), len(body)) == (60, 61)
        assert _mapped(store, lossy.id) == sorted(body + kept)
        assert lossy.id in {h.entry.id for h in store.search("fetcher shard3")}


def test_the_statement_after_a_stored_block_still_runs_and_gives_its_id(
    pg_database: str,
) -> None:
    with Store(pg_database, _SMALL_CHUNKS, counter=EstimateCounter()) as store:
        conn = _pg(store)
        first = store.put(_BODY, scope="s").entry
        prepared = index.prepare(_BODY, 5, _SMALL_CHUNKS.chunk_chars, analyse_chars=_CHARS)
        head, *later = map(index.chunk_rows, prepared.batches(_CHARS))
        block = (first.block_hash, len(_BODY), 300, "raw", _BODY.encode(), 0.0)
        then = (Sql("INSERT INTO labels (label, entry_id) VALUES (?, ?)"), ("l", first.id))
        with db.write_tx(conn) as tx:
            assert isinstance(tx, PgConn)
            got = tx.insert_indexed_block(block, head, iter(later), then=then)
        assert got.block_id is None and got.then_id is None  # stored before; no id to give
        assert store.resolve("l").id == first.id
        assert len(_chunks(store, first.block_hash)) == 60  # nothing indexed twice


def test_a_later_batch_the_server_rejects_rolls_the_whole_block_back(pg_database: str) -> None:
    with Store(pg_database, _SMALL_CHUNKS, counter=EstimateCounter()) as store:
        conn = _pg(store)
        prepared = index.prepare(_BODY, 5, _SMALL_CHUNKS.chunk_chars, analyse_chars=_CHARS)
        first, *later = map(index.chunk_rows, prepared.batches(_CHARS))
        broken = [(None, *later[-1][0][1:]), *later[-1][1:]]  # a chunk without a line
        block = (sha256_hex(_BODY.encode()), len(_BODY), 300, "raw", _BODY.encode(), 0.0)
        with pytest.raises(StoreError), db.write_tx(conn) as tx:
            assert isinstance(tx, PgConn)
            tx.insert_indexed_block(block, first, iter([later[0], broken]))
        assert _chunks(store, block[0]) == []
        assert (
            store.conn.execute(
                Sql("SELECT count(*) FROM blocks WHERE hash = ?"), (block[0],)
            ).fetchone()[0]
            == 0
        )
        # the connection went back to the pool in a working state
        e = store.put(_BODY, scope="s").entry
        assert len(_chunks(store, e.block_hash)) == 60


def test_the_read_sent_with_begin_answers_only_the_same_next_statement(
    pg_database: str,
) -> None:
    with _open(pg_database) as store:
        conn = _pg(store)
        read = (Sql("SELECT value FROM state WHERE namespace = ? AND key = ?"), ("t", "k"))
        with db.write_tx(conn, ["t\0k"], [read]) as tx:
            assert tx.execute(*read).fetchall() == []  # answered by the early read
        with db.write_tx(conn, ["t\0k"], [read]) as tx:
            # another statement runs first: the early read is stale and must not answer
            tx.execute(
                Sql("INSERT INTO state (namespace, key, value, updated) VALUES ('t', 'k', 'v', 0)")
            )
            assert [r[0] for r in tx.execute(*read).fetchall()] == ["v"]
        with db.write_tx(conn, ["t\0k"], [read]) as tx:
            assert [r[0] for r in tx.execute(*read).fetchall()] == ["v"]
            # asked again, it runs again (the early rows answered once)
            tx.execute(Sql("UPDATE state SET value = 'w' WHERE namespace = 't' AND key = 'k'"))
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
            Sql("INSERT INTO state (namespace, key, value, updated) VALUES (?, ?, ?, 0)"),
            ("t", "a", "1"),
        )
        read = (Sql("SELECT value FROM state WHERE namespace = ? ORDER BY key"), ("t",))
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
        write = (Sql("INSERT INTO state (namespace, key, value, updated) VALUES (?, ?, ?, 0)"),)
        read = (Sql("SELECT key, value FROM state WHERE namespace = ? AND key = ?"), ("t", odd))
        with db.write_tx(conn, ["t\0odd"], [(*write, ("t", odd, odd)), read]) as tx:
            assert [tuple(r) for r in tx.execute(*read).fetchall()] == [(odd, odd)]
        first = store.put(f"{_BODY}\n{odd}", scope=odd)
        again = store.put(f"{_BODY}\n{odd}", scope=odd)
        assert first.created and not again.created and again.entry.id == first.entry.id
        assert [h.entry.id for h in store.search("quoted", scope=odd)] == [first.entry.id]


def test_reads_run_ahead_answer_the_same_statements_once_until_another_runs(
    pg_database: str,
) -> None:
    with _open(pg_database) as store, _open(pg_database) as writer:
        conn = _pg(store)
        store.put("the loader read shard1", scope="s")
        count = (Sql("SELECT count(*) FROM entries WHERE scope = ?"), ("s",))
        ids = (Sql("SELECT id FROM entries WHERE scope = ? ORDER BY id"), ("s",))
        conn.read_ahead([count, ids])
        writer.put("the loader read shard2", scope="s")  # another connection, meanwhile
        assert conn.execute(*count).fetchone()[0] == 1  # answered: read before the write
        assert len(conn.execute(*ids).fetchall()) == 1
        assert conn.execute(*count).fetchone()[0] == 2  # once only: read now
        # another statement run in between drops what was read ahead
        conn.read_ahead([count])
        writer.put("the loader read shard3", scope="s")
        conn.execute(Sql("SELECT 1"))
        assert conn.execute(*count).fetchone()[0] == 3
        # the same statement with other parameters is not answered
        conn.read_ahead([(count[0], ("other",))])
        writer.put("the loader read shard4", scope="s")
        assert conn.execute(*count).fetchone()[0] == 4


def test_a_write_transaction_never_takes_an_answer_read_ahead(pg_database: str) -> None:
    with _open(pg_database) as store:
        conn = _pg(store)
        count = (Sql("SELECT count(*) FROM entries"), ())
        conn.read_ahead([count])
        with db.write_tx(conn) as tx:
            tx.execute(
                Sql(
                    "INSERT INTO blocks (hash, size, lines, codec, data, created) "
                    "VALUES ('h', 0, 0, 'raw', ?, 0)",
                    "INSERT INTO blocks (hash, size, lines, codec, data, created) VALUES ('h', 0, 0, 'raw', %s, 0) RETURNING id",
                    returns_id=True,
                ),
                (b"",),
            )
            conn.read_ahead([count])  # refused inside the transaction
            assert (
                tx.execute(Sql("SELECT count(*) FROM blocks WHERE hash = 'h'")).fetchone()[0] == 1
            )


def test_a_search_brings_its_three_held_copies_up_to_date_in_one_round_trip(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(pg_database, counter=EstimateCounter(), resident_mb=64) as store:
        for i in range(30):
            store.put(f"Caroline said the loader read shard{i}", scope="s")
        store.search("loader")  # starts the copies' builds
        held = store.resident
        assert held is not None and held.built.wait(60)
        assert held.entry_map.wait(60) and held.entry_keys.wait(60)
        store.search("loader")
        trips = _count_trips(monkeypatch)
        pages: list[list[int]] = []
        for ahead, word in ((True, "narwhal"), (False, "walrus")):
            with _open(pg_database) as writer:  # every copy has a new row to read
                new = writer.put(f"Melanie saw a {word} by shard3", scope="s").entry
            if not ahead:
                monkeypatch.setattr(type(held), "read_ahead", lambda self, conn: None)
            trips.clear()
            pages.append([h.entry.id for h in store.search(f"{word} shard3", scope="s")])
            assert pages[-1][0] == new.id  # found through the copies, fresh
            assert held.entry_map.latest() is not None and held.entry_keys.latest() is not None
            if ahead:
                with_ahead = len(trips)
        assert with_ahead == len(trips) - 2  # three reads in one trip, where each took one


def test_a_search_whose_read_ahead_fails_refreshes_its_copies_itself(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(pg_database, counter=EstimateCounter(), resident_mb=64) as store:
        store.put("Caroline said the loader read shard1", scope="s")
        store.search("loader")
        held = store.resident
        assert held is not None and held.built.wait(60)
        assert held.entry_map.wait(60) and held.entry_keys.wait(60)

        def broken(self: PgConn, reads: object) -> None:
            raise StoreError("the reads ahead failed")

        monkeypatch.setattr(PgConn, "read_ahead", broken)
        new = store.put("Melanie saw a narwhal", scope="s").entry
        assert [h.entry.id for h in store.search("narwhal", scope="s")] == [new.id]
        assert held.entry_map.latest() is not None and held.entry_keys.latest() is not None


def test_a_new_put_is_one_round_trip_between_begin_and_commit_and_a_repeat_is_not_analysed(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _open(pg_database) as store:
        store.put("warm the pool and the schema", scope="s")
        trips: list[str] = []
        real_run, real_begin = PgConn._run, PgConn.begin_keyed

        def run(self: PgConn, fn: Any) -> Any:
            trips.append("run")
            return real_run(self, fn)

        def begin(self: PgConn, keys: Any, then: Any = ()) -> None:
            trips.append("begin")
            real_begin(self, keys, then)

        monkeypatch.setattr(PgConn, "_run", run)
        monkeypatch.setattr(PgConn, "begin_keyed", begin)
        for body in ("the loader read shard1 in 3 ms", _BODY):  # one batch, then streamed
            trips.clear()
            assert store.put(body, scope="s").created
            # the look-up went with the BEGIN; vocabulary, block, entry, chunks: one pipeline
            assert trips == ["begin", "run"]
        analysed = _count_analyses(monkeypatch)
        trips.clear()
        again = store.put(_BODY, scope="s")
        assert not again.created and analysed == []  # a repeat is never analysed
        assert trips == ["begin", "run"]  # the look-up with the BEGIN, then its entry's read
        assert store.put(_BODY + "\nmore", scope="s").created and analysed == ["x"]


def test_the_vocabulary_sent_last_with_a_block_is_stored_with_it_or_not_at_all(
    pg_database: str,
) -> None:
    with _open(pg_database) as store:
        conn = _pg(store)
        prepared = index.prepare(_BODY, 5, 400)
        block = (sha256_hex(_BODY.encode()), len(_BODY), 300, "raw", _BODY.encode(), 0.0)
        rows = index.chunk_rows(prepared.chunks)

        def words() -> tuple[Sql, tuple[str]]:
            return index.vocabulary_insert(["zebrafish", "aardvark"])

        bad = (Sql("INSERT INTO labels (label, entry_id) VALUES (?, ?)"), ("l", 999))  # no entry
        with pytest.raises(StoreError), db.write_tx(conn) as tx:
            assert isinstance(tx, PgConn)
            tx.insert_indexed_block(block, rows, then=bad, after=words)
        held = Sql("SELECT term FROM terms WHERE term IN ('zebrafish', 'aardvark') ORDER BY term")
        assert conn.execute(held).fetchall() == [] and _chunks(store, block[0]) == []
        with db.write_tx(conn) as tx:
            assert isinstance(tx, PgConn)
            got = tx.insert_indexed_block(block, rows, after=words)
        assert got.block_id is not None
        assert [r[0] for r in conn.execute(held).fetchall()] == ["aardvark", "zebrafish"]
        assert len(_chunks(store, block[0])) == len(rows)
        # outside a transaction: each statement on its own, the vocabulary still last
        other = _BODY.replace("loader", "reader")
        head, *later = map(
            index.chunk_rows, index.prepare(other, 5, 400, analyse_chars=500).batches(2000)
        )
        digest = sha256_hex(other.encode())
        assert later  # more batches, all in one statement outside a transaction
        bird = lambda: index.vocabulary_insert(["quetzal"])  # noqa: E731
        conn.insert_indexed_block(
            (digest, len(other), 300, "raw", other.encode(), 0.0), head, iter(later), after=bird
        )
        assert len(_chunks(store, digest)) == len(rows)
        assert (
            conn.execute(Sql("SELECT count(*) FROM terms WHERE term = 'quetzal'")).fetchone()[0]
            == 1
        )


def test_a_streamed_put_stores_the_vocabulary_of_every_batch_after_the_last(
    pg_database: str,
) -> None:
    body = _BODY + "\nthe very last line names zanzibar"
    with Store(pg_database, _SMALL_CHUNKS, counter=EstimateCounter()) as store:
        e = store.put(body, scope="s").entry
        assert len(_chunks(store, e.block_hash)) == 61  # streamed in several batches
        held = {r[0] for r in store.conn.execute(Sql("SELECT term FROM terms")).fetchall()}
        assert held == analysis.surface_words(body) and "zanzibar" in held
        # a misspelt word of the last batch finds the entry through the vocabulary
        assert [h.entry.id for h in store.search("zanzibr", scope="s")] == [e.id]


def test_content_indexed_in_another_scope_is_not_analysed_again_and_is_found_in_both(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(pg_database, _SMALL_CHUNKS, counter=EstimateCounter()) as store:
        first = store.put(_BODY, scope="a").entry
        analysed = _count_analyses(monkeypatch)
        second = store.put(_BODY, scope="b")
        assert second.created and analysed == []  # the BEGIN said: indexed already
        e = second.entry
        assert e.id != first.id and e.block_hash == first.block_hash
        own = [(int(r["id"]), 1) for r in _chunks(store, e.block_hash)]
        assert len(own) == 60 and _mapped(store, e.id) == own  # every chunk is the new one's too
        assert [h.entry.id for h in store.search("shard3 loader", scope="b")] == [e.id]
        assert [h.entry.id for h in store.search("shard3 loader", scope="a")] == [first.id]
        # a block stored but not indexed (a lossy put's original) is analysed and indexed
        original = _BODY.replace("loader", "fetcher")
        store.put(original, body="a summary of the fetcher log", scope="c")
        assert _chunks(store, sha256_hex(original.encode())) == []
        analysed.clear()
        kept = store.put(original, scope="d").entry
        assert analysed == ["x"] and len(_chunks(store, kept.block_hash)) == 60
        assert [h.entry.id for h in store.search("fetcher shard3", scope="d")] == [kept.id]


def test_each_read_sent_with_begin_answers_its_own_statement_once_and_writes_run_again(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _open(pg_database) as store:
        conn = _pg(store)
        write = (Sql("UPDATE state SET value = 'x' WHERE namespace = ? AND key = ?"), ("t", "k"))
        read = (Sql("SELECT value FROM state WHERE namespace = ? AND key = ?"), ("t", "k"))
        other = (Sql("SELECT count(*) FROM state WHERE namespace = ?"), ("t",))
        store.conn.execute(
            Sql("INSERT INTO state (namespace, key, value, updated) VALUES ('t', 'k', 'v', 0)")
        )
        trips = _count_trips(monkeypatch)
        with db.write_tx(conn, ["t\0k"], [write, read, other]) as tx:
            assert tx.execute(*other).fetchone()[0] == 1  # answered, in any order
            assert [r[0] for r in tx.execute(*read).fetchall()] == ["x"]  # saw the write
            assert trips == []
            assert [r[0] for r in tx.execute(*read).fetchall()] == ["x"]  # once: run now
            assert tx.execute(*write).rowcount == 1  # a write is never answered: it runs
            assert len(trips) == 2
