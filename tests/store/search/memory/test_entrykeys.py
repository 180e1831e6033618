"""Every entry's columns in memory (store/search/memory/entrykeys.py): SQLite files and a real
PostgreSQL server (slow tier)."""

from __future__ import annotations

import io
import itertools
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import zstandard

from offload.core.tokens import EstimateCounter
from offload.store.backend import Sql
from offload.store.life import archive
from offload.store.models import Filters
from offload.store.search.memory import entrykeys
from offload.store.search.query import filter_sql
from offload.store.store import Store
from statements import recorded_statements
from wordcorpus import built_view


def _resident(location: Path | str) -> Store:
    return Store(location, counter=EstimateCounter(), resident_mb=64)


@pytest.fixture
def store(shared_store: Path | str) -> Iterator[Store]:
    """A store with its in-memory copies, on each backend."""
    with _resident(shared_store) as s:
        yield s


@pytest.fixture
def pg_store(pg_database: str) -> Iterator[Store]:
    """The same, on PostgreSQL only."""
    with _resident(pg_database) as s:
        yield s


def _keys(store: Store) -> entrykeys.EntryKeys:
    """The store's copy, built (an event, not a sleep) and brought up to date."""
    idx = store.resident
    assert idx is not None
    idx.entry_keys.current(store.conn)  # a search's first ask starts the build
    assert idx.entry_keys.wait(60)
    got = idx.entry_keys.current(store.conn)
    assert got is not None
    return got


def test_a_full_read_holds_every_entrys_columns_and_each_scope_and_kinds_ids_in_order(
    store: Store,
) -> None:
    a = store.put("alpha one", scope="s", kind="note", salience=0.25, source="src:a").entry
    b = store.put("bravo two", scope="t", kind="note").entry
    c = store.put("charlie three", scope="s", kind="note").entry
    keys = entrykeys.read_all(store.conn)
    got = keys.get(a.id)
    assert got is not None and got[: entrykeys.USES + 1] == ("s", "note", 0.25, a.accessed, 0)
    assert got[entrykeys.SOURCE] == "src:a" and got[entrykeys.EXPIRES] is None
    assert keys.neighbours(a.id, got, 2) == ([], [c.id])
    assert keys.neighbours(c.id, got, 2) == ([a.id], [])
    assert keys.get(b.id) is not None and keys.get(c.id + 1000) is None


def test_puts_touches_and_pins_since_a_read_are_read_and_applied(store: Store) -> None:
    a = store.put("alpha one", scope="s").entry
    keys = _keys(store)
    b = store.put("bravo two", scope="s").entry
    store.touch(a.id)
    store.pin(a.ref)
    fresh = store.resident.entry_keys.current(store.conn)  # type: ignore[union-attr]
    assert fresh is not None and fresh is not keys
    got = fresh.get(a.id)
    assert got is not None and got[entrykeys.USES] == 1 and got[entrykeys.PINNED] == 1
    assert got[entrykeys.SALIENCE] == 1.0
    assert fresh.neighbours(a.id, got, 2) == ([], [b.id])
    assert keys.get(b.id) is None  # the old copy is unchanged (a search keeps its own)


def test_an_event_time_given_by_a_repeated_put_since_a_read_is_applied(store: Store) -> None:
    a = store.put("alpha one", scope="s").entry
    keys = _keys(store)
    assert keys.get(a.id)[entrykeys.EVENT_TIME] is None  # type: ignore[index]
    store.put("alpha one", scope="s", event_time=1_700_000_000.0)  # the first to say when
    fresh = store.resident.entry_keys.current(store.conn)  # type: ignore[union-attr]
    assert fresh is not None
    assert fresh.get(a.id)[entrykeys.EVENT_TIME] == 1_700_000_000.0  # type: ignore[index]


