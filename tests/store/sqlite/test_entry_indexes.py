"""The entries' indexes and stamp trigger a store keeps (migration m_entry_indexes_trimmed):
two indexes no statement needed are gone, and an insert carries its change stamp."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import older_stores
from offload.core.tokens import EstimateCounter
from offload.store.life import lifecycle
from offload.store.life.maintenance import doctor
from offload.store.models import Filters
from offload.store.search import query
from offload.store.store import Store

pytestmark = pytest.mark.sqlite_only

_TEXTS = [
    "Caroline said, the adoption agency called back about the interview",
    "Melanie said, I painted a sunrise over the lake last weekend",
    "the build broke on the main branch after the config change",
    "we adopted a puppy from the shelter near the beach",
]
_GONE = ("entries_scope_stats", "entries_source")
_SEQUENCE = "CREATE INDEX entries_sequence ON entries(scope, kind, id)"
# the release before's stamp trigger: every insert rewrote its own row with the stamp
_OLD_STAMP = (
    "CREATE TRIGGER entry_changes_added AFTER INSERT ON entries BEGIN "
    "UPDATE entry_stamp SET value = value + 1 WHERE id = 0; "
    "UPDATE entries SET changed = (SELECT value FROM entry_stamp WHERE id = 0) "
    "WHERE id = new.id; END"
)
# an insert as an import writes it: no stamp of its own
_OLDER_INSERT = (
    "INSERT INTO entries (kind, tokens, content_hash, block_own, scope, created, accessed) "
    "SELECT kind, tokens, content_hash, block_own, 'older', created, accessed FROM entries "
    "WHERE id = ?"
)


def _raw(store: Store) -> sqlite3.Connection:
    assert isinstance(store.conn, sqlite3.Connection)
    return store.conn


def _names(conn: sqlite3.Connection, kind: str) -> set[str]:
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = ? AND tbl_name = 'entries'", (kind,)
    )
    return {str(r[0]) for r in rows}


def _sql(conn: sqlite3.Connection, name: str) -> str:
    return str(conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0])


def _stamps(conn: sqlite3.Connection) -> tuple[list[int], int]:
    changed = [int(r[0]) for r in conn.execute("SELECT changed FROM entries ORDER BY id")]
    return changed, int(conn.execute("SELECT value FROM entry_stamp WHERE id = 0").fetchone()[0])


def _plan(conn: sqlite3.Connection, sql: str, params: list[object]) -> str:
    return " / ".join(str(r[3]) for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))


def _answers(store: Store) -> tuple[object, ...]:
    return (
        [e.id for e in store.entries()],
        [e.id for e in store.entries(Filters(scope="a"))],
        store.count(Filters(scope="a")),
        store.peek(),
        [[h.entry.id for h in store.search(q)] for q in ("adoption", "puppy beach", "build")],
    )


def _as_the_release_before(path: Path) -> None:
    """Put back the two indexes and the stamp trigger the release before had, and forget
    that the migration ran."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE INDEX entries_source ON entries(source)")
    conn.execute("DROP INDEX entries_sequence")
    conn.execute(_SEQUENCE)
    conn.execute(
        "CREATE INDEX entries_scope_stats ON entries(scope, kind, status, pinned, tokens, expires)"
    )
    conn.execute("DROP TRIGGER entry_changes_added")
    conn.execute("DROP TRIGGER entry_changes_stamped")
    conn.execute(_OLD_STAMP)
    conn.execute("DELETE FROM _migrations WHERE name = 'm_entry_indexes_trimmed'")
    assert set(_GONE) <= _names(conn, "index")
    conn.close()


def test_an_existing_store_loses_the_two_indexes_and_answers_the_same(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path, counter=EstimateCounter()) as store:
        store.put_many(_TEXTS[:2], scope="a")
        store.put_many(_TEXTS[2:], scope="b", source="notes.md")
        want = _answers(store)
    _as_the_release_before(path)
    with Store(path, counter=EstimateCounter()) as store:
        conn = _raw(store)
        assert not set(_GONE) & _names(conn, "index")
        assert {"entry_changes_added", "entry_changes_stamped"} <= _names(conn, "trigger")
        assert "expires" in _sql(conn, "entries_sequence")
        assert _answers(store) == want
        # and it goes on stamping: a new entry lands above every stamp before it
        before, stamp = _stamps(conn)
        store.put("a puppy again, after the upgrade", scope="a")
        after, now = _stamps(conn)
        assert after[:-1] == before and after[-1] == now == stamp + 1
        assert doctor(store).clean


