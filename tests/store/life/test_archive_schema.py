"""Crafted archives (tests/data/archives) are refused by the library whole: one line, the
store unchanged (both backends); every hash an entry claims is checked against its bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import zstandard

from offload.core.hashing import text_hash
from offload.core.tokens import EstimateCounter
from offload.errors import InvalidInput
from offload.store.backend import Sql
from offload.store.life.archive import export_archive, import_archive
from offload.store.life.archive_schema import READS, VERSION
from offload.store.store import Store

CORPUS = Path(__file__).resolve().parents[2] / "data" / "archives"
HOSTILE = sorted(p.name for p in CORPUS.glob("*.offload") if p.name != "valid.offload")
assert HOSTILE, f"no crafted archives in {CORPUS}"
# what a store holds, table by table: compared before and after a refused import
TABLES = (
    "entries", "blocks", "labels", "tombstones", "tombstone_labels", "chunks", "terms",
    "state", "counters", "tallies", "entry_vectors",
)  # fmt: skip
REAL = "the deploy key lives in vault path secret/deploy\n"  # make_corpus.REAL


def dump(store: Store) -> dict[str, list[tuple[str, ...]]]:
    """Every row of every table, as text, in order."""
    out: dict[str, list[tuple[str, ...]]] = {}
    for table in TABLES:
        rows = store.conn.execute(Sql(f"SELECT * FROM {table}")).fetchall()
        out[table] = sorted(
            tuple(repr(bytes(v) if isinstance(v, memoryview) else v) for v in r) for r in rows
        )
    return out


def _seed(store: Store) -> None:
    store.put(REAL, scope="proj", label="deploy")
    store.put("another note\n", scope="proj")
    store.forget(store.put("forgotten\n", scope="proj").entry.ref, reason="test", scope="proj")
    store.put_state("ns", "k", {"v": 1})
    store.next_number("fs__read")


def test_the_corpus_holds_each_kind_of_crafted_archive() -> None:
    for kind in (
        "spoofed-content-hash", "spoofed-block-hash", "spoofed-original-hash",
        "sql-in-tombstone-keys", "bad-type-tokens", "unknown-key", "int-over-2-63-counter",
        "record-is-a-list", "record-is-a-string", "null-scope", "truncated", "truncated-at-a-line",
        "corrupt-data", "counter-at-int64-max",
    ):  # fmt: skip
        assert f"{kind}.offload" in HOSTILE
    assert all((CORPUS / name).stat().st_size < 4096 for name in HOSTILE)


@pytest.mark.parametrize("name", HOSTILE)
def test_a_crafted_archive_is_refused_in_one_line_and_changes_nothing(
    store_location: Path | str, name: str
) -> None:
    with Store(store_location, counter=EstimateCounter()) as store:
        _seed(store)
        before = dump(store)
        with pytest.raises(InvalidInput) as info:
            import_archive(store, CORPUS / name)
        assert "\n" not in str(info.value) and name in str(info.value)
        assert dump(store) == before
        assert store.read("deploy", scope="proj") == REAL


def test_an_archive_in_the_shape_of_the_first_exports_still_imports(
    store_location: Path | str,
) -> None:
    with Store(store_location, counter=EstimateCounter()) as store:
        assert import_archive(store, CORPUS / "valid.offload") == 2
        assert store.read("early", scope="proj") == "an entry from an early offload\n"
        assert store.read("honest", scope="proj").startswith("an honest note")
        assert store.get_state("ns", "k") == {}


def test_a_spoofed_content_hash_never_takes_the_real_contents_reference(
    store_location: Path | str,
) -> None:
    with Store(store_location, counter=EstimateCounter()) as store:
        with pytest.raises(InvalidInput, match="cannot be verified"):
            import_archive(store, CORPUS / "spoofed-content-hash.offload")
        put = store.put(REAL, scope="proj")  # stored anew, not deduplicated onto the spoof
        assert put.created and store.read(put.entry.ref, scope="proj") == REAL
        assert put.entry.content_hash == put.entry.block_hash == text_hash(REAL)


def test_a_lossy_entry_without_its_original_imports_only_when_accepted(
    tmp_path: Path, store_location: Path | str
) -> None:
    with Store(tmp_path / "src.db", counter=EstimateCounter()) as src:
        src.put("the long original\n" * 20, body="a summary\n", keep_original=False, label="s")
        export_archive(src, tmp_path / "a.offload")
    with Store(store_location, counter=EstimateCounter()) as store:
        with pytest.raises(InvalidInput, match="--accept-unverified"):
            import_archive(store, tmp_path / "a.offload")
        assert store.count() == 0
        assert import_archive(store, tmp_path / "a.offload", accept_unverified=True) == 1
        assert store.read("s") == "a summary\n"


def test_an_archive_never_moves_a_label_the_store_gives_another_entry(
    store_location: Path | str, tmp_path: Path
) -> None:
    theirs = "the archive's text\n"
    with Store(tmp_path / "src.db", counter=EstimateCounter()) as src:
        src.put(theirs, scope="proj", label="deploy")
        src.put("more\n", scope="proj", label="fresh")
        export_archive(src, tmp_path / "a.offload")
    with Store(store_location, counter=EstimateCounter()) as store:
        _seed(store)  # "deploy" names REAL here
        assert import_archive(store, tmp_path / "a.offload") == 2
        assert store.read("deploy", scope="proj") == REAL
        assert store.read("fresh", scope="proj") == "more\n"
        assert store.read(f"ctx:sha256:{text_hash(theirs)}", scope="proj") == theirs


def test_an_export_writes_the_version_that_marks_4_bit_vectors(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db", counter=EstimateCounter()) as store:
        store.put("a note\n", scope="proj")
        export_archive(store, tmp_path / "out.offload")
    with zstandard.ZstdDecompressor().stream_reader((tmp_path / "out.offload").open("rb")) as r:
        header = json.loads(r.read(200).split(b"\n", 1)[0])
    assert header == {"format": "offload-archive", "version": VERSION}
    assert VERSION == 2 and READS == (1, 2)


@pytest.mark.parametrize("version", [True, 1.0, "2", 3, 0])
def test_a_header_naming_a_version_not_read_here_is_refused(
    tmp_path: Path, version: object
) -> None:
    archive = tmp_path / "v.offload"
    head = json.dumps({"format": "offload-archive", "version": version}).encode() + b"\n"
    archive.write_bytes(zstandard.ZstdCompressor().compress(head))
    with (
        Store(tmp_path / "a.db", counter=EstimateCounter()) as store,
        pytest.raises(InvalidInput, match="is not supported"),
    ):
        import_archive(store, archive)


def test_an_archive_of_a_newer_version_says_a_newer_offload_wrote_it(tmp_path: Path) -> None:
    archive = tmp_path / "v.offload"
    head = json.dumps({"format": "offload-archive", "version": max(READS) + 1}).encode() + b"\n"
    archive.write_bytes(zstandard.ZstdCompressor().compress(head))
    with (
        Store(tmp_path / "a.db", counter=EstimateCounter()) as store,
        pytest.raises(InvalidInput, match="a newer offload wrote it; import it with that version"),
    ):
        import_archive(store, archive)
