"""A store's SQLite connections come from a bounded pool, each lent to one call at a time:
however many threads call the store at once, the connections (and their file descriptors)
never pass ``store.connections``, and a thread that stays alive holds none between calls."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sqlite3
import threading
from pathlib import Path

import pytest

from offload.config import StoreSettings
from offload.errors import StoreBusy
from offload.store.sqlite import db
from offload.store.sqlite.pool import ConnectionPool
from offload.store.store import Store

THREADS = 12
POOL = 3


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def burst(store: Store, n: int, round_: int) -> list[BaseException]:
    """``n`` threads started at once, each writing, resolving and searching a few times."""
    start = threading.Barrier(n)
    failed: list[BaseException] = []

    def work(i: int) -> None:
        try:
            start.wait(timeout=60)
            for k in range(3):
                ref = store.put(f"burst {round_} thread {i} note {k}\n", topic=f"t{i}").entry.id
                store.resolve(str(ref))
                store.search(f"thread {i}")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failed.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return failed


def test_many_threads_at_once_open_no_more_connections_than_the_pool_holds(
    tmp_path: Path,
) -> None:
    settings = StoreSettings(connections=POOL)
    with Store(tmp_path / "offload.db", settings) as store:
        store.count()
        before = fds()
        for round_ in range(3):
            assert burst(store, THREADS, round_) == []
            assert store.open_connections <= POOL
            # a database file and its log per connection, at most
            assert fds() <= before + 2 * POOL
        assert store.count() == 3 * THREADS * 3


def test_a_thread_that_stays_alive_holds_no_connection_between_its_calls(
    tmp_path: Path,
) -> None:
    settings = StoreSettings(connections=1, busy_timeout_s=0.5)
    with Store(tmp_path / "offload.db", settings) as store:
        called, done = threading.Event(), threading.Event()

        def first() -> None:
            store.put("the first thread's note")
            called.set()
            done.wait(60)  # alive, between calls

        t = threading.Thread(target=first)
        t.start()
        try:
            assert called.wait(60)
            # the one connection came back when the first thread's call ended
            assert store.count() == 1
        finally:
            done.set()
            t.join(60)


def test_a_call_that_finds_every_connection_lent_waits_then_says_the_store_is_busy(
    tmp_path: Path,
) -> None:
    def open_() -> sqlite3.Connection:
        return db.connect(tmp_path / "x.db", busy_timeout_s=1, synchronous="NORMAL")

    pool = ConnectionPool(open_, lambda conn: None, size=1, wait_s=0.2)
    pool.enter()
    held = pool.get()
    seen: list[object] = []

    def other() -> None:
        pool.enter()
        try:
            seen.append(pool.get())
        except StoreBusy as exc:
            seen.append(exc)
        finally:
            pool.leave()

    t = threading.Thread(target=other)
    t.start()
    t.join(60)
    assert isinstance(seen[0], StoreBusy)
    pool.leave()  # the call ends: the connection goes back
    t = threading.Thread(target=other)
    t.start()
    t.join(60)
    assert seen[1] is held
    assert pool.count == 1
    pool.close_all()
    assert pool.count == 0


def test_nested_calls_share_one_connection_and_a_transaction_keeps_it(tmp_path: Path) -> None:
    def open_() -> sqlite3.Connection:
        return db.connect(tmp_path / "x.db", busy_timeout_s=1, synchronous="NORMAL")

    pool = ConnectionPool(open_, lambda conn: None, size=2, wait_s=1)
    pool.enter()
    outer = pool.get()
    pool.enter()
    assert pool.get() is outer
    pool.leave()
    assert pool.lent == 1  # the outer call still holds it
    outer.execute("BEGIN")
    pool.leave()
    assert pool.lent == 1  # a transaction still open: the thread keeps its connection
    outer.execute("COMMIT")
    pool.enter()
    pool.leave()
    assert pool.lent == 0
    pool.close_all()


def test_a_connection_taken_outside_a_call_comes_back_when_its_thread_ends(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "offload.db") as store:
        t = threading.Thread(target=lambda: store.conn)
        t.start()
        t.join(60)
        assert store.release_idle() == 1
        assert store.open_connections == 1


def test_closing_the_store_closes_every_connection(tmp_path: Path) -> None:
    store = Store(tmp_path / "offload.db")
    store.count()
    assert store.open_connections == 1
    store.close()
    assert store.open_connections == 0


def test_a_pool_holds_at_least_one_connection() -> None:
    with pytest.raises(ValueError):
        ConnectionPool(lambda: sqlite3.connect(":memory:"), lambda conn: None, size=0, wait_s=1)


def _sqlite_memory_used() -> int:
    """What the process's SQLite library holds now (sqlite3_memory_used), from the same
    shared library Python's sqlite3 module uses."""
    try:
        lib = ctypes.CDLL("libsqlite3.so.0")
    except OSError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("no shared libsqlite3 to ask what it holds")
    lib.sqlite3_memory_used.restype = ctypes.c_int64
    return int(lib.sqlite3_memory_used())


def test_the_free_connections_hand_back_their_page_caches_when_shrunk(tmp_path: Path) -> None:
    path = tmp_path / "pages.db"
    with sqlite3.connect(path) as setup:
        setup.execute("CREATE TABLE t(x)")
        setup.executemany("INSERT INTO t VALUES (?)", ((os.urandom(200),) for _ in range(20_000)))
    setup.close()
    pool = ConnectionPool(
        lambda: sqlite3.connect(path, check_same_thread=False), lambda c: None, size=2, wait_s=5
    )
    with pool.lending():
        pool.get().execute("SELECT sum(length(x)) FROM t").fetchall()  # ~4 MB of pages read
    before = _sqlite_memory_used()
    assert pool.shrink_free() == 1
    assert before - _sqlite_memory_used() > 1_000_000  # its ~2 MB page cache, given back
    with pool.lending():
        assert pool.get().execute("SELECT count(*) FROM t").fetchone() == (20_000,)
    pool.close_all()


def test_a_store_releasing_its_memory_shrinks_its_connections_page_caches(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "offload.db") as store:
        for i in range(300):
            store.put(f"note {i} " + "filler words for the page cache " * 40, topic=f"t{i}")
        store.search("filler")
        before = _sqlite_memory_used()
        store.release_memory()
        assert _sqlite_memory_used() < before


def _wal_descriptors(path: Path) -> int:
    wal = f"{path}-wal"
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # a descriptor closed while listed
            count += os.readlink(f"/proc/self/fd/{fd}") == wal
    return count


def test_a_quiet_pool_closes_its_free_connections_but_one_and_their_wal_descriptors(
    tmp_path: Path,
) -> None:
    path = tmp_path / "offload.db"
    pool = ConnectionPool(
        lambda: db.connect(path, busy_timeout_s=5, synchronous="NORMAL"),
        lambda c: None,
        size=4,
        wait_s=5,
    )
    with pool.lending():
        pool.get().execute("CREATE TABLE t(x)")
    idle = _wal_descriptors(path)
    held = threading.Barrier(4)

    def call() -> None:
        with pool.lending():
            pool.get().execute("SELECT count(*) FROM t").fetchone()
            held.wait(timeout=60)  # all four lent at once: four connections open

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert pool.count == 4
    assert _wal_descriptors(path) == idle + 3
    assert pool.shrink_free() == 4
    assert pool.count == 1
    assert _wal_descriptors(path) == idle
    with pool.lending():  # the kept one still answers, and a burst opens others again
        assert pool.get().execute("SELECT count(*) FROM t").fetchone()[0] == 0
    pool.close_all()
