"""A lossy entry's kept original is searchable: put(index_original=True)."""

from __future__ import annotations

from pathlib import Path

import older_stores
from offload.core.tokens import EstimateCounter
from offload.store.backend import Sql
from offload.store.life.archive import export_archive, import_archive
from offload.store.life.maintenance import doctor, reindex
from offload.store.store import Store

ORIGINAL = "".join(f"step {i}: move the rows in order\n" for i in range(1, 80))
ORIGINAL += "step 80: the quokka table goes last, after the index rebuild\n"
LOSSY = "a migration plan in 80 steps\nrows first, indexes last\n"


def _chunks(store: Store) -> int:
    return int(
        store.conn.execute(
            Sql(
                "SELECT count(*) FROM chunks",
                "SELECT CASE WHEN c.reltuples >= 100000 THEN c.reltuples::bigint ELSE (SELECT count(*) FROM chunks) END AS n FROM pg_class c WHERE c.oid = 'chunks'::regclass",
            )
        ).fetchone()[0]
    )


def test_a_word_only_in_the_original_finds_the_lossy_entry_and_the_hit_says_so(
    store: Store,
) -> None:
    entry = store.put(ORIGINAL, body=LOSSY, index_original=True, topic="plan").entry
    assert entry.compressed
    [hit] = store.search("quokka")
    assert hit.entry.id == entry.id and hit.in_original
    # the line numbers and text are the original's, where the word is
    assert hit.match_line == 80 and "quokka table goes last" in hit.snippet
    assert "quokka" in hit.text and "quokka" not in store.body(entry)
    [body_hit] = store.search("indexes last")
    assert body_hit.entry.id == entry.id and not body_hit.in_original
    assert body_hit.match_line == 2


def test_an_original_kept_without_index_original_stays_out_of_search(store: Store) -> None:
    # the proxy keeps exact JSON beside the indexed transcript it searches
    store.put(ORIGINAL, body=LOSSY, topic="plan")
    assert store.search("quokka") == []
    assert store.search("indexes last")


def test_forgetting_a_lossy_entry_drops_its_originals_index_rows(store: Store) -> None:
    entry = store.put(ORIGINAL, body=LOSSY, index_original=True).entry
    assert _chunks(store) > 1
    store.forget(entry.ref, reason="done")
    assert _chunks(store) == 0 and store.search("quokka") == []
    assert doctor(store).clean


def test_reindex_keeps_indexed_originals_indexed_and_the_others_not(store: Store) -> None:
    store.put(ORIGINAL, body=LOSSY, index_original=True, scope="mcp")
    store.put(ORIGINAL.replace("quokka", "wombat"), body=LOSSY + "x\n", scope="proxy")
    done = reindex(store)
    assert done.indexed == 3 and not done.skipped  # two bodies, one original
    assert [h.in_original for h in store.search("quokka")] == [True]
    assert store.search("wombat") == []
    assert doctor(store).clean


def test_export_then_import_keeps_which_originals_are_indexed(tmp_path: Path, store: Store) -> None:
    store.put(ORIGINAL, body=LOSSY, index_original=True, scope="mcp")
    store.put(ORIGINAL.replace("quokka", "wombat"), body=LOSSY + "x\n", scope="proxy")
    archive = tmp_path / "a.offload"
    export_archive(store, archive)
    with Store(tmp_path / "other.db", counter=EstimateCounter()) as dst:
        import_archive(dst, archive)
        assert [h.in_original for h in dst.search("quokka")] == [True]
        assert dst.search("wombat") == []


def test_opening_an_older_store_indexes_the_originals_of_mcp_compressions(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path, counter=EstimateCounter()) as store:
        # as an older offload stored them: originals kept, never indexed
        store.put(ORIGINAL, body=LOSSY, source="mcp")
        store.put(ORIGINAL.replace("quokka", "wombat"), body=LOSSY + "x\n", source="proxy:s1")
        assert store.search("quokka") == []
        store.conn.execute(
            Sql("DELETE FROM _migrations WHERE name = 'm_index_mcp_lossy_originals'")
        )
        older_stores.hashes_as_hex(store.conn)
        store.conn.commit()
    with Store(path, counter=EstimateCounter()) as store:
        assert [h.in_original for h in store.search("quokka")] == [True]
        assert store.search("wombat") == []
        assert doctor(store).clean


def test_a_store_older_than_the_cached_term_counts_opens_and_indexes_its_mcp_originals(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    with Store(path, counter=EstimateCounter()) as store:
        store.put(ORIGINAL, body=LOSSY, source="mcp")
        # the schema before chunks cached their term counts, and before originals were indexed
        store.conn.execute(Sql("ALTER TABLE chunks DROP COLUMN term_counts"))
        store.conn.execute(Sql("ALTER TABLE chunks DROP COLUMN packed_counts"))
        store.conn.execute(
            Sql(
                "DELETE FROM _migrations WHERE name IN ('m_index_mcp_lossy_originals', "
                "'m_chunk_term_counts', 'm_chunk_term_counts_length', 'm_chunk_term_counts_packed')"
            )
        )
        older_stores.hashes_as_hex(store.conn)
        store.conn.commit()
    with Store(path, counter=EstimateCounter()) as store:
        assert [h.in_original for h in store.search("quokka")] == [True]
        # no chunk of that schema has cached counts: they are scored from their text
        uncached = store.conn.execute(Sql("SELECT count(*) FROM chunks WHERE term_counts IS NULL"))
        assert uncached.fetchone()[0] == _chunks(store) > 1
        assert doctor(store).clean
