"""PostgreSQL's migrations (store/postgres/pgschema.py), on a real server."""

from __future__ import annotations

import pytest

from offload.core.tokens import EstimateCounter
from offload.store.backend import Sql
from offload.store.store import Store

pytestmark = pytest.mark.slow


def test_a_new_store_leaves_its_entries_unanalysed_so_first_plans_assume_rows(
    pg_database: str,
) -> None:
    # an ANALYZE of the empty table records it as empty (reltuples 0), and the plans the
    # first puts cached were those for an empty table (docs/benchmarks/team-store.md)
    with Store(pg_database, counter=EstimateCounter()) as store:
        row = store.conn.execute(
            Sql("SELECT reltuples FROM pg_class WHERE oid = 'entries'::regclass")
        ).fetchone()
        assert row is not None and float(row[0]) < 0  # never analysed
        store.put("alpha bravo")
        assert [h.entry.id for h in store.search("alpha")] == [1]


def test_big_chunk_rows_are_compressed_with_lz4_and_blocks_are_not_compressed_again(
    pg_database: str,
) -> None:
    # a 100 KB log: every chunk's counts and vector pass TOAST's 2 KB threshold
    lines = [
        f"2026-11-{i % 28 + 1:02d} worker{i} processed request {i * 7919} in {i}ms"
        for i in range(3000)
    ]
    with Store(pg_database, counter=EstimateCounter()) as store:
        store.put("\n".join(lines))
        sql = store.conn.execute
        counts = sql(
            Sql.postgres_only(
                "SELECT DISTINCT pg_column_compression(term_counts) FROM chunks "
                "WHERE pg_column_size(term_counts) < octet_length(term_counts)"
            )
        ).fetchall()
        vectors = sql(
            Sql.postgres_only(
                "SELECT DISTINCT pg_column_compression(terms) FROM search_body "
                "WHERE pg_column_compression(terms) IS NOT NULL"
            )
        ).fetchall()
        storage = sql(
            Sql.postgres_only(
                "SELECT attstorage FROM pg_attribute WHERE attrelid = 'blocks'::regclass "
                "AND attname = 'data'"
            )
        ).fetchone()
        block = sql(Sql.postgres_only("SELECT pg_column_compression(data) FROM blocks")).fetchone()
    assert [r[0] for r in counts] == ["lz4"]
    assert [r[0] for r in vectors] == ["lz4"]
    assert storage is not None and storage[0] == "e"  # external: out of line, as it is
    assert block is not None and block[0] is None  # zstd bytes not compressed again
