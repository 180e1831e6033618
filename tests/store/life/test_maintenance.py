"""doctor finds corruption and repairs what it can; export/import round-trips losslessly."""

from __future__ import annotations

from pathlib import Path

import pytest

from offload.core.tokens import EstimateCounter
from offload.errors import Gone, InvalidInput
from offload.store.backend import Sql
from offload.store.life.archive import export_archive, import_archive
from offload.store.life.maintenance import doctor
from offload.store.sqlite import db
from offload.store.store import Store


def _corrupt(store: Store, digest: str) -> None:
    """Overwrite a block's last three stored bytes with zeros (either backend)."""
    block = store.block_id(digest)
    row = store.conn.execute(Sql("SELECT data FROM blocks WHERE id = ?"), (block,)).fetchone()
    data = bytes(row[0])
    store.conn.execute(
        Sql("UPDATE blocks SET data = ? WHERE id = ?"), (data[:-3] + b"\0\0\0", block)
    )


def test_a_clean_store_passes_doctor(store: Store) -> None:
    store.put("a " * 500)
    report = doctor(store)
    assert report.clean and report.blocks_checked == 1


def test_doctor_reports_a_corrupted_block_and_tombstones_it_on_repair(store: Store) -> None:
    good = store.put("good body " * 50).entry
    bad = store.put("bad body " * 50).entry
    _corrupt(store, bad.block_hash)
    report = doctor(store)
    assert report.corrupt_blocks == [bad.block_hash] and not report.clean
    repaired = doctor(store, repair=True)
    assert repaired.repaired
    with pytest.raises(Gone, match="corrupted"):
        store.resolve(bad.ref)
    assert store.body(store.resolve(good.ref)) == "good body " * 50
    assert doctor(store).clean
    assert store.search("good")


def test_doctor_repairs_orphans_and_missing_index(store: Store) -> None:
    e = store.put("indexed words here").entry
    store.conn.execute(
        Sql(
            "INSERT INTO blocks (hash, size, lines, codec, data, created) VALUES (unhex(?), 1, 1, 'raw', ?, 0)",
            "INSERT INTO blocks (hash, size, lines, codec, data, created) VALUES (%s, 1, 1, 'raw', %s, 0) RETURNING id",
            returns_id=True,
        ),
        ("f" + e.block_hash[1:], b"A"),
    )
    store.conn.execute(Sql("DELETE FROM chunks"))
    report = doctor(store)
    assert report.orphan_blocks and report.unindexed_blocks
    doctor(store, repair=True)
    assert doctor(store).clean


def test_export_then_import_is_lossless(tmp_path: Path, store: Store) -> None:
    a = store.put(
        "alpha body\n" * 30,
        kind="code",
        topic="alpha",
        tags=["x", "y"],
        label="alpha-label",
        salience=0.7,
    ).entry
    b = store.put("beta body", pinned=True, scope="other").entry
    store.put("compressed form", body="short", topic="c", label="c-label")
    gone = store.put("gone body").entry
    store.forget(gone.ref, reason="test")
    store.put_state("proxy", "s", {"frontier": 3})
    store.next_number("fs__read")
    archive = tmp_path / "a.offload"
    assert export_archive(store, archive) == 3
    with Store(tmp_path / "other.db", counter=EstimateCounter()) as dst:
        assert import_archive(dst, archive) == 3
        a2 = dst.resolve("alpha-label")
        assert (a2.content_hash, a2.topic, a2.tags, a2.salience, a2.kind) == (
            a.content_hash,
            "alpha",
            ("x", "y"),
            0.7,
            "code",
        )
        assert dst.body(a2) == "alpha body\n" * 30
        assert dst.resolve(b.ref).pinned
        c = dst.resolve("c-label")
        assert dst.body(c) == "short" and dst.body(c, original=True) == "compressed form"
        with pytest.raises(Gone, match="test"):
            dst.resolve(gone.ref)
        assert dst.get_state("proxy", "s") == {"frontier": 3}
        assert dst.next_number("fs__read") == 2
        assert import_archive(dst, archive) == 0  # idempotent
        assert doctor(dst).clean


