"""The portable archive: an export reads entries a page at a time and writes exactly what
reading each entry alone gives (both backends)."""

from __future__ import annotations

import base64
import io
import json
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zstandard

from offload.core.tokens import EstimateCounter
from offload.errors import InvalidInput
from offload.llm.embedding import StaticEmbedder
from offload.store.backend import Sql
from offload.store.life import archive
from offload.store.life.archive import export_archive, import_archive
from offload.store.models import Filters
from offload.store.schema import hexed
from offload.store.store import Store

EVENT_TIME = 1683554160.0  # 2023-05-08T13:56:00Z


def _fill(store: Store) -> None:
    """Entries of every shape: several labels, a lossy body beside its original, vectors,
    one forgotten, one with an event time, more than one export page of them."""
    for i in range(7):
        put = store.put(
            f"note {i}: the frobnicator threshold is {40 + i}\n",
            scope="proj",
            event_time=EVENT_TIME if i == 3 else None,
        )
        for name in (f"z-note-{i}", f"a-note-{i}", f"m-note-{i}"):  # not in sorted order
            store.label(put.entry.ref, name, scope="proj")
    store.put(
        "a long original tool output\n" * 50,
        body="a short lossy summary of it\n",
        scope="proj",
        kind="tool-output",
        label="lossy",
    )
    gone = store.put("an entry that gets forgotten\n", scope="proj").entry
    store.forget(gone.ref, reason="obsolete", scope="proj")
    store.put("the same text in another scope\n", scope="other", tags=("a", "b"))


def _alone(store: Store) -> list[dict[str, Any]]:
    """Each entry's record as reading it alone gives it (the export's former queries)."""
    conn = store.conn
    out: list[dict[str, Any]] = []
    for row in conn.execute(Sql("SELECT * FROM entries ORDER BY id")).fetchall():
        labels = [
            r[0]
            for r in conn.execute(Sql("SELECT label FROM labels WHERE entry_id = ?"), (row["id"],))
        ]
        # the store's own columns (PostgreSQL's write stamp too: pgschema.pg_entry_changes,
        # and SQLite's stored form of block_hash: store/schema.py)
        skip = ("id", "nonce", "owner_pid", "owner_host", "changed", "block_own")
        rec = {k: row[k] for k in row.keys() if k not in skip}  # noqa: SIM118
        content, body = hexed(row["content_hash"]), hexed(row["block_hash"])
        rec.update(content_hash=content, block_hash=body)
        rec.update(type="entry", labels=labels, body=store.block_text(body))
        if content != body and store.has_block(content):
            rec["original"] = store.block_text(content)
            block = store.block_id(content)
            rec["original_indexed"] = (
                conn.execute(Sql("SELECT 1 FROM chunks WHERE block_id = ?"), (block,)).fetchone()
                is not None
            )
        vector = conn.execute(
            Sql(
                "SELECT coalesce(m.name, v.model) AS model, CAST(v.data AS BLOB) AS data "
                "FROM entry_vectors v LEFT JOIN vector_models m ON m.id = v.model "
                "WHERE v.entry_id = ?",
                "SELECT model, data AS data FROM entry_vectors WHERE entry_id = %s",
            ),
            (row["id"],),
        ).fetchone()
        if vector is not None:
            data = base64.b64encode(bytes(vector["data"])).decode("ascii")
            rec["vector"] = {"model": vector["model"], "data": data}
        out.append(rec)
    return out


