"""The chunk -> entry map held in memory: the table's own after every write, never stale
(SQLite files, and a real PostgreSQL server in the slow tier)."""

from __future__ import annotations

import random
from pathlib import Path

import psycopg
import pytest

from offload.core.tokens import EstimateCounter
from offload.store.backend import Sql
from offload.store.life.maintenance import doctor, reindex
from offload.store.search.memory import entrymap
from offload.store.sqlite import db
from offload.store.store import Store
from wordcorpus import WORDS


def _open(path: Path | str) -> Store:
    return Store(path, counter=EstimateCounter(), resident_mb=64)


def _fill(store: Store, n: int = 40, seed: int = 3) -> None:
    rnd = random.Random(seed)
    for i in range(n):
        words = " ".join(rnd.choices(WORDS, k=rnd.randint(2, 20)))
        store.put(f"Caroline said, {words} n{i}\n" * rnd.randint(1, 30), scope=f"chat{i % 2}")


def _table(store: Store) -> entrymap.Entries:
    rows = store.conn.execute(
        Sql("SELECT chunk_id, entry_id FROM entry_chunks ORDER BY chunk_id, entry_id")
    ).fetchall()
    out: dict[int, list[int]] = {}
    for cid, eid in rows:
        out.setdefault(int(cid), []).append(int(eid))
    return {c: tuple(e) for c, e in out.items()}


def _held(store: Store) -> entrymap.EntryMap | None:
    assert store.resident is not None
    return store.resident.entry_map.current(store.conn)


def _as_dict(m: entrymap.EntryMap) -> entrymap.Entries:
    return {**m.base, **m.tail}


def _rebuilt(store: Store) -> entrymap.Entries:
    """The map after a (re)build: started, waited for (an event, not a sleep), read."""
    assert store.resident is not None
    rmap = store.resident.entry_map
    rmap.start()
    assert rmap.built.wait(60)
    m = rmap.current(store.conn)
    assert m is not None
    return _as_dict(m)


def _fresh_or_dropped(store: Store) -> None:
    """The map now is the table's, or it is dropped (and the rebuild is the table's)."""
    m = _held(store)
    if m is not None:
        assert _as_dict(m) == _table(store)
    assert _rebuilt(store) == _table(store)
    m = _held(store)
    assert m is not None
    every = [int(r[0]) for r in store.conn.execute(Sql("SELECT id FROM entries"))]
    assert m.first_chunks(every) == (_table_firsts(store), [])


def test_the_built_map_is_the_tables(shared_store: Path | str) -> None:
    with _open(shared_store) as store:
        _fill(store)
        assert _rebuilt(store) == _table(store)


def test_puts_after_the_build_are_read_by_the_watermark_without_a_rebuild(
    shared_store: Path | str,
) -> None:
    with _open(shared_store) as store:
        _fill(store)
        _rebuilt(store)
        new = store.put("Melanie said, the zebrafinch sang\n" * 50, scope="chat0").entry
        # the same content in another scope: a new entry of chunks the map already holds
        twin = store.put("Melanie said, the zebrafinch sang\n" * 50, scope="chat9").entry
        store.put_many([f"Melanie said, pottery by the beach {i}" for i in range(5)], scope="chat2")
        m = _held(store)
        assert m is not None  # no generation moved: the rows were read since, not rebuilt
        assert _as_dict(m) == _table(store)
        chunks = [c for c, e in _as_dict(m).items() if new.id in e]
        assert chunks and all(twin.id in _as_dict(m)[c] for c in chunks)


def test_forget_reindex_and_a_moved_block_drop_or_refresh_the_map(shared_store: Path | str) -> None:
    with _open(shared_store) as store:
        _fill(store)
        gone = store.put("Caroline said, a quokka visited", scope="chat0").entry
        _rebuilt(store)
        store.forget(gone.ref)
        _fresh_or_dropped(store)
        reindex(store)
        _fresh_or_dropped(store)
        # an entry pointed at another entry's block (what a compaction or repair does)
        with db.write_tx(store.conn) as conn:
            conn.execute(
                Sql(
                    "UPDATE entries SET block_own = (SELECT block_hash FROM entries WHERE id = 2) "
                    "WHERE id = 3",
                    "UPDATE entries SET block_hash = (SELECT block_hash FROM entries WHERE id = 2) "
                    "WHERE id = 3",
                )
            )
        assert _held(store) is None
        assert _rebuilt(store) == _table(store)