@pytest.mark.slow
def test_an_update_committed_after_a_later_one_was_read_is_still_applied(
    pg_store: Store, pg_database: str
) -> None:
    store = pg_store
    a = store.put("alpha one").entry
    b = store.put("bravo two").entry
    _keys(store)
    resident = store.resident
    assert resident is not None
    with psycopg.connect(pg_database) as slow, psycopg.connect(pg_database) as quick:
        slow.execute("UPDATE entries SET salience = 0.9 WHERE id = %s", (a.id,))
        quick.execute("UPDATE entries SET salience = 0.1 WHERE id = %s", (b.id,))
        quick.commit()
        mid = resident.entry_keys.current(store.conn)
        assert mid is not None
        assert mid.get(b.id)[entrykeys.SALIENCE] == 0.1  # type: ignore[index]
        assert mid.get(a.id)[entrykeys.SALIENCE] == 0.5  # type: ignore[index]
        slow.commit()
    after = resident.entry_keys.current(store.conn)
    assert after is not None and after.get(a.id)[entrykeys.SALIENCE] == 0.9  # type: ignore[index]


def _other_connection(location: Path | str) -> sqlite3.Connection | psycopg.Connection[Any]:
    """A connection of another process's kind to the same store (no offload code)."""
    if isinstance(location, Path):
        return sqlite3.connect(location, isolation_level=None)
    return psycopg.connect(location)


def _sql(location: Path | str, sql: str) -> str:
    return sql if isinstance(location, Path) else sql.replace("?", "%s")


def test_a_rolled_back_update_is_never_applied(store: Store, shared_store: Path | str) -> None:
    a = store.put("alpha one").entry
    _keys(store)
    resident = store.resident
    assert resident is not None
    other = _other_connection(shared_store)
    try:
        if isinstance(other, sqlite3.Connection):
            other.execute(Sql("BEGIN IMMEDIATE"))
        other.execute(
            _sql(shared_store, "UPDATE entries SET scope = 'elsewhere' WHERE id = ?"), (a.id,)
        )
        assert resident.entry_keys.current(store.conn) is not None
        other.rollback()
    finally:
        other.close()
    got = resident.entry_keys.current(store.conn)
    assert got is not None and got.get(a.id)[entrykeys.SCOPE] == ""  # type: ignore[index]


def test_a_write_by_another_connection_is_applied_before_the_next_search(
    store: Store, shared_store: Path | str
) -> None:
    a = store.put("alpha one", scope="s").entry
    b = store.put("bravo two", scope="s").entry
    held = _keys(store)
    other = _other_connection(shared_store)
    try:
        other.execute(
            _sql(shared_store, "UPDATE entries SET salience = 0.75 WHERE id = ?"), (a.id,)
        )
        other.execute(_sql(shared_store, "UPDATE entries SET expires = 5.0 WHERE id = ?"), (b.id,))
        other.commit()
    finally:
        other.close()
    got = store.resident.entry_keys.current(store.conn)  # type: ignore[union-attr]
    assert got is not None and got is not held
    assert got.get(a.id)[entrykeys.SALIENCE] == 0.75  # type: ignore[index]
    assert got.get(b.id)[entrykeys.EXPIRES] == 5.0  # type: ignore[index]
    # nothing written since: the same copy, no rows read
    assert store.resident.entry_keys.current(store.conn) is got  # type: ignore[union-attr]


def test_a_moved_entry_leaves_its_old_scopes_order_and_joins_the_new_one(
    store: Store,
) -> None:
    a = store.put("alpha one", scope="s").entry
    b = store.put("bravo two", scope="s").entry
    c = store.put("charlie three", scope="t").entry
    _keys(store)
    store.conn.execute(Sql("UPDATE entries SET scope = 't' WHERE id = ?"), (b.id,))
    got = store.resident.entry_keys.current(store.conn)  # type: ignore[union-attr]
    assert got is not None
    moved = got.get(b.id)
    assert moved is not None
    assert got.neighbours(b.id, moved, 2) == ([], [c.id])
    assert got.neighbours(a.id, got.get(a.id), 2) == ([], [])  # type: ignore[arg-type]


def test_a_forgotten_entry_drops_the_copy_and_a_search_never_shows_it(store: Store) -> None:
    store.put("Caroline said, the lake was calm", scope="chat")
    gone = store.put("Caroline said, a quokka visited", scope="chat").entry
    built_view(store)
    _keys(store)
    store.forget(gone.ref)
    assert store.resident.entry_keys.current(store.conn) is None  # type: ignore[union-attr]
    assert store.search("quokka") == []
    rebuilt = _keys(store)
    assert rebuilt.get(gone.id) is None
    assert store.search("quokka") == []