def _entries(path: Path) -> list[dict[str, Any]]:
    with path.open("rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as zr:
        lines = [json.loads(line) for line in io.TextIOWrapper(zr, encoding="utf-8")]
    return [r for r in lines if r.get("type") == "entry"]


def test_an_export_in_pages_writes_each_entry_as_reading_it_alone_gives_it(
    store_location: Path | str,
    tmp_path: Path,
    model: StaticEmbedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(archive, "EXPORT_PAGE", 3)  # pages end inside the labelled run
    with Store(store_location, counter=EstimateCounter(), embedder=model) as store:
        _fill(store)
        expected = _alone(store)
        assert export_archive(store, tmp_path / "a.zst") == len(expected) == 9
    got = _entries(tmp_path / "a.zst")
    assert got == json.loads(json.dumps(expected))
    assert any(len(r["labels"]) == 3 for r in got)
    assert any("original" in r for r in got) and all("vector" in r for r in got)


@pytest.mark.sqlite_only
def test_an_export_reads_a_few_statements_per_page_not_per_entry(
    store_location: Path | str, tmp_path: Path, model: StaticEmbedder
) -> None:
    with Store(store_location, counter=EstimateCounter(), embedder=model) as store:
        for i in range(120):
            store.put(f"entry {i} with a label\n", label=f"e{i}", body=f"lossy {i}\n")
        assert isinstance(store.conn, sqlite3.Connection)
        statements: list[str] = []
        store.conn.set_trace_callback(statements.append)
        export_archive(store, tmp_path / "a.zst")
        store.conn.set_trace_callback(None)
    entry_reads = [s for s in statements if "entries" in s or "labels" in s or "blocks" in s]
    assert len(entry_reads) <= 12, entry_reads  # one page of 120: was ~6 per entry


def test_an_imported_value_of_a_key_deleted_in_the_target_takes_a_new_version(
    store_location: Path | str, tmp_path: Path
) -> None:
    with Store(tmp_path / "src.db", counter=EstimateCounter()) as src:
        src.put_state("ns", "k", "carried")
        export_archive(src, tmp_path / "a.zst")
    with Store(store_location, counter=EstimateCounter()) as target:
        target.put_state("ns", "k", "old")
        assert target.put_state("ns", "k", "older") == 2
        target.delete_state("ns", "k")
        deleted = target.state_version("ns", "k")
        import_archive(target, tmp_path / "a.zst")
        value, version = target.get_state_versioned("ns", "k")
    assert value == "carried" and version > deleted


def test_an_archive_exported_now_round_trips_byte_exact(
    store_location: Path | str, tmp_path: Path, model: StaticEmbedder
) -> None:
    with Store(tmp_path / "src.db", counter=EstimateCounter(), embedder=model) as src:
        _fill(src)
        src.put_state("proxy", "s", {"frontier": 3})
        src.next_number("fs__read")
        src.add_tally("gateway-usage", "calls", {"git": 4})
        export_archive(src, tmp_path / "a.zst")
    with Store(store_location, counter=EstimateCounter(), embedder=model) as target:
        assert import_archive(target, tmp_path / "a.zst") == 9
        export_archive(target, tmp_path / "b.zst")
    first, again = _text(tmp_path / "a.zst"), _text(tmp_path / "b.zst")
    assert (
        again == first and len(first) == 15
    )  # with a tombstone, state, counter, tally, the last newline


def test_an_entrys_event_time_travels_through_an_archive(
    store_location: Path | str, tmp_path: Path
) -> None:
    with Store(tmp_path / "src.db", counter=EstimateCounter()) as src:
        _fill(src)
        export_archive(src, tmp_path / "a.zst")
    dated = [r for r in _entries(tmp_path / "a.zst") if r.get("event_time") is not None]
    assert [r["body"] for r in dated] == ["note 3: the frobnicator threshold is 43\n"]
    with Store(store_location, counter=EstimateCounter()) as target:
        import_archive(target, tmp_path / "a.zst")
        entry = target.resolve("ctx:sha256:" + dated[0]["content_hash"], "proj")
        others = [e.event_time for e in target.entries(Filters(scope="proj")) if e.id != entry.id]
    assert entry.event_time == EVENT_TIME
    assert others and set(others) == {None}


def _text(path: Path) -> list[str]:
    """An archive's lines, byte for byte, but the state row each store writes itself when
    it builds its index (``search.index``: when this store's index was built)."""
    with path.open("rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as zr:
        lines = io.TextIOWrapper(zr, encoding="utf-8", newline="").read().split("\n")
    return [line for line in lines if '"namespace": "search.index"' not in line]


def _records(path: Path) -> list[dict[str, Any]]:
    with path.open("rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as zr:
        return [json.loads(line) for line in io.TextIOWrapper(zr, encoding="utf-8")]


def test_an_export_of_one_scope_carries_its_entries_and_tombstones_alone(
    store_location: Path | str, tmp_path: Path
) -> None:
    with Store(store_location, counter=EstimateCounter()) as store:
        _fill(store)
        store.put_state("proxy", "s", {"frontier": 3})
        store.next_number("fs__read")
        assert export_archive(store, tmp_path / "a.zst", scope="proj") == 8
        assert export_archive(store, tmp_path / "none.zst", scope="nowhere") == 0
    records = _records(tmp_path / "a.zst")
    kinds = [r.get("type") for r in records[1:]]
    assert kinds == ["entry"] * 8 + ["tombstone"]
    assert {r["scope"] for r in records[1:]} == {"proj"}
    assert [r.get("type") for r in _records(tmp_path / "none.zst")] == [None]  # the header


def test_an_import_into_a_scope_moves_every_entry_there_and_leaves_store_wide_records_out(
    store_location: Path | str, tmp_path: Path
) -> None:
    with Store(tmp_path / "src.db", counter=EstimateCounter()) as src:
        _fill(src)
        src.put_state("proxy", "s", {"frontier": 3})
        export_archive(src, tmp_path / "a.zst")
    with Store(store_location, counter=EstimateCounter()) as target:
        assert import_archive(target, tmp_path / "a.zst", scope="mine") == 9
        assert target.scope_counts() == {"mine": 9}
        note = target.resolve("z-note-2", "mine")
        assert target.read(note.ref, "mine").startswith("note 2:")
        tombstones = target.conn.execute(Sql("SELECT scope FROM tombstones")).fetchall()
        assert [r[0] for r in tombstones] == ["mine"]
        assert target.get_state_versioned("proxy", "s")[0] is None
        # the same archive again into the same scope adds nothing (dedup by content)
        assert import_archive(target, tmp_path / "a.zst", scope="mine") == 0


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        store.put("an entry to export", scope="proj")
        yield store


def test_an_export_over_a_fifo_is_refused_and_leaves_it_a_fifo(
    small: Store, tmp_path: Path
) -> None:
    # renaming over a FIFO or a device removes it (as root, /dev/full itself)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(InvalidInput, match="is a FIFO, not a file"):
        export_archive(small, fifo)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe", "s.db", "s.db-shm", "s.db-wal"]


def test_an_export_never_writes_through_a_link_planted_at_a_temporary_name(
    small: Store, tmp_path: Path
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    target = tmp_path / "backup.zst"
    (tmp_path / "backup.zst.partial").symlink_to(victim)  # the name an export once used
    assert export_archive(small, target) == 1
    assert victim.read_text() == "keep me\n"
    assert [r["type"] for r in _records(target) if r.get("type") == "entry"] == ["entry"]


def test_an_exported_archive_is_readable_by_its_owner_alone_and_replaces_a_link(
    small: Store, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("untouched\n")
    link = tmp_path / "backup.zst"
    link.symlink_to(elsewhere)
    export_archive(small, link)
    assert not link.is_symlink() and stat.S_IMODE(link.stat().st_mode) == 0o600
    assert elsewhere.read_text() == "untouched\n"
