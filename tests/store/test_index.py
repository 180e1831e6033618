"""store.index: the analysed search index and the record of what built it."""

from __future__ import annotations

from pathlib import Path

from offload.core.tokens import EstimateCounter
from offload.store import index, state
from offload.store.db import write_tx
from offload.store.store import Store


def test_rebuilding_the_index_raises_the_version_of_its_record(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        store.put("the deploy failed because the disk was full")
        conn = store.conn
        before = state.version(conn, "search.index", "analysis_version")
        with write_tx(conn):
            index.reindex_chunks(conn)
        assert state.version(conn, "search.index", "analysis_version") == before + 1
        assert index.built_with_current_analysis(conn)
        assert [h.entry.id for h in store.search("disk full")] == [1]
