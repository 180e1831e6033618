"""Saved state: a versioned replace loses no update when writers race (both backends)."""

from __future__ import annotations

import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from offload.core.tokens import EstimateCounter
from offload.store.backend import Sql
from offload.store.postgres.pgconn import WRITE_LOCK, lock_key
from offload.store.store import Store
from realparts import run_together, wait_until

PROCESSES = 3
ROUNDS = 40

# One process: says "ready", waits for "go", then ROUNDS times reads a JSON list, appends
# its own mark and saves it with replace_state, reading again whenever another won.
APPENDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from offload.core.tokens import EstimateCounter
    from offload.store.store import Store

    where, me, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = Store(where if "://" in where else Path(where), counter=EstimateCounter())
    store.state_version("team", "log")
    print("ready", flush=True)
    sys.stdin.readline()
    lost = 0
    for i in range(n):
        while True:
            value, version = store.get_state_versioned("team", "log")
            if store.replace_state("team", "log", [*(value or []), f"{me}:{i}"], version):
                break
            lost += 1
    print(lost, flush=True)
    store.close()
    """
)


def _open(where: Path | str) -> Store:
    return Store(where, counter=EstimateCounter())


def test_of_two_stores_replacing_the_version_both_read_exactly_one_wins(
    store_location: Path | str,
) -> None:
    with _open(store_location) as a, _open(store_location) as b:
        assert a.replace_state("proxy.session", "s", {"paged": 1}, 0) == 1
        seen_a = a.get_state_versioned("proxy.session", "s")
        seen_b = b.get_state_versioned("proxy.session", "s")
        assert seen_a == seen_b == ({"paged": 1}, 1)
        assert a.replace_state("proxy.session", "s", {"paged": 5}, 1) == 2
        # b's write was computed from version 1: it is refused and changes nothing
        assert b.replace_state("proxy.session", "s", {"paged": 2}, 1) == 0
        assert b.get_state_versioned("proxy.session", "s") == ({"paged": 5}, 2)
        assert b.replace_state("proxy.session", "s", {"paged": 6}, 2) == 3
        assert a.get_state("proxy.session", "s") == {"paged": 6}


def test_replacing_a_value_never_saved_is_refused_once_another_saved_it(
    store_location: Path | str,
) -> None:
    with _open(store_location) as a, _open(store_location) as b:
        assert a.replace_state("ns", "k", "first", 0) == 1
        assert b.replace_state("ns", "k", "second", 0) == 0
        assert b.get_state_versioned("ns", "k") == ("first", 1)
        # a plain put still replaces whatever is there, and raises the version too
        assert b.put_state("ns", "k", "third") == 2
        assert a.replace_state("ns", "k", "fourth", 1) == 0


@pytest.mark.slow
def test_processes_appending_to_one_saved_value_at_once_lose_no_append(
    store_location: Path | str, tmp_path: Path
) -> None:
    _open(store_location).close()  # migrated before they start
    run_together(
        [
            [sys.executable, "-c", APPENDER, str(store_location), str(w), str(ROUNDS)]
            for w in range(PROCESSES)
        ],
        [tmp_path / f"home-{w}" for w in range(PROCESSES)],
        timeout=300,
    )
    with _open(store_location) as store:
        log, version = store.get_state_versioned("team", "log")
    assert sorted(log) == sorted(f"{w}:{i}" for w in range(PROCESSES) for i in range(ROUNDS))
    assert version == PROCESSES * ROUNDS
    for w in range(PROCESSES):  # each process's appends in its own order
        assert [x for x in log if x.startswith(f"{w}:")] == [f"{w}:{i}" for i in range(ROUNDS)]


def test_several_values_saved_at_once_get_their_own_versions_and_read_back(
    store_location: Path | str,
) -> None:
    with _open(store_location) as a, _open(store_location) as b:
        assert a.put_state("tool-vectors:m", "k1", "old") == 1
        assert a.put_states("tool-vectors:m", [("k1", "new"), ("k2", [1, 2])]) == [2, 1]
        assert dict(b.state_items("tool-vectors:m")) == {"k1": "new", "k2": [1, 2]}
        assert a.put_states("tool-vectors:m", []) == []


def test_a_deleted_and_recreated_value_never_takes_a_version_it_had_before(
    store_location: Path | str,
) -> None:
    """Compare and swap by version: a writer that read version 1 before the key was deleted
    and saved again must not overwrite the new value (an ABA case)."""
    with _open(store_location) as a, _open(store_location) as b:
        assert a.put_state("ns", "k", "old") == 1
        stale = b.get_state_versioned("ns", "k")
        assert stale == ("old", 1)
        assert a.delete_state("ns", "k")
        deleted = a.state_version("ns", "k")
        assert deleted > 1 and a.get_state_versioned("ns", "k") == (None, deleted)
        # a writer that read the value before it was deleted cannot bring it back
        assert b.replace_state("ns", "k", "stale", 1) == 0
        assert a.get_state("ns", "k") is None
        fresh = a.replace_state("ns", "k", "new", deleted)
        assert fresh > deleted
        assert b.replace_state("ns", "k", "stale", 1) == 0
        assert b.replace_state("ns", "k", "stale", 0) == 0
        assert b.get_state_versioned("ns", "k") == ("new", fresh)
        assert a.delete_state("ns", "k")
        assert a.put_state("ns", "k", "again") > fresh
        assert dict(b.state_items("ns")) == {"k": "again"}


def test_pruning_deletes_only_values_no_user_lists(store_location: Path | str) -> None:
    with _open(store_location) as a, _open(store_location) as b:
        a.put_states("vec", [("k1", "v1"), ("k2", "v2"), ("k3", "v3")])
        a.put_state("vec-use", "gw-a", {"keys": ["k1"]})
        b.put_state("vec-use", "gw-b", {"keys": ["k3", "k9"]})
        b.put_state("vec-use", "odd", "not a record")
        assert a.prune_state("vec", "vec-use") == 1
        assert dict(b.state_items("vec")) == {"k1": "v1", "k3": "v3"}
        assert b.state_version("vec", "k2") > 1  # a deletion like any other
        assert a.prune_state("vec", "vec-use") == 0


def _in_thread(work: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(work()), daemon=True)
    thread.start()
    return thread, done


def _waiting_on_a_lock(url: str) -> bool:
    with psycopg.connect(url) as probe:
        row = probe.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()
    return row is not None and int(row[0]) > 0


@pytest.mark.slow
def test_state_writes_on_postgresql_do_not_wait_behind_a_bulk_loads_store_lock(
    pg_database: str,
) -> None:
    with _open(pg_database) as store:
        assert store.put_state("ns", "k", "v0") == 1
        with psycopg.connect(pg_database) as bulk:  # a put_many in flight holds it
            bulk.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
            try:

                def writes() -> object:
                    return (
                        store.put_state("ns", "k", "v1"),
                        store.replace_state("ns", "k", "v2", 2),
                        store.put_states("ns", [("a", 1), ("b", 2)]),
                        store.delete_state("ns", "a"),
                    )

                thread, done = _in_thread(writes)
                thread.join(60)  # a ceiling: before, it waited for the bulk load to end
                assert done == [(2, 3, [1, 1], True)]
            finally:
                bulk.rollback()


@pytest.mark.slow
def test_writers_of_one_state_key_on_postgresql_still_wait_for_each_other(
    pg_database: str,
) -> None:
    with _open(pg_database) as store:
        assert store.put_state("ns", "k", "v0") == 1
        with psycopg.connect(pg_database) as other:  # another writer of the key, mid-write
            other.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key("state\x00ns\x00k"),))
            try:
                thread, done = _in_thread(lambda: store.replace_state("ns", "k", "v1", 1))
                wait_until(lambda: _waiting_on_a_lock(pg_database), 60, what="the wait")
                assert not done
                assert store.put_state("ns", "other key", "x") == 1  # other keys go ahead
            finally:
                other.rollback()
            thread.join(60)
            assert done == [2]


def test_a_saved_value_that_is_not_json_reads_as_none_and_is_replaced_by_the_next_write(
    tmp_path: Path,
) -> None:
    # a row damaged by hand or another program failed every reader of it, for ever
    with Store(tmp_path / "a.db", counter=EstimateCounter()) as store:
        store.put_state("ns", "k", {"a": 1})
        store.put_state("ns", "other", [1])
        store.conn.execute(Sql("UPDATE state SET value = '{not json' WHERE key = 'k'"))
        store.conn.commit()
        value, version = store.get_state_versioned("ns", "k")
        assert store.get_state("ns", "k") is None and value is None and version > 0
        assert dict(store.state_items("ns")) == {"k": None, "other": [1]}
        assert store.replace_state("ns", "k", {"a": 2}, version)
        assert store.get_state("ns", "k") == {"a": 2}
