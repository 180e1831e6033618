"""The rewrite's store writes left to the writer thread (as the proxy runs it): the same
wire and entries as written inline, a part read back only once held for, a restart before
the write, and a write that fails."""

from __future__ import annotations

import functools
import sqlite3
import threading
from pathlib import Path

import pytest

from offload.config import ProxySettings, StoreSettings
from offload.core.tokens import EstimateCounter
from offload.errors import ReferenceError_, StoreError
from offload.proxy.rewrite.phases import RewriteResult
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.stubs.expand import expand, is_proxy_note, is_range_stub
from offload.store.backend import Sql
from offload.store.store import Store
from proxy.rewrite.test_pipeline import N_CTX, Msgs, conversation, requests

WAIT_S = 10.0


def make(store: Store) -> Pipeline:
    return Pipeline(store, ProxySettings(), EstimateCounter())


def first_windowing(pipe: Pipeline, turns: list[Msgs], *, wait: bool = True) -> int:
    """Serve ``turns`` until one pages out (``wait``: its writes done inline); its index."""
    for k, request in enumerate(turns):
        if pipe.rewrite(request, N_CTX, wait_writes=wait).windowed:
            return k
    raise AssertionError("no turn paged out")


def range_ref(result: RewriteResult) -> str:
    stubs = [m for m in result.messages if is_range_stub(m)]
    assert stubs, "no range stub on the wire"
    text = str(stubs[0]["content"])
    start = text.index("ctx:sha256:")
    return text[start : start + len("ctx:sha256:") + 12]


def entries(store: Store) -> list[tuple[str, int, str, str]]:
    rows = store.conn.execute(
        Sql("SELECT content_hash, tokens, topic, summary FROM entries ORDER BY content_hash")
    ).fetchall()
    return [(r[0], r[1], r[2], r[3]) for r in rows]


def test_writes_left_to_the_writer_give_the_wire_and_entries_of_writes_made_inline(
    tmp_path: Path,
) -> None:
    msgs = conversation(24)
    with (
        Store(tmp_path / "a.db", counter=EstimateCounter()) as inline,
        Store(tmp_path / "b.db", counter=EstimateCounter()) as deferred,
    ):
        a, b = make(inline), make(deferred)
        for request in requests(msgs):
            one = a.rewrite(request, N_CTX)
            other = b.rewrite(request, N_CTX, wait_writes=False)
            other.held.wait(WAIT_S)
            assert other.messages == one.messages
            wire = [m for m in other.messages if not is_proxy_note(m)]
            assert expand(deferred, wire) == request
        assert entries(deferred) == entries(inline) and entries(inline)


def test_a_paged_out_part_is_pending_until_held_for_and_then_reads_back(tmp_path: Path) -> None:
    msgs = conversation(24)
    turns = list(requests(msgs))
    with Store(tmp_path / "a.db", counter=EstimateCounter()) as store:
        pipe = make(store)
        k = first_windowing(pipe, turns[:-1])
        release = threading.Event()
        pipe.writes.submit("blocker", functools.partial(release.wait, WAIT_S))
        k += 1 + first_windowing(pipe, turns[k + 1 :], wait=False)
        result = pipe.rewrite(turns[k], N_CTX, wait_writes=False)  # the same turn again
        ref = range_ref(result)
        # the rewrite returned while its part's write is still queued behind the blocker
        assert result.held.pending()
        with pytest.raises(ReferenceError_):
            store.resolve(ref, "proxy")
        release.set()
        result.held.wait(WAIT_S)
        assert not result.held.pending()
        store.resolve(ref, "proxy")
        wire = [m for m in result.messages if not is_proxy_note(m)]
        assert expand(store, wire) == turns[k]


def test_a_restart_before_a_part_was_written_starts_the_session_afresh_and_stores_it(
    tmp_path: Path,
) -> None:
    msgs = conversation(30)
    turns = list(requests(msgs))
    with Store(tmp_path / "a.db", counter=EstimateCounter()) as store:
        crashed = make(store)
        release = threading.Event()
        crashed.writes.submit("blocker", functools.partial(release.wait, WAIT_S))
        served = [crashed.rewrite(t, N_CTX, wait_writes=False) for t in turns[:-1]]
        assert any(r.windowed for r in served)
        # a new process on the store: the saved state names a part never written
        again = make(store).rewrite(turns[-1], N_CTX)
        wire = [m for m in again.messages if not is_proxy_note(m)]
        assert expand(store, wire) == turns[-1]
        assert any(is_range_stub(m) for m in again.messages)
        store.resolve(range_ref(again), "proxy")
        release.set()
        crashed.flush(WAIT_S)


def test_a_write_that_fails_fails_the_answer_and_the_request_sent_again_stores_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    msgs = conversation(24)
    turns = list(requests(msgs))
    with Store(db, StoreSettings(busy_timeout_s=0.2), counter=EstimateCounter()) as store:
        pipe = make(store)
        k = first_windowing(pipe, turns[:-1])
        release = threading.Event()
        pipe.writes.submit("blocker", functools.partial(release.wait, WAIT_S))
        k += 1 + first_windowing(pipe, turns[k + 1 :], wait=False)
        request = turns[k]
        answer = pipe.rewrite(request, N_CTX, wait_writes=False)  # held behind the blocker
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            release.set()
            with pytest.raises(StoreError):
                answer.held.wait(WAIT_S)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        again = pipe.rewrite(request, N_CTX)  # the client sends it again
        wire = [m for m in again.messages if not is_proxy_note(m)]
        assert expand(store, wire) == request
