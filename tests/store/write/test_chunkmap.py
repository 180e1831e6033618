"""The stored chunk -> entry map stays exactly what the entries and chunks say, whatever writes them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from offload.core.tokens import EstimateCounter
from offload.store.backend import Sql
from offload.store.life.archive import export_archive, import_archive
from offload.store.life.maintenance import doctor, reindex
from offload.store.store import Store
from offload.store.write import chunkmap

LONG = "".join(f"line {i}: the pelican counts boats in the harbour\n" for i in range(400))
ORIGINAL = "".join(f"step {i}: move the rows in order\n" for i in range(1, 80))
LOSSY = "a migration plan in 80 steps\nrows first, indexes last\n"


def _map(store: Store) -> set[tuple[int, int, int]]:
    rows = store.conn.execute(Sql("SELECT entry_id, chunk_id, own FROM entry_chunks")).fetchall()
    return {(int(r[0]), int(r[1]), int(r[2])) for r in rows}


def _chunks_of(store: Store, entry_id: int) -> set[int]:
    rows = store.conn.execute(
        Sql(
            "SELECT c.id FROM entries e JOIN blocks b ON b.hash = e.block_hash "
            "JOIN chunks c ON c.block_id = b.id WHERE e.id = ?"
        ),
        (entry_id,),
    ).fetchall()
    return {int(r[0]) for r in rows}


def _exact(store: Store) -> bool:
    return chunkmap.missing_or_stale(store.conn) == 0


def test_every_put_maps_each_of_its_chunks_to_its_entry(store: Store) -> None:
    one = store.put(LONG, scope="a").entry
    many = [r.entry for r in store.put_many(["short note about boats", "another one"], scope="b")]
    assert len(_chunks_of(store, one.id)) > 1
    assert {(e, c) for e, c, _own in _map(store) if e == one.id} == {
        (one.id, c) for c in _chunks_of(store, one.id)
    }
    for e in many:
        assert {c for eid, c, own in _map(store) if eid == e.id and own} == _chunks_of(store, e.id)
    assert _exact(store)


def test_the_same_content_in_two_scopes_maps_its_chunks_to_both_entries(store: Store) -> None:
    a = store.put(LONG, scope="a").entry
    b = store.put(LONG, scope="b").entry
    assert a.block_hash == b.block_hash
    chunks = _chunks_of(store, a.id)
    assert {c for e, c, _o in _map(store) if e == a.id} == chunks
    assert {c for e, c, _o in _map(store) if e == b.id} == chunks
    store.forget(a.ref)
    assert {e for e, _c, _o in _map(store)} == {b.id}
    assert _exact(store)


def test_a_lossy_entrys_indexed_original_is_mapped_as_not_its_own_body(store: Store) -> None:
    entry = store.put(ORIGINAL, body=LOSSY, index_original=True).entry
    own = {c for e, c, o in _map(store) if e == entry.id and o == 1}
    kept = {c for e, c, o in _map(store) if e == entry.id and o == 0}
    assert own == _chunks_of(store, entry.id) and kept and not own & kept
    store.forget(entry.ref)
    assert _map(store) == set()


def test_an_original_indexed_after_its_lossy_entry_maps_its_chunks_to_that_entry(
    store: Store,
) -> None:
    lossy = store.put(ORIGINAL, body=LOSSY, scope="a").entry  # original kept, not indexed
    assert {c for e, c, o in _map(store) if e == lossy.id and o == 0} == set()
    whole = store.put(ORIGINAL, scope="b").entry  # the same text: its block indexed now
    chunks = _chunks_of(store, whole.id)
    assert chunks
    assert {c for e, c, o in _map(store) if e == lossy.id and o == 0} == chunks
    assert {c for e, c, o in _map(store) if e == whole.id and o == 1} == chunks
    assert _exact(store)


def test_a_batch_indexing_many_blocks_at_once_maps_each_to_its_entries(store: Store) -> None:
    lossy = store.put(ORIGINAL, body=LOSSY, scope="a").entry  # original kept, not indexed
    texts = [ORIGINAL, LONG, "a third text: one pelican", "a fourth text: two pelicans"]
    done = store.put_many(texts, scope="b")
    for r in done:
        chunks = _chunks_of(store, r.entry.id)
        assert chunks and {c for e, c, o in _map(store) if e == r.entry.id and o == 1} == chunks
    kept = {c for e, c, o in _map(store) if e == lossy.id and o == 0}
    assert kept == _chunks_of(store, done[0].entry.id)
    assert _exact(store)


def test_forget_expiry_and_reindex_keep_the_map_exact(store: Store) -> None:
    kept = store.put(LONG, scope="a").entry
    gone = store.put("forget me: a pelican note", scope="a").entry
    store.put("this one expires soon", scope="a", expires=time.time() - 1)
    store.put(ORIGINAL, body=LOSSY, index_original=True, scope="b")
    store.forget(gone.ref)
    store.expire_due()
    assert _exact(store)
    before = {e for e, _c, _o in _map(store)}
    reindex(store)
    assert _exact(store) and {e for e, _c, _o in _map(store)} == before
    assert kept.id in before and gone.id not in before
    assert doctor(store, repair=True).clean and _exact(store)


def test_an_imported_archive_maps_its_entries(tmp_path: Path, store: Store) -> None:
    store.put(LONG, scope="a")
    store.put(ORIGINAL, body=LOSSY, index_original=True, scope="b")
    archive = tmp_path / "a.offload"
    export_archive(store, archive)
    with Store(tmp_path / "other.db", counter=EstimateCounter()) as dst:
        import_archive(dst, archive)
        assert len(_map(dst)) == len(_map(store)) and _exact(dst)


@pytest.mark.sqlite_only
def test_opening_a_store_from_before_the_map_fills_it(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path, counter=EstimateCounter()) as store:
        store.put(LONG, scope="a")
        store.put(ORIGINAL, body=LOSSY, index_original=True, scope="b")
        expected = _map(store)
        # as an older offload left it: no map, no triggers
        for name in ("added", "gone", "moved"):
            store.conn.execute(Sql(f"DROP TRIGGER entry_chunks_entry_{name}"))
            store.conn.execute(Sql(f"DROP TRIGGER entry_chunks_chunk_{name}"))
        store.conn.execute(Sql("DROP TABLE entry_chunks"))
        store.conn.execute(Sql("DELETE FROM _migrations WHERE name = 'm_entry_chunks_map'"))
    with Store(path, counter=EstimateCounter()) as store:
        assert _map(store) == expected and len(expected) > 2
        store.put("after the migration: one more pelican", scope="a")
        assert _exact(store)