def test_importing_a_bad_archive_changes_nothing(tmp_path: Path, store: Store) -> None:
    bad = tmp_path / "bad.offload"
    bad.write_bytes(b"not zstd at all")
    with pytest.raises(InvalidInput):
        import_archive(store, bad)
    assert store.count() == 0


def test_reindex_rebuilds_search_from_the_blocks(store: Store) -> None:
    from offload.store.life.maintenance import reindex

    store.put("findable parseCfgFile body")
    store.conn.execute(Sql("DELETE FROM chunks"))
    store.conn.execute(
        Sql(
            "INSERT INTO search_body (search_body) VALUES ('delete-all')", "DELETE FROM search_body"
        )
    )
    store.conn.execute(Sql("DELETE FROM terms"))
    assert store.search("findable") == []
    seen: list[tuple[int, int]] = []
    assert reindex(store, progress=lambda d, t: seen.append((d, t))).indexed == 1
    assert seen == [(1, 1)]
    assert store.search("findable") and store.search("CfgFi")
    assert doctor(store).clean


def test_compact_shrinks_a_store_after_forgetting_and_keeps_everything_else(store: Store) -> None:
    from offload.store.life.maintenance import compact

    keep = store.put("keep this body\n" * 50).entry
    for i in range(40):
        store.forget(store.put(f"temporary {i}\n" + "filler text " * 400).entry.ref)
    before, after = compact(store)
    assert after < before
    assert store.body(store.resolve(keep.ref)) == "keep this body\n" * 50
    assert store.search("keep") and doctor(store).clean


def test_reindex_names_the_corrupt_blocks_it_skips_and_does_not_count_them(store: Store) -> None:
    from offload.store.life.maintenance import reindex

    store.put("good findable body " * 20)
    bad = store.put("bad body " * 50).entry
    _corrupt(store, bad.block_hash)
    done = reindex(store)
    assert done.indexed == 1 and done.skipped == (bad.block_hash,)
    assert store.search("findable")


def test_doctor_finds_a_damaged_chunk_map_and_repair_rebuilds_it(store: Store) -> None:
    # the map (store/write/chunkmap.py) is kept by triggers; rows deleted or added behind their
    # back (a bad restore, a hand edit) are invisible to every other check
    lost = store.put("the pelican counts boats in the harbour\n" * 40, scope="docks").entry
    kept = store.put("gulls circle the lighthouse at dusk\n", scope="docks").entry
    with db.write_tx(store.conn) as conn:
        conn.execute(Sql("DELETE FROM entry_chunks WHERE entry_id = ?"), (lost.id,))
        conn.execute(
            Sql(
                "INSERT INTO entry_chunks (entry_id, chunk_id, own) "
                "SELECT ?, chunk_id, 1 FROM entry_chunks WHERE entry_id = ?"
            ),
            (lost.id + 1000, kept.id),
        )
    missing = len(_chunk_ids(store, lost.id))
    report = doctor(store)
    assert report.chunk_map_off == missing + len(_chunk_ids(store, kept.id)) > 1
    assert not report.clean and report.blocks_checked == 2
    repaired = doctor(store, repair=True)
    assert any("chunk map" in r for r in repaired.repaired)
    assert doctor(store).clean
    held = store.conn.execute(
        Sql("SELECT count(*) FROM entry_chunks WHERE entry_id = ?"), (lost.id,)
    ).fetchone()
    assert int(held[0]) == missing
    assert [h.entry.id for h in store.search("pelican boats", scope="docks")] == [lost.id]


def _chunk_ids(store: Store, entry_id: int) -> list[int]:
    rows = store.conn.execute(
        Sql(
            "SELECT c.id FROM entries e JOIN blocks b ON b.hash = e.block_hash "
            "JOIN chunks c ON c.block_id = b.id WHERE e.id = ?"
        ),
        (entry_id,),
    ).fetchall()
    return [int(r[0]) for r in rows]