def test_the_held_filter_keeps_exactly_the_entries_the_sql_filter_keeps(store: Store) -> None:
    now = store.clock()
    for i in range(24):
        store.put(
            f"entry number {i}",
            scope=f"s{i % 3}",
            kind=("note", "log")[i % 2],
            salience=(0.1, 0.5, 0.9)[i % 3],
            source=("git:a", "git:b", "web")[i % 3],
            expires=(None, now - 5, now + 500)[i % 4 % 3],
            pinned=i % 5 == 0,
        )
    keys = _keys(store)
    ids = [int(r[0]) for r in store.conn.execute(Sql("SELECT id FROM entries")).fetchall()]
    filters = [
        Filters(),
        Filters(scope="s1"),
        Filters(scope="s2", kinds=("log",)),
        Filters(kinds=("note", "log"), min_salience=0.5),
        Filters(pinned=True),
        Filters(pinned=False, status="cold"),
        Filters(status="hot"),
        Filters(source_prefix="git:"),
        Filters(created_after=now - 1e9, created_before=now + 1e9),
        Filters(created_after=now + 1e9),
    ]
    for f in filters:
        where, params = filter_sql(f, now)
        sql = {
            int(r[0])
            for r in store.conn.execute(Sql(f"SELECT e.id FROM entries e WHERE {where}"), params)
        }
        keep = entrykeys.keeper(f, now)
        held = {i for i in ids if keep(keys.get(i))}  # type: ignore[arg-type]
        assert held == sql, f


def test_searches_with_the_copy_show_the_same_pages_as_without_it_and_read_no_entry_by_id(
    shared_store: Path | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    words = ["lake", "river", "quokka", "zebra", "garden", "violin", "support", "group"]
    texts = [
        f"{a} said, the {b} and the {c} were {d}"
        for a, b, c, d in itertools.islice(itertools.product(words, repeat=4), 300)
    ]
    with _resident(shared_store) as store:
        for i in range(0, len(texts), 50):
            store.put_many(texts[i : i + 50], scope=f"s{i // 100}", kind=("a", "b")[i // 50 % 2])
        store.touch(5)
        store.pin(store.get(7).ref)
    asks = [
        ("when did the quokka visit the lake", Filters()),
        ("zebra violin", Filters(scope="s1")),
        ("garden support group", Filters(kinds=("b",))),
        ("river lake", Filters(min_salience=0.6)),
    ]
    with _resident(shared_store) as store:
        built_view(store)
        _keys(store)
        with recorded_statements(store, monkeypatch) as ran:
            got = [[h.entry.id for h in store.search(q, f, limit=10)] for q, f in asks]
        # the filter and the neighbours from memory: no entry's row read by id but the page's
        # (the last: SQLite's neighbour order, store/search/context.py Runs)
        by_id = (
            "CROSS JOIN entries e",
            "entries s CROSS JOIN LATERAL",
            "NULL AS cid",
            "group_concat(id)",
        )
        assert not [sql for sql in ran if any(s in sql for s in by_id)]
        store.resident.entry_keys.close()  # type: ignore[union-attr]  # by id from here on
        expected = [[h.entry.id for h in store.search(q, f, limit=10)] for q, f in asks]
    assert got == expected and all(expected)


def test_sqlite_rows_stored_before_the_stamp_are_held_and_stamped_by_their_next_change(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    with _resident(path) as store:
        a = store.put("alpha one", scope="s").entry
        b = store.put("bravo two", scope="s").entry
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("UPDATE entries SET changed = NULL")  # as the migration finds old rows
    raw.close()
    with _resident(path) as store:
        held = _keys(store)
        assert held.neighbours(a.id, held.get(a.id), 2) == ([], [b.id])  # type: ignore[arg-type]
        store.touch(a.id)
        got = store.resident.entry_keys.current(store.conn)  # type: ignore[union-attr]
        assert got is not None and got.get(a.id)[entrykeys.USES] == 1  # type: ignore[index]


def test_an_export_carries_no_write_stamp(store: Store, tmp_path: Path) -> None:
    store.put("alpha one")
    path = tmp_path / "a.offload"
    assert archive.export_archive(store, path) == 1
    with path.open("rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as zr:
        records = [json.loads(line) for line in io.TextIOWrapper(zr, encoding="utf-8")]
    entries = [r for r in records if r.get("type") == "entry"]
    assert len(entries) == 1 and "changed" not in entries[0] and "scope" in entries[0]
