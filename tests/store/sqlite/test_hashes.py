"""SQLite keeps each sha256 as its 32 bytes; every caller still sees 64 hex characters."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest
import zstandard

import older_stores
from offload.core.tokens import EstimateCounter
from offload.errors import Gone, NotFound
from offload.store.backend import Sql
from offload.store.life.archive import export_archive
from offload.store.life.maintenance import doctor
from offload.store.sqlite import db
from offload.store.store import Store

LOSSY = "a short compression of the log\n"
ORIGINAL = "the whole log: the quokka service restarted twice\n" * 20


def _stored_forms(store: Store) -> set[tuple[str, int]]:
    """(type, length) of every hash a block or an entry row holds."""
    found = store.conn.execute(
        Sql(
            "SELECT typeof(hash), length(hash) FROM blocks UNION "
            "SELECT typeof(content_hash), length(content_hash) FROM entries UNION "
            "SELECT typeof(block_hash), length(block_hash) FROM entries"
        )
    ).fetchall()
    return {(str(r[0]), int(r[1])) for r in found}


def _fill(store: Store) -> dict[str, str]:
    """Entries of every shape a hash takes part in: plain, labelled, lossy with its original
    kept and indexed, one content in two scopes, one forgotten (a tombstone)."""
    plain = store.put("the parcel arrives on tuesday\n", label="parcel").entry
    lossy = store.put(ORIGINAL, body=LOSSY, index_original=True, scope="mcp").entry
    store.put("the parcel arrives on tuesday\n", scope="other")
    gone = store.put("an obsolete note about the old printer\n").entry
    store.forget(gone.ref, reason="obsolete")
    return {"plain": str(plain.id), "lossy": str(lossy.id), "gone": gone.content_hash}


def _export(store: Store, path: Path) -> None:
    export_archive(store, path)


def test_a_put_stores_its_hashes_as_bytes_and_reads_them_back_as_hex(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        entry = store.put("the parcel arrives on tuesday\n").entry
        assert _stored_forms(store) == {("blob", 32)}
        assert len(entry.content_hash) == 64 and entry.content_hash == entry.content_hash.lower()
        again = store.resolve(entry.ref)
        assert again.content_hash == again.block_hash == entry.content_hash
        # the whole hash, a prefix of odd or even length, with or without ctx:sha256:
        for ref in (
            entry.content_hash,
            entry.content_hash[:9],
            f"ctx:sha256:{entry.content_hash[:12]}",
        ):
            assert store.resolve(ref).id == entry.id
        assert store.read(entry.content_hash[:8].upper()) == "the parcel arrives on tuesday\n"
        assert store.search("parcel")[0].entry.content_hash == entry.content_hash


def test_a_prefix_of_no_stored_hash_finds_nothing_beside_one_that_does(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        entry = store.put("alpha\n").entry
        first = entry.content_hash[0]
        other = "0" if first != "0" else "1"
        assert store.resolve(entry.content_hash[:10]).id == entry.id
        with pytest.raises(NotFound):
            store.resolve(other + entry.content_hash[1:10])


def test_opening_a_store_of_hex_hashes_converts_them_and_every_reference_answers_alike(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    with Store(path, counter=EstimateCounter()) as store:
        ids = _fill(store)
        _export(store, tmp_path / "before.offload")
        hits = [(h.entry.id, h.in_original) for h in store.search("quokka")]
        older_stores.hashes_as_hex(store.conn)  # as the release before stored them
        assert _stored_forms(store) == {("text", 64)}
    with Store(path, counter=EstimateCounter()) as store:
        assert _stored_forms(store) == {("blob", 32)}
        applied = store.conn.execute(
            Sql("SELECT count(*) FROM _migrations WHERE name = 'm_hashes_as_bytes'")
        ).fetchone()[0]
        assert applied == 1
        plain = store.resolve("parcel")
        assert (
            str(plain.id) == ids["plain"]
            and store.resolve(plain.content_hash[:8], "").id == plain.id
        )
        lossy = store.resolve(ids["lossy"])
        assert store.body(lossy) == LOSSY and store.body(lossy, original=True) == ORIGINAL
        assert [(h.entry.id, h.in_original) for h in store.search("quokka")] == hits
        for ref in (ids["gone"], ids["gone"][:10]):
            with pytest.raises(Gone, match="obsolete"):
                store.read(ref)
        report = doctor(store)
        assert report.clean and report.blocks_checked == 3 and not report.chunk_map_off
        _export(store, tmp_path / "after.offload")
    assert _records(tmp_path / "before.offload") == _records(tmp_path / "after.offload")


def test_a_hash_that_is_not_hex_survives_the_conversion_for_doctor_to_name(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    with Store(path, counter=EstimateCounter()) as store:
        entry = store.put("kept\n").entry
        older_stores.hashes_as_hex(store.conn)
        store.conn.execute(Sql("PRAGMA foreign_keys = OFF"))
        store.conn.execute(Sql("UPDATE blocks SET hash = 'not hex'"))
        store.conn.execute(Sql("UPDATE entries SET block_hash = 'not hex'"))
        store.conn.execute(Sql("PRAGMA foreign_keys = ON"))
    with Store(path, counter=EstimateCounter()) as store:
        assert store.resolve(entry.content_hash).id == entry.id
        report = doctor(store)
        assert not report.clean


def test_an_older_offload_writing_hex_hashes_after_the_conversion_is_refused_whole(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    with Store(path, counter=EstimateCounter()) as store:
        entry = store.put("the parcel arrives on tuesday\n").entry
    # what the release before's put runs, on its own connection (no unhex there)
    older = sqlite3.connect(path)
    digest = "ab" * 32
    with pytest.raises(sqlite3.IntegrityError, match="older offload process"):
        older.execute(
            "INSERT INTO blocks (hash, size, lines, codec, data, created) "
            "VALUES (?, 1, 1, 'raw', x'41', 0)",
            (digest,),
        )
    # its writes of block_hash, a generated column since m_entry_block_hash_lossy_only,
    # are refused as they are prepared; hex in the column it is stored in, by the trigger
    for statement in (
        "INSERT INTO entries (kind, tokens, content_hash, block_hash, created, accessed) "
        "VALUES ('text', 1, ?, ?, 0, 0)",
        "UPDATE entries SET content_hash = ?, block_hash = ?",
    ):
        with pytest.raises(sqlite3.OperationalError, match="generated column"):
            older.execute(statement, (entry.content_hash, entry.block_hash))
    for statement in (
        "INSERT INTO entries (kind, tokens, content_hash, block_own, created, accessed) "
        "VALUES ('text', 1, ?, ?, 0, 0)",
        "UPDATE entries SET content_hash = ?, block_own = ?",
    ):
        with pytest.raises(sqlite3.IntegrityError, match="older offload process"):
            older.execute(statement, (entry.content_hash, entry.block_hash))
    older.close()
    with Store(path, counter=EstimateCounter()) as store:
        assert _stored_forms(store) == {("blob", 32)}
        assert store.read(entry.ref) == "the parcel arrives on tuesday\n"
        assert doctor(store).clean


def test_the_connections_unhex_reads_hex_digits_and_nothing_else() -> None:
    assert db.unhex("00ff10") == b"\x00\xff\x10"
    assert db.unhex("0g") is None and db.unhex("abc") is None and db.unhex(b"ab") is None
    # Python's fromhex skips whitespace; SQLite's unhex (and ours) does not
    for spaced in (" ab", "ab cd", "ab\n", "\tab", "ab\u3000"):
        assert db.unhex(spaced) is None, repr(spaced)


def _records(path: Path) -> list[dict[str, object]]:
    """An archive's records without the times an export stamps."""
    with path.open("rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as zr:
        out = [json.loads(line) for line in io.TextIOWrapper(zr, encoding="utf-8")]
    for r in out:
        r.pop("exported", None)
        r.pop("created_at", None)
    return out
