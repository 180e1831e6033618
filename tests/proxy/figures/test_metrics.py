"""Proxy counters, break classification, persistence, and the /tokenize-backed counter."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exposition import read, value
from offload.proxy.figures.exposition import family
from offload.proxy.figures.metrics import (
    COUNTERS,
    HELP,
    UPSTREAM_EVICTION,
    Metrics,
    RequestRecord,
    cache_figures,
)
from offload.proxy.transport.counting import message_texts
from offload.store.store import Store
from realparts import run_together


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A fresh store file."""
    with Store(tmp_path / "offload.db") as s:
        yield s


def rec(session: str = "a", **kw: object) -> RequestRecord:
    """A request record with defaults."""
    return RequestRecord(session_id=session, **kw)  # type: ignore[arg-type]


def test_cache_figures_prefer_llama_timings_and_fall_back_to_openai_usage() -> None:
    llama = {"usage": {"prompt_tokens": 40}, "timings": {"cache_n": 30, "prompt_n": 10}}
    assert cache_figures(llama) == (40, 30)
    openai = {"usage": {"prompt_tokens": 50, "prompt_tokens_details": {"cached_tokens": 20}}}
    assert cache_figures(openai) == (50, 20)
    assert cache_figures({}) == (None, None)


def test_totals_and_sessions_add_up_with_tokens_saved() -> None:
    m = Metrics()
    m.record(rec("a", client_tokens=1000, wire_tokens=400, stubs_made=2, windowed=True))
    m.record(rec("b", client_tokens=100, wire_tokens=100, prompt_tokens=110, cached_tokens=55))
    snap = m.snapshot()
    total = snap["live"]["counters"]
    assert total["requests"] == 2 and total["tokens_saved"] == 600 and total["windowed"] == 1
    assert snap["live"]["cache_reuse_ratio"] == 0.5
    assert snap["sessions"]["a"]["live"]["counters"]["stubs_made"] == 2
    assert snap["sessions"]["b"]["live"]["counters"]["cached_tokens"] == 55


def test_requests_answered_with_an_error_leave_kv_reuse_unmeasured() -> None:
    m = Metrics()
    m.record(rec("a", wire_tokens=500, reused_tokens=0, error=True))
    m.record(rec("a", wire_tokens=500, reused_tokens=500, error=True))
    live = m.snapshot()["live"]
    # the upstream computed nothing of them: no cache was there to reuse
    assert live["kv_reuse_ratio"] is None
    assert live["counters"]["errored_wire_tokens"] == 1000
    m.record(rec("a", wire_tokens=600, reused_tokens=300))
    assert m.snapshot()["live"]["kv_reuse_ratio"] == 0.5


def test_a_kept_prefix_with_a_collapsed_cache_is_an_upstream_eviction() -> None:
    m = Metrics()
    assert m.record(rec(prompt_tokens=900, cached_tokens=0)) is None  # first turn: no break
    assert m.record(rec(prompt_tokens=950, cached_tokens=890)) is None  # reused
    assert m.record(rec(prompt_tokens=1000, cached_tokens=12)) == UPSTREAM_EVICTION
    assert m.snapshot()["live"]["breaks"] == {UPSTREAM_EVICTION: 1}


def test_a_break_the_pipeline_names_is_counted_under_its_cause() -> None:
    m = Metrics()
    m.record(rec())
    assert m.record(rec(prefix_kept=False, break_cause="windowing")) == "windowing"
    assert m.record(rec(prefix_kept=False, break_cause="client_edit")) == "client_edit"
    snap = m.snapshot()
    assert snap["live"]["breaks"] == {"client_edit": 1, "windowing": 1}
    assert snap["live"]["counters"]["prefix_breaks"] == 2


def test_counters_are_cumulative_across_restarts_and_live_starts_at_zero(store: Store) -> None:
    m = Metrics(store)
    for _ in range(5):
        m.record(rec("a", client_tokens=10, wire_tokens=4))
    m.record(rec("b", prefix_kept=False, break_cause="windowing"))
    m.flush()
    again = Metrics(store)
    snap = again.snapshot()
    assert snap["live"]["counters"]["requests"] == 0
    assert snap["cumulative"]["counters"]["requests"] == 6
    assert snap["cumulative"]["counters"]["tokens_saved"] == 30
    assert snap["sessions"]["a"]["cumulative"]["counters"]["requests"] == 5
    again.record(rec("a"))
    assert again.snapshot()["cumulative"]["counters"]["requests"] == 7


def test_two_proxies_on_one_store_add_their_counts_instead_of_overwriting(
    store: Store, tmp_path: Path
) -> None:
    # both load the same totals; written back as totals, the later flush erased the other's
    with Store(tmp_path / "offload.db") as other:
        a, b = Metrics(store), Metrics(other)
        for _ in range(3):
            a.record(rec("common", client_tokens=10, wire_tokens=4))
        b.record(rec("common", client_tokens=5, wire_tokens=5))
        b.record(rec("common", prefix_kept=False, break_cause="windowing"))
        a.flush()
        b.flush()
        snap = b.snapshot()
        assert snap["live"]["counters"]["requests"] == 2
        assert snap["cumulative"]["counters"]["requests"] == 5  # a's three as well
        assert snap["cumulative"]["counters"]["tokens_saved"] == 18
        assert snap["sessions"]["common"]["cumulative"]["counters"]["requests"] == 5
        a.record(rec("common"))
        a.flush()
    later = Metrics(store).snapshot()
    assert later["cumulative"]["counters"]["requests"] == 6
    assert later["cumulative"]["breaks"] == {"windowing": 1}
    assert later["sessions"]["common"]["cumulative"]["counters"]["requests"] == 6


