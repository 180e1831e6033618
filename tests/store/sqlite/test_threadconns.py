"""A store's SQLite connections live as long as the threads that use them: bursts of worker
threads that come and go leave no connection (nor its file descriptors) behind."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from offload.store.store import Store

BURST = 12


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def burst(store: Store, n: int, round_: int) -> list[int]:
    """``n`` threads alive at once, each writing and reading once; the open connection
    count each saw while all of them were alive."""
    barrier = threading.Barrier(n)
    seen: list[int] = []

    def work(i: int) -> None:
        ref = store.put(f"burst {round_} thread {i} notes\n", topic=f"t{round_}-{i}").entry.id
        store.resolve(str(ref))
        barrier.wait(timeout=60)  # every thread holds its connection now
        seen.append(store.open_connections)
        barrier.wait(timeout=60)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return seen


def test_connections_of_ended_threads_are_closed_and_bursts_do_not_accumulate(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "offload.db") as store:
        store.count()  # this thread's own connection
        after_first: int | None = None
        for round_ in range(4):
            seen = burst(store, BURST, round_)
            # one per live thread, never more
            assert max(seen) <= BURST + 1
            assert store.release_idle() == BURST
            assert store.open_connections == 1
            # SQLite keeps a closed connection's file descriptor while another connection of
            # the process holds a lock on the file (closing it would drop that lock) and
            # reuses it for the next open: the first burst sets the count, later ones keep it
            after_first = fds() if after_first is None else after_first
            assert fds() == after_first
        assert store.count() == 4 * BURST


def test_a_new_threads_first_use_closes_what_ended_threads_left(tmp_path: Path) -> None:
    with Store(tmp_path / "offload.db") as store:
        burst(store, 4, 0)
        assert store.open_connections == 4 + 1  # the migration's, and the four threads'
        done: list[int] = []
        t = threading.Thread(target=lambda: done.append(store.count()))
        t.start()
        t.join(60)
        assert done == [4]
        # the four ended threads' connections went when the fifth opened its own
        assert store.open_connections == 2
        assert store.release_idle() == 1
        assert store.open_connections == 1


def test_closing_the_store_closes_the_connections_of_live_threads_too(tmp_path: Path) -> None:
    store = Store(tmp_path / "offload.db")
    store.count()
    assert store.open_connections == 1
    store.close()
    assert store.open_connections == 0
