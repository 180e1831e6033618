"""PostgreSQL's entries' columns in memory (store/entrykeys.py), on a real server."""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import zstandard

from offload.core.tokens import EstimateCounter
from offload.store import archive, entrykeys
from offload.store.models import Filters
from offload.store.query import filter_sql
from offload.store.store import Store
from statements import recorded_statements
from wordcorpus import built_view

pytestmark = pytest.mark.slow


def _resident(url: str) -> Store:
    return Store(url, counter=EstimateCounter(), resident_mb=64)


@pytest.fixture
def store(pg_database: str) -> Iterator[Store]:
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


def test_an_update_committed_after_a_later_one_was_read_is_still_applied(
    store: Store, pg_database: str
) -> None:
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


def test_a_rolled_back_update_is_never_applied(store: Store, pg_database: str) -> None:
    a = store.put("alpha one").entry
    _keys(store)
    resident = store.resident
    assert resident is not None
    with psycopg.connect(pg_database) as other:
        other.execute("UPDATE entries SET scope = 'elsewhere' WHERE id = %s", (a.id,))
        assert resident.entry_keys.current(store.conn) is not None
        other.rollback()
    got = resident.entry_keys.current(store.conn)
    assert got is not None and got.get(a.id)[entrykeys.SCOPE] == ""  # type: ignore[index]


def test_a_moved_entry_leaves_its_old_scopes_order_and_joins_the_new_one(
    store: Store,
) -> None:
    a = store.put("alpha one", scope="s").entry
    b = store.put("bravo two", scope="s").entry
    c = store.put("charlie three", scope="t").entry
    _keys(store)
    store.conn.execute("UPDATE entries SET scope = 't' WHERE id = ?", (b.id,))
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
    ids = [int(r[0]) for r in store.conn.execute("SELECT id FROM entries").fetchall()]
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
            for r in store.conn.execute(f"SELECT e.id FROM entries e WHERE {where}", params)
        }
        keep = entrykeys.keeper(f, now)
        held = {i for i in ids if keep(keys.get(i))}  # type: ignore[arg-type]
        assert held == sql, f


def test_searches_with_the_copy_show_the_same_pages_as_without_it_and_read_no_entry_by_id(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    words = ["lake", "river", "quokka", "zebra", "garden", "violin", "support", "group"]
    texts = [
        f"{a} said, the {b} and the {c} were {d}"
        for a, b, c, d in itertools.islice(itertools.product(words, repeat=4), 300)
    ]
    with _resident(pg_database) as store:
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
    with _resident(pg_database) as store:
        built_view(store)
        _keys(store)
        with recorded_statements(store, monkeypatch) as ran:
            got = [[h.entry.id for h in store.search(q, f, limit=10)] for q, f in asks]
        # the filter and the neighbours from memory: no entry's row read by id but the page's
        assert not [
            sql
            for sql in ran
            if "CROSS JOIN entries e" in sql or "entries s CROSS JOIN LATERAL" in sql
        ]
        store.resident.entry_keys.close()  # type: ignore[union-attr]  # by id from here on
        expected = [[h.entry.id for h in store.search(q, f, limit=10)] for q, f in asks]
    assert got == expected and all(expected)


def test_an_export_carries_no_write_stamp(store: Store, tmp_path: Path) -> None:
    store.put("alpha one")
    path = tmp_path / "a.offload"
    assert archive.export_archive(store, path) == 1
    with path.open("rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as zr:
        records = [json.loads(line) for line in io.TextIOWrapper(zr, encoding="utf-8")]
    entries = [r for r in records if r.get("type") == "entry"]
    assert len(entries) == 1 and "changed" not in entries[0] and "scope" in entries[0]
