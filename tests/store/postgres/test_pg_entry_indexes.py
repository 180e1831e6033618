"""The entries' indexes a PostgreSQL store keeps (migration pg_entry_indexes_trimmed), on a
real server: the two no statement needs are gone, an older store loses them and answers
the same, and the statements they served still seek an index."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from offload.core.tokens import EstimateCounter
from offload.store.backend import Sql
from offload.store.life import lifecycle
from offload.store.models import Filters
from offload.store.search import context, query
from offload.store.store import Store

pytestmark = pytest.mark.slow

_TEXTS = [
    "Caroline said, the adoption agency called back about the interview",
    "Melanie said, I painted a sunrise over the lake last weekend",
    "the build broke on the main branch after the config change",
    "we adopted a puppy from the shelter near the beach",
]
_KEPT = {
    "entries_pkey",
    "entries_dedup",
    "entries_block",
    "entries_rank",
    "entries_scope_rank",
    "entries_expires",
    "entries_hot",
    "entries_sequence",
    "entries_changed",
}
_GONE = {"entries_scope_stats", "entries_source"}
# the release before's indexes, as pg001_initial made them
_BEFORE = (
    "CREATE INDEX entries_scope_stats ON entries(scope, kind, status, pinned, tokens, expires)",
    "CREATE INDEX entries_source ON entries(source)",
    "DROP INDEX entries_sequence",
    "CREATE INDEX entries_sequence ON entries(scope, kind, id)",
    "DELETE FROM _migrations WHERE name = 'pg_entry_indexes_trimmed'",
)


def _indexes(url: str) -> dict[str, str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x "
            "JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = 'entries'::regclass"
        ).fetchall()
    return {str(r[0]): str(r[1]) for r in rows}


def _answers(store: Store) -> tuple[object, ...]:
    return (
        [e.id for e in store.entries()],
        [e.id for e in store.entries(Filters(scope="a"))],
        store.count(Filters(scope="a")),
        store.count(Filters(scope="a", kinds=("text",))),
        store.peek(),
        [[h.entry.id for h in store.search(q)] for q in ("adoption", "puppy beach", "build")],
    )


def test_a_new_store_keeps_only_the_entries_indexes_its_statements_use(pg_database: str) -> None:
    with Store(pg_database, counter=EstimateCounter()):
        pass
    got = _indexes(pg_database)
    assert set(got) == _KEPT
    assert got["entries_sequence"].endswith("(scope, kind, id) INCLUDE (expires)")


def test_an_existing_store_loses_the_two_indexes_and_answers_the_same(pg_database: str) -> None:
    with Store(pg_database, counter=EstimateCounter()) as store:
        store.put_many(_TEXTS[:2], scope="a")
        store.put_many(_TEXTS[2:], scope="b", source="notes.md")
        want = _answers(store)
    with psycopg.connect(pg_database, autocommit=True) as conn:
        for sql in _BEFORE:
            conn.execute(sql)
    assert set(_indexes(pg_database)) >= _GONE
    with Store(pg_database, counter=EstimateCounter()) as store:
        assert set(_indexes(pg_database)) == _KEPT
        assert _answers(store) == want
        assert lifecycle.forget_where(store, source="notes.md", scope="b", keep=[], reason="t") == 2


def _plan(conn: psycopg.Connection[Any], sql: str, params: list[Any]) -> str:
    rows = conn.execute(f"EXPLAIN (COSTS OFF) {sql}", params).fetchall()
    return " / ".join(str(r[0]).strip() for r in rows)


def test_the_statements_the_dropped_indexes_served_still_seek_an_index(pg_database: str) -> None:
    with Store(pg_database, counter=EstimateCounter()) as store:
        for s in ("a", "b", "c"):
            store.put_many([f"{t} ({s})" for t in _TEXTS], scope=s, source="notes.md")
        first = store.entries(Filters(scope="b"))[0].id
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE entries")  # the visibility map an index-only scan reads
        # a table this small is read whole by choice: ask what an index can serve
        conn.execute("SET enable_seqscan = off")
        # a filter by scope and kind is counted and listed on entries_sequence alone
        for f in (Filters(scope="a"), Filters(scope="a", kinds=("text",))):
            where, params = query.filter_sql(f, 0.0)
            for sql in (
                f"SELECT count(*) FROM entries e WHERE {where}",
                f"SELECT e.id FROM entries e WHERE {where}",
            ):
                plan = _plan(conn, Sql(sql).postgres, params)
                assert "Index Only Scan using entries_sequence" in plan, plan
        # forget_where's read: its scope sought, the source checked on the rows
        plan = _plan(conn, "SELECT id FROM entries WHERE source = %s AND scope = %s", ["n", "a"])
        assert "entries_sequence" in plan, plan
        # a hit's neighbours on each side: a seek of the same index
        for side in (context.NEIGHBOURS_BEFORE, context.NEIGHBOURS_AFTER):
            plan = _plan(conn, side.postgres, [4, f"[{first}]"])
            assert "Index Only Scan" in plan and "using entries_sequence" in plan, plan