def test_each_insert_carries_its_own_stamp_and_an_unstamped_one_is_stamped(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        store.put_many(_TEXTS, scope="a")
        conn = _raw(store)
        changed, stamp = _stamps(conn)
        assert changed == sorted(set(changed)) and changed[-1] == stamp
        # an insert without a stamp (an import's) is stamped by the trigger
        conn.execute(_OLDER_INSERT, (1,))
        changed, now = _stamps(conn)
        assert changed[-1] == now == stamp + 1
        # an update of a held column stamps the row again, above all
        store.touch(1)
        changed, last = _stamps(conn)
        assert changed[0] == last == now + 1


def test_the_statements_the_dropped_indexes_served_still_seek(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        store.put_many(_TEXTS, scope="a", source="notes.md")
        conn = _raw(store)
        # a filter by scope and kind is counted and listed on one index alone
        for f in (Filters(scope="a"), Filters(scope="a", kinds=("text",))):
            where, params = query.filter_sql(f, 0.0)
            for sql in (
                f"SELECT count(*) FROM entries e WHERE {where}",
                f"SELECT e.id FROM entries e WHERE {where}",
            ):
                plan = _plan(conn, sql, params)
                assert "COVERING INDEX entries_sequence" in plan, plan
        plan = _plan(conn, "SELECT id FROM entries WHERE source = ? AND scope = ?", ["n", "a"])
        assert "USING INDEX" in plan, plan
        assert (
            lifecycle.forget_where(store, source="notes.md", scope="a", keep=[1], reason="t") == 3
        )


_FULL_BLOCK = "CREATE INDEX entries_block ON entries(block_hash)"


def _with_the_foreign_key(path: Path) -> None:
    """Put back the release before's entries_block (every entry) and foreign key, and
    forget that the migration ran."""
    conn = sqlite3.connect(path, isolation_level=None)
    older_stores.block_hash_stored(conn)
    declared = _sql(conn, "entries").replace(
        "block_hash TEXT NOT NULL", "block_hash TEXT NOT NULL REFERENCES blocks(hash)", 1
    )
    version = int(conn.execute("PRAGMA schema_version").fetchone()[0])
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_schema SET sql = ? WHERE name = 'entries'", (declared,))
    conn.execute(f"PRAGMA schema_version = {version + 1}")
    conn.execute("PRAGMA writable_schema = OFF")
    conn.execute("DROP INDEX entries_block")
    conn.execute(_FULL_BLOCK)
    conn.execute("DELETE FROM _migrations WHERE name = 'm_entry_block_index_partial'")
    assert conn.execute("PRAGMA foreign_key_list(entries)").fetchall()
    conn.close()


def _map(conn: sqlite3.Connection) -> list[tuple[int, ...]]:
    return sorted(tuple(r) for r in conn.execute("SELECT * FROM entry_chunks"))


def _blocks_named(store: Store) -> list[tuple[int, str, str]]:
    """Each entry, and what its two hashes resolve to (as references)."""
    out = []
    for e in store.entries(limit=100):
        out.append((e.id, store.body(store.resolve(e.ref)), store.block_text(e.block_hash)))
    return sorted(out)


def test_an_existing_store_keeps_only_lossy_entries_block_hashes_in_the_index(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    with Store(path, counter=EstimateCounter()) as store:
        store.put_many(_TEXTS, scope="a")
        lossy = store.put("the whole plan, long", body="the plan (lossy)", scope="a").entry
        mapped = _map(_raw(store))
        want = (_blocks_named(store), _answers(store))
    _with_the_foreign_key(path)
    with Store(path, counter=EstimateCounter()) as store:
        conn = _raw(store)
        assert conn.execute("PRAGMA foreign_key_list(entries)").fetchall() == []
        assert "WHERE block_hash != content_hash" in _sql(conn, "entries_block")
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # the index holds the lossy entry alone
        held = conn.execute(
            "SELECT id FROM entries INDEXED BY entries_block "
            "WHERE block_hash > x'' AND block_hash != content_hash"
        ).fetchall()
        assert [r[0] for r in held] == [lossy.id]
        assert (_blocks_named(store), _answers(store)) == want
        assert _map(conn) == mapped
        # a reference by either hash, or a prefix of it, still finds the lossy entry
        for digest in (lossy.content_hash, lossy.block_hash):
            for ref in (f"ctx:sha256:{digest}", digest[:12]):
                assert store.resolve(ref, scope="a").id == lossy.id
        # the chunk map follows a block indexed after an entry named it (the lossy entry's
        # original, put plainly in another scope)
        store.put("the whole plan, long", scope="b")
        assert doctor(store).clean
        # forgetting drops the block no entry names any more, and keeps the one another does
        store.forget(lossy.ref, scope="a")
        assert store.block_text(lossy.content_hash) == "the whole plan, long"
        gone = "SELECT count(*) FROM blocks WHERE hash = ?"
        assert conn.execute(gone, (bytes.fromhex(lossy.block_hash),)).fetchone()[0] == 0
        assert doctor(store).clean
