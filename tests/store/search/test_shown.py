"""The chunks one search reads (store/search/shown.py): each read once, several in one go."""

from __future__ import annotations

import pytest

from offload.store.backend import Sql
from offload.store.search.shown import ShownChunks
from offload.store.store import Store
from statements import recorded_statements


def test_chunks_named_by_id_and_entries_first_chunks_are_read_together_and_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = store.put("one\n" * 3).entry
    second = store.put("two\n" * 3).entry
    ids = [int(r[0]) for r in store.conn.execute(Sql("SELECT id FROM chunks ORDER BY id"))]
    shown = ShownChunks(store)
    with recorded_statements(store, monkeypatch) as ran:
        shown.read([(first.id, ids[0]), (second.id, None)])
    assert 0 < len(ran) <= 3  # by id, first chunks, their blocks
    assert shown.text(first.id, ids[0]) == "one\n" * 3
    assert shown.text(second.id, None) == "two\n" * 3
    row = shown.row(second.id, None)
    assert row is not None and int(row["start_line"]) == 1
    with recorded_statements(store, monkeypatch) as again:
        shown.read([(first.id, ids[0]), (second.id, None), (second.id, ids[1])])
    assert again == []


def test_a_chunk_that_no_longer_exists_reads_as_none(store: Store) -> None:
    e = store.put("gone soon\n").entry
    shown = ShownChunks(store)
    shown.read([(e.id, 10**9), (10**9, None)])
    assert shown.text(e.id, 10**9) is None and shown.row(10**9, None) is None
