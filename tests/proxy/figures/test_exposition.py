"""The proxy's counters as Prometheus text: the families and values ``/metrics`` has always
carried, written by ``prometheus_client`` and read back by its parser."""

from __future__ import annotations

from typing import Any

from exposition import read, value
from offload.proxy.figures.exposition import family, render, session_family
from offload.proxy.figures.metrics import COUNTERS, HELP

#: Every family of the proxy's exposition, in order, as dashboards and alerts know them.
FAMILIES = [
    "offload_proxy_requests_total",
    "offload_proxy_errors_total",
    "offload_proxy_client_tokens_total",
    "offload_proxy_wire_tokens_total",
    "offload_proxy_saved_tokens_total",
    "offload_proxy_stubs_made_total",
    "offload_proxy_stubbed_messages_total",
    "offload_proxy_windowed_requests_total",
    "offload_proxy_emergency_trimmed_requests_total",
    "offload_proxy_upstream_prompt_tokens_total",
    "offload_proxy_upstream_cached_tokens_total",
    "offload_proxy_cache_reporting_responses_total",
    "offload_proxy_prefix_breaks_total",
    "offload_proxy_reused_tokens_total",
    "offload_proxy_errored_wire_tokens_total",
    "offload_proxy_recall_blocks_total",
    "offload_proxy_recall_tokens_total",
    "offload_proxy_recalled_messages_total",
    "offload_proxy_recalled_refs_read_total",
    "offload_proxy_loop_broken_requests_total",
    "offload_proxy_client_compactions_total",
    "offload_proxy_retrieval_rounds_total",
    "offload_proxy_retrieval_read_calls_total",
    "offload_proxy_retrieval_search_calls_total",
    "offload_proxy_retrieval_bad_calls_total",
    "offload_proxy_retrieval_answered_requests_total",
    "offload_proxy_retrieval_exhausted_requests_total",
    "offload_proxy_retrieval_compacted_rounds_total",
    "offload_proxy_session_requests_total",
    "offload_proxy_session_client_tokens_total",
    "offload_proxy_session_wire_tokens_total",
    "offload_proxy_session_saved_tokens_total",
    "offload_proxy_session_reused_tokens_total",
    "offload_proxy_cache_reuse_ratio",
    "offload_proxy_kv_reuse_ratio",
    "offload_proxy_start_time_seconds",
    "offload_proxy_context_size_tokens",
]

STARTED = 1733456789.123456


def snapshot(ratio: float | None = 0.4375) -> dict[str, Any]:
    counters = {k: i * 3 for i, k in enumerate(COUNTERS)}
    return {
        "cumulative": {
            "counters": counters,
            "breaks": {"system": 2, 'we"ird\\cause\n': 1},
            "cache_reuse_ratio": ratio,
            "kv_reuse_ratio": 0.8125,
        },
        "sessions": {
            "s1": {"cumulative": {"counters": {k: 7 for k in COUNTERS}}},
            'a"b': {"cumulative": {"counters": {k: 1 for k in COUNTERS}}},
        },
        "started_at": STARTED,
    }


def test_the_exposition_carries_every_family_by_its_established_name() -> None:
    text = render(snapshot(), HELP, {"context_size_tokens": ("context size", 2048.0)})
    assert list(read(text)) == FAMILIES


def test_counter_values_come_through_exactly_with_their_help() -> None:
    snap = snapshot()
    families = read(render(snap, HELP))
    for key, n in snap["cumulative"]["counters"].items():
        if key != "prefix_breaks":
            assert value(families, family(key)) == n
            assert families[family(key)].help == f"{HELP[key]}, since the store began"
    breaks = family("prefix_breaks")
    assert value(families, breaks, cause="system") == 2
    assert value(families, breaks, cause='we"ird\\cause\n') == 1


def test_per_session_counters_are_labelled_by_session() -> None:
    families = read(render(snapshot(), HELP))
    assert value(families, session_family("requests"), session="s1") == 7
    assert value(families, session_family("tokens_saved"), session='a"b') == 1


def test_gauges_keep_full_precision_and_an_unknown_ratio_has_no_sample() -> None:
    families = read(render(snapshot(), HELP, {"context_size_tokens": ("context size", 2048)}))
    assert value(families, "offload_proxy_start_time_seconds") == STARTED
    assert value(families, "offload_proxy_cache_reuse_ratio") == 0.4375
    assert value(families, "offload_proxy_kv_reuse_ratio") == 0.8125
    assert value(families, "offload_proxy_context_size_tokens") == 2048
    unknown = read(render(snapshot(ratio=None), HELP))
    assert unknown["offload_proxy_cache_reuse_ratio"].samples == []