def test_doctors_refill_of_an_emptied_map_is_seen(shared_store: Path | str) -> None:
    with _open(shared_store) as store:
        _fill(store)
        with db.write_tx(store.conn) as conn:
            conn.execute(Sql("DELETE FROM entry_chunks"))
        assert _rebuilt(store) == {}  # built over the empty table
        doctor(store, repair=True)  # refills it: not a deletion of any row the map holds
        assert _held(store) is None
        assert _rebuilt(store) == _table(store) != {}


def test_a_chunk_written_after_the_map_was_read_is_mapped_through_the_table(
    shared_store: Path | str,
) -> None:
    path = shared_store
    with _open(path) as store:
        _fill(store)
        _rebuilt(store)
        stale = _held(store)
        new = store.put("Melanie said, a narwhal in the river", scope="chat1").entry
        assert stale is not None
        # a search holding the map read before the put (its own snapshot) still finds it
        assert store.resident is not None
        store.resident.entry_map.current = lambda conn: stale  # type: ignore[method-assign]
        assert [h.entry.id for h in store.search("narwhal")] == [new.id]


def test_pages_are_the_same_with_and_without_the_held_map(shared_store: Path | str) -> None:
    path = shared_store
    with _open(path) as store, _open(path) as plain:
        _fill(store, 60)
        _rebuilt(store)
        assert plain.resident is not None
        plain.resident.entry_map.current = lambda conn: None  # type: ignore[method-assign]
        store.put("Caroline said, the lake by the garden\n" * 20, scope="chat1")
        for q in ("Caroline lake", "pottery beach dog", "river camping", "adoption"):
            for kw in ({}, {"scope": "chat1"}):
                a = [(h.entry.id, h.chunk_id, h.score) for h in store.search(q, **kw)]  # type: ignore[arg-type]
                b = [(h.entry.id, h.chunk_id, h.score) for h in plain.search(q, **kw)]  # type: ignore[arg-type]
                assert a == b and a


def _table_firsts(store: Store) -> entrymap.Firsts:
    rows = store.conn.execute(
        Sql("SELECT entry_id, min(chunk_id) FROM entry_chunks WHERE own = 1 GROUP BY entry_id")
    ).fetchall()
    return {int(e): int(c) for e, c in rows}


def test_each_entrys_first_chunk_is_the_tables_after_puts(shared_store: Path | str) -> None:
    with _open(shared_store) as store:
        _fill(store)
        _rebuilt(store)
        store.put("Melanie said, the zebrafinch sang\n" * 50, scope="chat0")
        store.put("Melanie said, the zebrafinch sang\n" * 50, scope="chat9")  # a twin
        late = store.put("Caroline said, a late heron", scope="chat1").entry
        m = _held(store)
        assert m is not None
        every = [int(r[0]) for r in store.conn.execute(Sql("SELECT id FROM entries"))]
        firsts, unknown = m.first_chunks(every)
        assert firsts == _table_firsts(store) and unknown == []
        # a map read before the last put answers for the entries it knows only
        older = entrymap.EntryMap(m.base, {}, m.firsts, {}, (m.token[0], late.id - 1, 0))
        assert older.first_chunks([late.id])[1] == [late.id]


@pytest.mark.slow
def test_postgresql_rows_committed_after_a_later_transaction_was_read_are_still_applied(
    pg_database: str,
) -> None:
    with _open(pg_database) as store:
        _fill(store, 6)
        _rebuilt(store)
        chunks = sorted(_table(store))
        a, b = chunks[0], chunks[-1]
        add = "INSERT INTO entry_chunks (entry_id, chunk_id, own) VALUES (%s, %s, 0)"
        with psycopg.connect(pg_database) as slow, psycopg.connect(pg_database) as quick:
            slow.execute(add, (10_000, a))  # a transaction that began first, committed last
            quick.execute(add, (10_001, b))
            quick.commit()
            mid = _held(store)
            assert mid is not None and 10_001 in _as_dict(mid)[b]
            assert 10_000 not in _as_dict(mid)[a]
            slow.commit()
        after = _held(store)
        assert after is not None and _as_dict(after) == _table(store)
        assert 10_000 in _as_dict(after)[a]
