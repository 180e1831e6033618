"""Moving a store to another backend copies everything and proves every block arrived."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from offload.core.hashing import encode, sha256_hex, short_ref
from offload.core.tokens import EstimateCounter
from offload.errors import Gone
from offload.store import archive
from offload.store.migrate import archive_digests, migrate, verify_blocks
from offload.store.store import Store


def filled(path: Path) -> Store:
    """A store holding plain, compressed (with original), labelled and forgotten entries,
    state, a counter and a tally."""
    store = Store(path, counter=EstimateCounter())
    store.put("the frobnicator threshold is 42\n", scope="proj", label="thr", topic="cfg")
    store.put(
        "a long original tool output\n" * 50,
        body="a short lossy summary of it\n",
        scope="proj",
        kind="tool-output",
    )
    gone = store.put("an entry that gets forgotten\n", scope="proj").entry
    store.forget(gone.ref, reason="obsolete", scope="proj")
    store.put("the same text in another scope\n", scope="other", tags=("a", "b"))
    store.put_state("proxy", "session-1", {"frontier": [1, 2, 3]})
    store.add_tally("gateway-usage", "calls", {"git": 12})
    for _ in range(3):
        store.next_number("gateway-run")
    return store


def test_a_migration_copies_every_entry_label_tombstone_state_and_counter(
    tmp_path: Path, store_location: Path | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # into either backend; on PostgreSQL the import runs in batches (of 2 here: several)
    monkeypatch.setattr(archive, "IMPORT_BATCH", 2)
    with filled(tmp_path / "src.db") as src, Store(store_location) as dst:
        report = migrate(src, dst, tmp_path)
        assert (report.exported, report.added) == (3, 3)
        assert report.verified and report.blocks_checked == 4  # 3 bodies + 1 original
        for entry in src.entries():
            copy = dst.resolve(entry.ref, entry.scope)
            assert dst.body(copy) == src.body(entry)
            assert dst.body(copy, original=True) == src.body(entry, original=True)
            assert (copy.topic, copy.tags, copy.kind) == (entry.topic, entry.tags, entry.kind)
        assert dst.read("thr", "proj") == "the frobnicator threshold is 42\n"
        forgotten = short_ref(sha256_hex(encode("an entry that gets forgotten\n")))
        with pytest.raises(Gone, match="obsolete"):
            dst.resolve(forgotten, "proj")
        assert dst.get_state("proxy", "session-1") == {"frontier": [1, 2, 3]}
        assert dst.next_number("gateway-run") == 4  # numbers are never reused after a move
        assert dst.tallies("gateway-usage") == {"calls": {"git": 12}}
    assert not (tmp_path / "migrate.offload-archive").exists()


def test_a_second_migration_adds_nothing_and_still_verifies(
    tmp_path: Path, store_location: Path | str
) -> None:
    with filled(tmp_path / "src.db") as src, Store(store_location) as dst:
        migrate(src, dst, tmp_path)
        again = migrate(src, dst, tmp_path)
        assert (again.exported, again.added, again.verified) == (3, 0, True)
        assert dst.count() == src.count()


def test_progress_is_reported_for_each_phase(tmp_path: Path) -> None:
    seen: dict[str, list[tuple[int, int]]] = {"export": [], "import": [], "verify": []}
    with filled(tmp_path / "src.db") as src, Store(tmp_path / "dst.db") as dst:
        migrate(
            src,
            dst,
            tmp_path,
            on_export=lambda d, t: seen["export"].append((d, t)),
            on_import=lambda d, t: seen["import"].append((d, t)),
            on_verify=lambda d, t: seen["verify"].append((d, t)),
        )
    assert seen["export"][-1] == (3, 3)
    assert seen["import"][-1] == (3, 3)
    assert seen["verify"][-1] == (4, 4)


def test_verification_names_a_block_corrupted_or_missing_on_the_far_side(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "dst.db", counter=EstimateCounter()) as dst:
        good = dst.put("intact text\n").entry.block_hash
        bad = dst.put("text that rots on disk\n").entry.block_hash
    raw = sqlite3.connect(tmp_path / "dst.db")
    with raw:
        raw.execute("UPDATE blocks SET codec = 'raw', data = ? WHERE hash = ?", (b"rot", bad))
    raw.close()
    missing = "0" * 64
    with Store(tmp_path / "dst.db") as dst:
        checked, failed = verify_blocks(dst, [good, bad, missing])
    assert (checked, failed) == (3, [bad, missing])


def test_the_archive_names_each_body_and_original_once(tmp_path: Path) -> None:
    from offload.store.archive import export_archive

    with filled(tmp_path / "src.db") as src:
        export_archive(src, tmp_path / "a.zst")
        expected = {e.block_hash for e in src.entries()} | {
            e.content_hash for e in src.entries() if e.compressed
        }
    digests = archive_digests(tmp_path / "a.zst")
    assert len(digests) == len(set(digests)) and set(digests) == expected


def test_a_migrated_store_finds_what_the_source_finds(
    tmp_path: Path, store_location: Path | str
) -> None:
    with filled(tmp_path / "src.db") as src, Store(store_location) as dst:
        migrate(src, dst, tmp_path)
        for question in ("frobnicator threshold", "lossy summary", "text in another scope"):
            found = [h.entry.ref for h in dst.search(question, limit=3)]
            assert found and found == [h.entry.ref for h in src.search(question, limit=3)]


def test_verification_reads_blocks_in_pages_and_misses_none(
    tmp_path: Path, store_location: Path | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("offload.store.migrate.VERIFY_PAGE", 2)
    with Store(store_location, counter=EstimateCounter()) as dst:
        digests = [dst.put(f"text number {i}\n").entry.block_hash for i in range(5)]
        missing = "f" * 64
        checked, failed = verify_blocks(dst, [*digests[:3], missing, *digests[3:]])
    assert (checked, failed) == (6, [missing])
