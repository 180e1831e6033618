"""Moving a store to another backend copies everything and proves every block arrived."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import zstandard

from offload.core.hashing import encode, sha256_hex, short_ref
from offload.core.tokens import EstimateCounter
from offload.errors import Gone, InvalidInput
from offload.llm.embedding import StaticEmbedder
from offload.store.backend import Sql
from offload.store.life import archive
from offload.store.life.archive import export_archive, import_archive
from offload.store.life.migrate import (
    archive_digests,
    archive_vectors,
    migrate,
    verify_blocks,
    verify_vectors,
)
from offload.store.schema import hexed
from offload.store.sqlite import db
from offload.store.store import Store
from offload.store.write import vectors


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


def test_a_migration_moves_lossy_entries_that_kept_no_original(
    tmp_path: Path, store_location: Path | str
) -> None:
    # its own archive, written a moment before: the unverifiable claims are the source's own
    with Store(tmp_path / "src.db", counter=EstimateCounter()) as src:
        src.put("the original\n" * 30, body="a stand-in\n", keep_original=False, label="s")
        with Store(store_location) as dst:
            assert migrate(src, dst, tmp_path).added == 1
            assert dst.read("s") == "a stand-in\n"


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
        raw.execute(
            "UPDATE blocks SET codec = 'raw', data = ? WHERE hash = ?", (b"rot", bytes.fromhex(bad))
        )
    raw.close()
    missing = "0" * 64
    with Store(tmp_path / "dst.db") as dst:
        checked, failed = verify_blocks(dst, [good, bad, missing])
    assert (checked, failed) == (3, [bad, missing])


def test_the_archive_names_each_body_and_original_once(tmp_path: Path) -> None:
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
    monkeypatch.setattr("offload.store.life.migrate.VERIFY_PAGE", 2)
    with Store(store_location, counter=EstimateCounter()) as dst:
        digests = [dst.put(f"text number {i}\n").entry.block_hash for i in range(5)]
        missing = "f" * 64
        checked, failed = verify_blocks(dst, [*digests[:3], missing, *digests[3:]])
    assert (checked, failed) == (6, [missing])


def _vectors(store: Store) -> dict[tuple[str, str], tuple[str, bytes]]:
    rows = store.conn.execute(
        Sql(
            "SELECT e.scope, e.content_hash, coalesce(m.name, v.model) AS model, "
            "CAST(v.data AS BLOB) AS data FROM entries e JOIN entry_vectors v "
            "ON v.entry_id = e.id LEFT JOIN vector_models m ON m.id = v.model",
            "SELECT e.scope, e.content_hash, v.model, data AS data FROM entries e JOIN entry_vectors v ON v.entry_id = e.id",
        )
    ).fetchall()
    return {(r["scope"], hexed(r["content_hash"])): (r["model"], bytes(r["data"])) for r in rows}


def test_a_migration_carries_every_semantic_vector_and_verifies_it(
    tmp_path: Path, store_location: Path | str, model: StaticEmbedder
) -> None:
    # the target is opened without the model: what it ranks by is what was carried
    src = Store(tmp_path / "src.db", counter=EstimateCounter(), embedder=model)
    with src, Store(store_location, counter=EstimateCounter()) as dst:
        src.put("the frobnicator threshold is 42\n", scope="proj", topic="cfg")
        src.put("deploys go out on tuesdays after review\n", scope="proj")
        src.put("same words, another scope\n", scope="other")
        src.put("releases ship every week once the code is approved\n", scope="proj")
        expected = _vectors(src)
        assert len(expected) == 4
        report = migrate(src, dst, tmp_path)
        assert report.verified and report.vectors_checked == 4
        assert _vectors(dst) == expected
        assert vectors.missing(dst.conn, model.model_id) == 0  # nothing left to re-embed
        # the semantic side adds what shares no word with the question: the weekly
        # releases, closer to it than the typical entry (a question: a lookup whose rows
        # all fit on the page is answered by its words)
        question = "what is the deploy schedule?"
        ranked = [h.entry.ref for h in src.search(question, scope="proj", limit=3)]
        assert len(ranked) == 2
    with Store(store_location, counter=EstimateCounter(), embedder=model) as hybrid:
        found = [h.entry.ref for h in hybrid.search(question, scope="proj", limit=3)]
        assert found == ranked


def test_vector_verification_names_one_missing_or_different_on_the_far_side(
    tmp_path: Path, model: StaticEmbedder
) -> None:
    with Store(tmp_path / "src.db", counter=EstimateCounter(), embedder=model) as src:
        kept = src.put("a vector that arrives intact\n").entry.content_hash
        rotted = src.put("a vector that differs over there\n").entry.content_hash
        dropped = src.put("a vector that never arrived\n").entry.content_hash
        export_archive(src, tmp_path / "a.zst")
    with Store(tmp_path / "dst.db", counter=EstimateCounter()) as dst:
        import_archive(dst, tmp_path / "a.zst")
        with db.write_tx(dst.conn):
            dst.conn.execute(
                Sql("UPDATE entry_vectors SET data = ? WHERE entry_id = ?"),
                (b"\x00\x00\x80?" + b"\x01" * 300, dst.resolve(rotted).id),
            )
            dst.conn.execute(
                Sql("DELETE FROM entry_vectors WHERE entry_id = ?"),
                (dst.resolve(dropped).id,),
            )
        checked, bad = verify_vectors(dst, archive_vectors(tmp_path / "a.zst"))
    assert (checked, sorted(bad)) == (3, sorted([rotted, dropped]))
    assert kept not in bad


def test_an_archive_with_a_malformed_vector_imports_nothing(
    tmp_path: Path, model: StaticEmbedder
) -> None:
    with Store(tmp_path / "src.db", counter=EstimateCounter(), embedder=model) as src:
        src.put("first entry\n")
        src.put("second entry\n")
        export_archive(src, tmp_path / "a.zst")
    lines = _archive_lines(tmp_path / "a.zst")
    last = [line for line in lines if line.get("type") == "entry"][-1]
    last["vector"]["data"] = "not base64 !"  # the first entry alone is well formed
    _write_archive(tmp_path / "bad.zst", lines)
    with Store(tmp_path / "dst.db", counter=EstimateCounter()) as dst:
        with pytest.raises(InvalidInput, match="vector is not base64"):
            import_archive(dst, tmp_path / "bad.zst")
        assert dst.count() == 0 and _vectors(dst) == {}


def _archive_lines(path: Path) -> list[dict[str, Any]]:
    with path.open("rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as zr:
        return [json.loads(line) for line in io.TextIOWrapper(zr, encoding="utf-8")]


def _write_archive(path: Path, lines: list[dict[str, Any]]) -> None:
    text = "".join(json.dumps(line) + "\n" for line in lines)
    path.write_bytes(zstandard.ZstdCompressor().compress(text.encode("utf-8")))
