"""The writer thread: what an answer waits for, writes once per content, failures handed
to the answers held behind them."""

from __future__ import annotations

import functools
import threading

import pytest

from offload.errors import StoreBusy, StoreError
from offload.proxy.rewrite.stubs.writes import NOTHING, Writes

WAIT_S = 10.0  # a bound on each wait, never a synchronisation


def blocked(writes: Writes, key: str = "blocker") -> threading.Event:
    """A write that runs until the returned event is set (the writer queues the rest)."""
    release = threading.Event()
    writes.submit(key, functools.partial(release.wait, WAIT_S))
    return release


def test_an_answer_held_behind_a_pending_write_completes_only_once_it_is_done() -> None:
    writes = Writes()
    release = blocked(writes)
    done: list[str] = []
    writes.submit("part", lambda: done.append("part"))
    held = writes.held()
    assert held.pending() and writes.pending("part")
    with pytest.raises(StoreBusy):
        held.wait(timeout=0.05)  # still behind the blocked write
    release.set()
    held.wait(WAIT_S)
    assert done == ["part"] and not held.pending() and not writes.pending("part")
    assert writes.figures().writes == 2 and writes.figures().pending == 0


def test_the_same_content_asked_for_twice_while_its_write_is_pending_is_written_once() -> None:
    writes = Writes()
    release = blocked(writes)
    runs: list[int] = []
    writes.submit("same", lambda: runs.append(1))
    writes.submit("same", lambda: runs.append(2))
    second = writes.held()  # the second asker waits for the one write
    release.set()
    second.wait(WAIT_S)
    assert runs == [1]


def test_a_failed_write_fails_the_answers_held_behind_it_and_not_the_later_ones() -> None:
    failed: list[str] = []
    writes = Writes(on_failed=lambda key, exc: failed.append(key))
    release = blocked(writes)

    def refuse() -> None:
        raise StoreBusy("the database stayed locked")

    writes.submit("part", refuse)
    behind = writes.held()
    release.set()
    with pytest.raises(StoreError, match="stayed locked"):
        behind.wait(WAIT_S)
    writes.flush(WAIT_S)  # flushing reports nothing: the held answers had the error
    assert failed == ["part"] and writes.figures().failed == 1
    later = writes.held()  # nothing of its own pending: the old failure is not its
    later.wait(WAIT_S)
    writes.submit("part", lambda: None)  # asked again, it is written again
    writes.held().wait(WAIT_S)
    assert writes.figures().writes == 3


def test_an_answer_with_nothing_pending_never_waits() -> None:
    writes = Writes()
    assert not writes.held().pending() and not NOTHING.pending()
    writes.held().wait(0)
    NOTHING.wait(0)


def test_a_failure_report_that_raises_does_not_stop_the_writer() -> None:
    # the writer thread died in the report: no write ran again, and every answer after
    # waited for its timeout and failed (a 503), for the process's life
    def report(key: str, exc: BaseException) -> None:
        raise RuntimeError("the report itself failed")

    writes = Writes(on_failed=report)
    release = blocked(writes)

    def refuse() -> None:
        raise StoreBusy("the database stayed locked")

    writes.submit("part", refuse)
    done: list[str] = []
    writes.submit("next", lambda: done.append("next"))
    behind = writes.held()
    release.set()
    with pytest.raises(StoreError, match="stayed locked"):
        behind.wait(WAIT_S)
    writes.submit("later", lambda: done.append("later"))
    writes.held().wait(WAIT_S)
    assert done == ["next", "later"]


def test_a_write_that_raises_past_exception_is_its_failure_and_the_writer_goes_on() -> None:
    class Halt(BaseException):
        pass

    def halt() -> None:
        raise Halt("stop")

    writes = Writes()
    since = writes.done()
    writes.submit("part", halt)
    with pytest.raises(StoreError, match="store write failed: Halt: stop"):
        writes.held(since).wait(WAIT_S)
    done: list[str] = []
    writes.submit("next", lambda: done.append("next"))
    writes.held().wait(WAIT_S)
    assert done == ["next"]


def test_a_write_that_failed_before_its_rewrite_ended_still_fails_the_answer() -> None:
    def fail() -> None:
        raise OSError("disk full")

    writes = Writes()
    since = writes.done()  # the rewrite starts
    writes.submit("part", fail)
    writes.flush(WAIT_S)  # the write fails before the rewrite ends
    with pytest.raises(OSError, match="disk full"):
        writes.held(since).wait(WAIT_S)
    writes.held().wait(WAIT_S)  # a later rewrite's answer: not its write