@pytest.mark.sqlite_only
def test_doctor_finds_unreadable_cached_counts_and_repair_makes_them_again(store: Store) -> None:
    log = "".join(f"row {i}: pelican_{i} counted {i * 7} boats in dock{i}\n" for i in range(200))
    entry = store.put(log, scope="docks").entry
    ids = _chunk_ids(store, entry.id)
    stored = dict(store.conn.execute(Sql("SELECT id, packed_counts FROM chunks")).fetchall())
    packed = [cid for cid in ids if isinstance(stored[cid], bytes)]
    assert packed  # the log's chunks hold more than a kilobyte of counts each
    want = [(h.entry.id, h.score) for h in store.search("pelican boats", scope="docks")]
    damaged = bytearray(stored[packed[0]])
    damaged[len(damaged) // 2] ^= 0xFF
    store.conn.execute(
        Sql("UPDATE chunks SET packed_counts = ? WHERE id = ?"), (damaged, packed[0])
    )
    report = doctor(store)
    assert report.unreadable_counts == [packed[0]] and not report.clean
    repaired = doctor(store, repair=True)
    assert any("term counts of 1 chunk" in r for r in repaired.repaired)
    assert doctor(store).clean
    again = store.conn.execute(
        Sql("SELECT term_counts, packed_counts FROM chunks WHERE id = ?"), (packed[0],)
    )
    assert tuple(again.fetchone()) == (None, stored[packed[0]])
    assert [(h.entry.id, h.score) for h in store.search("pelican boats", scope="docks")] == want


def test_doctor_reports_a_content_hash_no_held_content_backs_and_repair_renames_it(
    store: Store,
) -> None:
    claimed = store.put("the real text\n" * 9, body="a stand-in\n", keep_original=False).entry
    plain = store.put("plain\n").entry
    report = doctor(store)
    assert report.unverified_content == [claimed.id] and not report.clean
    report = doctor(store, repair=True)
    assert any(f"renamed #{claimed.id}" in line for line in report.repaired)
    renamed = store.resolve(f"#{claimed.id}")
    assert renamed.content_hash == renamed.block_hash == claimed.block_hash
    assert (
        store.body(renamed) == "a stand-in\n" and store.body(store.resolve(plain.ref)) == "plain\n"
    )
    with pytest.raises(Gone, match="could not be verified"):
        store.resolve(f"ctx:sha256:{claimed.content_hash}")
    again = store.put("the real text\n" * 9)  # the real content is stored, not deduplicated
    assert again.created and store.body(again.entry) == "the real text\n" * 9
    assert doctor(store).clean


def test_repair_forgets_an_unverified_entry_whose_body_the_scope_holds_already(
    store: Store,
) -> None:
    kept = store.put("a stand-in\n", label="kept").entry
    claimed = store.put("the real text\n", body="a stand-in\n", keep_original=False).entry
    report = doctor(store, repair=True)
    assert any(f"forgot #{claimed.id}" in line for line in report.repaired)
    assert store.resolve("kept").id == kept.id and store.count() == 1
    with pytest.raises(Gone, match=f"#{kept.id}"):
        store.resolve(f"ctx:sha256:{claimed.content_hash}")
    assert doctor(store).clean


_DEC_3_2026 = 1796256000.0  # 2026-12-03T00:00Z, inside the days tags were split
_DEC_7_2026 = 1796601600.0  # 2026-12-07T00:00Z, after the split was fixed


def test_doctor_notes_entries_tagged_with_single_letters_and_still_calls_the_store_clean(
    store: Store,
) -> None:
    kept = store.put("tagged with words", tags=["docs", "deploy"]).entry
    single = store.put("one tag of one letter", tags=["x"]).entry
    split = store.put("tagged by the CLI of 2026-12-01 to 2026-12-05").entry
    # `offload add --tags docs,deploy` of those days stored one tag per distinct letter
    store.conn.execute(
        Sql("UPDATE entries SET tags = 'd o c s e p l y', created = ? WHERE id = ?"),
        (_DEC_3_2026, split.id),
    )
    report = doctor(store)
    assert report.letter_tags == [split.id] and report.clean
    assert kept.id not in report.letter_tags and single.id not in report.letter_tags


def test_doctor_does_not_note_single_letter_tags_given_after_the_split_was_fixed(
    store: Store,
) -> None:
    # `offload add --tags "a b,c"` today stores the three tags it was asked for
    asked = store.put("tagged a, b and c on purpose", tags=["a", "b", "c"]).entry
    store.conn.execute(Sql("UPDATE entries SET created = ? WHERE id = ?"), (_DEC_7_2026, asked.id))
    assert doctor(store).letter_tags == []
