"""SQLite keeps an entry's block hash only where it differs from its content hash
(migration m_entry_block_hash_lossy_only): ``block_hash`` reads it back for every entry."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest
import zstandard

import older_stores
from offload.core.tokens import EstimateCounter
from offload.store.life.archive import export_archive, import_archive
from offload.store.life.maintenance import doctor
from offload.store.store import Store

pytestmark = pytest.mark.sqlite_only

_TEXTS = [
    "Caroline said, the adoption agency called back about the interview",
    "Melanie said, I painted a sunrise over the lake last weekend",
    "we adopted a puppy from the shelter near the beach",
]


def _raw(store: Store) -> sqlite3.Connection:
    assert isinstance(store.conn, sqlite3.Connection)
    return store.conn


def _own(conn: sqlite3.Connection) -> dict[int, bool]:
    """Each entry's id: whether its row keeps a block hash of its own."""
    rows = conn.execute("SELECT id, block_own IS NOT NULL FROM entries ORDER BY id")
    return {int(r[0]): bool(r[1]) for r in rows}


def _records(path: Path) -> list[dict[str, object]]:
    with path.open("rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as zr:
        out = [json.loads(line) for line in io.TextIOWrapper(zr, encoding="utf-8")]
    return [r for r in out if r.get("type") == "entry"]


def _seen(store: Store) -> list[tuple[object, ...]]:
    """What a reader sees of each entry: its hashes, body, original and chunk map rows."""
    conn = _raw(store)
    out: list[tuple[object, ...]] = []
    for e in store.entries(limit=100):
        original = store.body(e, original=True) if e.compressed else None
        mapped = conn.execute(
            "SELECT chunk_id, own FROM entry_chunks WHERE entry_id = ? ORDER BY chunk_id", (e.id,)
        ).fetchall()
        out.append((e.id, e.content_hash, e.block_hash, store.body(e), original, mapped))
    return sorted(out, key=lambda t: int(str(t[0])))


def test_a_put_keeps_a_block_hash_only_for_a_lossy_entry_and_reads_both_back(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        plain = store.put_many(_TEXTS, scope="a")[0].entry
        lossy = store.put("the whole plan, long", body="the plan (lossy)", scope="a").entry
        assert _own(_raw(store)) == {1: False, 2: False, 3: False, lossy.id: True}
        again = store.resolve(plain.ref)
        assert again.block_hash == again.content_hash == plain.content_hash
        kept = store.resolve(lossy.ref)
        assert kept.block_hash == lossy.block_hash != kept.content_hash
        assert store.body(kept) == "the plan (lossy)"
        assert store.body(kept, original=True) == "the whole plan, long"
        for digest in (lossy.content_hash, lossy.block_hash):
            assert store.resolve(digest[:12], scope="a").id == lossy.id
        assert doctor(store).clean


def test_an_existing_store_drops_the_block_hashes_its_entries_repeat_and_reads_the_same(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    with Store(path, counter=EstimateCounter()) as store:
        store.put_many(_TEXTS, scope="a")
        lossy = store.put("the whole plan, long", body="the plan (lossy)", scope="a").entry
        want = _seen(store)
        export_archive(store, tmp_path / "before.offload")
        older_stores.block_hash_stored(store.conn)
        stored = "SELECT count(block_hash) FROM entries WHERE typeof(block_hash) = 'blob'"
        assert _raw(store).execute(stored).fetchone()[0] == 4
    with Store(path, counter=EstimateCounter()) as store:
        conn = _raw(store)
        assert _own(conn) == {1: False, 2: False, 3: False, lossy.id: True}
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert _seen(store) == want
        assert doctor(store).clean
        export_archive(store, tmp_path / "after.offload")
        # forgetting the lossy entry drops both its blocks; the others keep theirs
        store.forget(lossy.ref, scope="a")
        gone = "SELECT count(*) FROM blocks WHERE hash = ?"
        for digest in (lossy.block_hash, lossy.content_hash):
            assert conn.execute(gone, (bytes.fromhex(digest),)).fetchone()[0] == 0
        assert doctor(store).clean
    assert _records(tmp_path / "before.offload") == _records(tmp_path / "after.offload")


def test_an_archive_imported_keeps_a_block_hash_only_for_its_lossy_entries(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "a.db", counter=EstimateCounter()) as store:
        store.put_many(_TEXTS, scope="a")
        store.put("the whole plan, long", body="the plan (lossy)", scope="a")
        want = [s[1:5] for s in _seen(store)]
        export_archive(store, tmp_path / "a.offload")
    with Store(tmp_path / "b.db", counter=EstimateCounter()) as store:
        import_archive(store, tmp_path / "a.offload")
        assert sorted(_own(_raw(store)).values()) == [False, False, False, True]
        assert [s[1:5] for s in _seen(store)] == want
        assert doctor(store).clean
