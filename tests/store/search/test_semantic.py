"""store.semantic: the nearest entries by embedding, scanned beside the lexical side."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from offload.core.tokens import EstimateCounter
from offload.llm.embedding import StaticEmbedder
from offload.store.models import Filters
from offload.store.search import semantic
from offload.store.search.memory import entrykeys
from offload.store.search.query import filter_sql
from offload.store.search.state import SearchState
from offload.store.store import Store
from offload.store.write import vectors
from statements import recorded_statements
from wordcorpus import built_view


def _side(
    store: Store, text: str, filters: Filters, lexical: list[int], k: int
) -> semantic.Nearest | None:
    where, params = filter_sql(filters, store.clock())
    probe = semantic.start(store, text, k)
    assert probe is not None
    return semantic.finish(
        store, probe, SearchState(store.conn, where, params, store.clock(), k), lexical
    )


def test_the_semantic_side_keeps_only_what_the_filter_keeps(hybrid: Store) -> None:
    for i in range(30):
        hybrid.put(f"note {i}: we adopted a puppy from the shelter", scope="big")
    small = hybrid.put("our new dog sleeps all day", scope="small").entry.id
    hybrid.put("quarterly tax filing is due", scope="small")
    side = _side(hybrid, "a puppy", Filters(scope="small"), [], k=1)
    assert side is not None
    assert list(side.scores) == [small]


def test_the_semantic_side_scores_the_lexical_candidates_too(hybrid: Store) -> None:
    a = hybrid.put("the release notes for version two").entry.id
    b = hybrid.put("a walk in the park").entry.id
    side = _side(hybrid, "changelog of the release", Filters(), [b], k=1)
    assert side is not None
    assert set(side.scores) == {a, b}
    assert side.scores[a] > side.scores[b]


def test_the_matrix_scan_runs_on_a_worker_thread_and_touches_no_connection(
    hybrid: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    hybrid.put("we adopted a puppy from the shelter")
    scanned_on: list[str] = []
    real = vectors.nearest

    def spy(*args: Any, **kwargs: Any) -> Any:
        scanned_on.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(vectors, "nearest", spy)
    # the store's SQLite connection refuses use from another thread: a statement run by
    # the worker would fail the scan
    probe = semantic.start(hybrid, "a new dog", 5)
    assert probe is not None
    close, _floor = probe.close.result()
    assert [name.startswith("offload-nearest") for name in scanned_on] == [True]
    assert close and close[0][1] > 0


def test_no_scan_starts_without_a_model_or_for_a_query_with_no_known_word(
    store: Store, hybrid: Store
) -> None:
    store.put("we adopted a puppy from the shelter")
    hybrid.put("we adopted a puppy from the shelter")
    assert semantic.start(store, "a puppy", 5) is None
    assert semantic.start(hybrid, "", 5) is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_child_scans_with_a_pool_of_its_own(
    hybrid: Store, path: Path, model: StaticEmbedder
) -> None:
    hybrid.put("we adopted a puppy from the shelter")
    probe = semantic.start(hybrid, "a new dog", 5)  # the parent's pool is running
    assert probe is not None and probe.close.result()[0]
    pid = os.fork()
    if pid == 0:  # the child (its own store): a scan must finish, not wait for dead threads
        code = 1
        try:
            with Store(path, counter=EstimateCounter(), embedder=model) as own:
                again = semantic.start(own, "a new dog", 5)
                code = 0 if again is not None and again.close.result(timeout=30)[0] else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def _held_keys(store: Store) -> entrykeys.EntryKeys:
    """The store's copy of the entries' columns, built (an event, not a sleep), current."""
    idx = store.resident
    assert idx is not None
    idx.entry_keys.current(store.conn)  # the first ask starts the build
    assert idx.entry_keys.wait(60)
    got = idx.entry_keys.current(store.conn)
    assert got is not None
    return got


@pytest.mark.slow
def test_the_held_columns_filter_the_semantic_side_and_an_entry_written_since_is_asked(
    pg_database: str, model: StaticEmbedder
) -> None:
    with Store(pg_database, counter=EstimateCounter(), embedder=model, resident_mb=64) as s:
        for i in range(12):
            s.put(f"note {i}: we adopted a puppy from the shelter", scope="big")
        held = s.put("our new dog sleeps all day", scope="small").entry.id
        keys = _held_keys(s)
        late = s.put("the puppy chewed my shoes", scope="small").entry.id  # after the read
        assert keys.get(late) is None
        now = s.clock()
        where, params = filter_sql(Filters(scope="small"), now)
        gate = entrykeys.Gate(keys, entrykeys.keeper(Filters(scope="small"), now))
        probe = semantic.start(s, "a puppy", 5)
        assert probe is not None
        state = SearchState(s.conn, where, params, now, 5, gate=gate)
        side = semantic.finish(s, probe, state, [])
        assert side is not None and set(side.scores) == {held, late}


@pytest.mark.slow
def test_hybrid_pages_with_the_held_columns_equal_those_without_and_read_no_entry_by_id(
    pg_database: str, model: StaticEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = [f"{w} note {i}: the {w} and the river" for i in range(8) for w in ("puppy", "lake")]
    texts += ["our new dog sleeps all day", "a kitten from the shelter", "tax filing is due"]
    asks = [("a puppy at the lake", Filters()), ("the dog from the shelter", Filters(scope="s0"))]
    with Store(pg_database, counter=EstimateCounter(), embedder=model, resident_mb=64) as s:
        for i, text in enumerate(texts):
            s.put(text, scope=f"s{i % 2}")
        built_view(s)
        _held_keys(s)
        with recorded_statements(s, monkeypatch) as ran:
            got = [[(h.entry.id, h.score) for h in s.search(q, f, limit=10)] for q, f in asks]
        # neither the scan's ids nor the entries only it found are read by id
        assert not [sql for sql in ran if "SELECT e.id, (" in sql or "CROSS JOIN entries e" in sql]
        s.resident.entry_keys.close()  # type: ignore[union-attr]  # by id from here on
        expected = [[(h.entry.id, h.score) for h in s.search(q, f, limit=10)] for q, f in asks]
    assert got == expected and all(expected)
