"""PostgreSQL's migrations (store/pgschema.py), on a real server."""

from __future__ import annotations

import pytest

from offload.core.tokens import EstimateCounter
from offload.store.store import Store

pytestmark = pytest.mark.slow


def test_a_new_store_leaves_its_entries_unanalysed_so_first_plans_assume_rows(
    pg_database: str,
) -> None:
    # an ANALYZE of the empty table records it as empty (reltuples 0), and the plans the
    # first puts cached were those for an empty table (docs/benchmarks/team-store.md, session 10)
    with Store(pg_database, counter=EstimateCounter()) as store:
        row = store.conn.execute(
            "SELECT reltuples FROM pg_class WHERE oid = 'entries'::regclass"
        ).fetchone()
        assert row is not None and float(row[0]) < 0  # never analysed
        store.put("alpha bravo")
        assert [h.entry.id for h in store.search("alpha")] == [1]