PROXIES = 3
REQUESTS = 60
# One proxy's counters in a process of its own: waits for "go", then records REQUESTS
# requests over two sessions, flushing every seventh request and once at the end.
PROXY = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from offload.proxy.figures.metrics import Metrics, RequestRecord
    from offload.store.store import Store

    where, n = sys.argv[1], int(sys.argv[2])
    store = Store(where if "://" in where else Path(where))
    metrics = Metrics(store)
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(n):
        broke = i % 5 == 4
        metrics.record(RequestRecord(
            session_id=f"s{i % 2}", client_tokens=3, wire_tokens=1,
            prefix_kept=not broke, break_cause="windowing" if broke else None,
        ))
        if i % 7 == 0:
            metrics.flush()
    metrics.flush()
    store.close()
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_proxy_processes_flushing_at_once_lose_no_count(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = request.getfixturevalue("pg_database") if backend == "postgresql" else None
    where = where or str(tmp_path / "offload.db")
    Store(where if "://" in where else Path(where)).close()  # migrated before they start
    run_together(
        [[sys.executable, "-c", PROXY, where, str(REQUESTS)]] * PROXIES,
        [tmp_path / f"home-{w}" for w in range(PROXIES)],
        timeout=300,
    )
    with Store(where if "://" in where else Path(where)) as store:
        snap = Metrics(store).snapshot()
    total = snap["cumulative"]
    assert total["counters"]["requests"] == PROXIES * REQUESTS
    assert total["counters"]["tokens_saved"] == 2 * PROXIES * REQUESTS
    assert total["breaks"] == {"windowing": PROXIES * REQUESTS // 5}
    for sid in ("s0", "s1"):
        assert (
            snap["sessions"][sid]["cumulative"]["counters"]["requests"] == PROXIES * REQUESTS // 2
        )


def test_a_flush_writes_one_row_per_changed_counter_set_not_per_request(store: Store) -> None:
    m = Metrics(store)
    for i in range(100):
        m.record(rec("a" if i % 2 else "b"))
    assert m.flush() == 3  # totals + two sessions
    assert m.flush() == 0  # nothing changed
    assert not m.dirty


def test_only_the_most_recent_sessions_are_kept(store: Store) -> None:
    now = [0.0]
    m = Metrics(store, max_sessions=2, clock=lambda: now[0])
    for sid in ("a", "b", "c"):
        now[0] += 1
        m.record(rec(sid))
    m.flush()
    assert set(m.snapshot()["sessions"]) == {"b", "c"}
    keys = {k for k, _ in store.state_items("proxy.metrics")}
    assert keys == {"session:b", "session:c"}
    assert set(store.tallies("proxy.metrics")) == {"totals", "session:b", "session:c"}
    assert m.snapshot()["cumulative"]["counters"]["requests"] == 3


def test_prometheus_text_has_one_family_per_meaning_with_sessions_and_causes_apart() -> None:
    m = Metrics(clock=lambda: 1700000000.0)
    m.record(rec("s1", prompt_tokens=10, cached_tokens=5))
    m.record(rec("s1", prefix_kept=False, break_cause="client_edit"))
    text = m.prometheus({"context_size_tokens": ("context size", 2048.0)})
    families = read(text)
    assert value(families, "offload_proxy_requests_total") == 2
    assert value(families, "offload_proxy_session_requests_total", session="s1") == 2
    assert value(families, "offload_proxy_prefix_breaks_total", cause="client_edit") == 1
    assert value(families, "offload_proxy_cache_reuse_ratio") == 0.5
    assert value(families, "offload_proxy_context_size_tokens") == 2048
    assert value(families, "offload_proxy_start_time_seconds") == 1700000000
    assert "window=" not in text


def test_every_counter_has_help_and_a_family_that_sums_without_double_counting() -> None:
    m = Metrics()
    for sid in ("s1", "s2", "s2"):
        m.record(rec(sid, client_tokens=10, wire_tokens=4, prompt_tokens=4, cached_tokens=2))
    m.record(rec("s2", prefix_kept=False, break_cause="windowing"))
    families = read(m.prometheus())
    for key in COUNTERS:
        assert HELP[key], key
        assert family(key) in families, key
    requests = families["offload_proxy_requests_total"].samples
    assert sum(v for _, v in requests) == 4  # one series: the sum is the total
    sessions = families["offload_proxy_session_requests_total"].samples
    assert sum(v for _, v in sessions) == 4
    breaks = families["offload_proxy_prefix_breaks_total"].samples
    assert sum(v for _, v in breaks) == m.snapshot()["cumulative"]["counters"]["prefix_breaks"]
    assert value(families, "offload_proxy_saved_tokens_total") == 18
    assert "since the store began" in families["offload_proxy_requests_total"].help


# --- the counter -----------------------------------------------------------------------------


def test_message_texts_include_parts_and_tool_call_arguments() -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "look"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"function": {"name": "read", "arguments": '{"p": 1}'}}],
        },
    ]
    assert message_texts(msgs) == ["look", "read", '{"p": 1}']
