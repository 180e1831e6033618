"""The proxy's counters as Prometheus text, by Prometheus conventions.

One family per meaning: ``offload_proxy_<what>_total`` counts since the store began (the
counters are persisted across restarts); this process's own start is the gauge
``offload_proxy_start_time_seconds``, so "since start" is ``x - x @ start`` and ``rate()``
works as usual. Per-session figures have names of their own (``offload_proxy_session_*``),
so summing a family never counts a request twice. Units are in the names (``_tokens``,
``_seconds``); a family that counts events names what it counts (``_requests``).

To add a counter: add its key to ``metrics.COUNTERS`` and ``metrics.HELP``; its family is
``offload_proxy_<key>_total`` unless :data:`NAMES` renames it (when the key alone does not
say its unit or what it counts).

The text is written by ``prometheus_client`` (escaping, number formats, ``_total``); the
counters themselves are ours, persisted in the store and summed across processes, so they
reach it through a custom collector built from one snapshot, not through its registry.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

PREFIX = "offload_proxy_"
#: Family names (before ``_total``) for keys that alone do not say what they count.
NAMES = {
    "tokens_saved": "saved_tokens",
    "windowed": "windowed_requests",
    "emergency": "emergency_trimmed_requests",
    "prompt_tokens": "upstream_prompt_tokens",
    "cached_tokens": "upstream_cached_tokens",
    "cache_reports": "cache_reporting_responses",
    "recall_hits": "recalled_messages",
    "recall_read": "recalled_refs_read",
    "loop_breaks": "loop_broken_requests",
    "ceilings_learned": "client_compactions",
    "retrieval_rounds": "retrieval_rounds",
    "retrieval_reads": "retrieval_read_calls",
    "retrieval_searches": "retrieval_search_calls",
    "retrieval_bad_calls": "retrieval_bad_calls",
    "retrieval_answers": "retrieval_answered_requests",
    "retrieval_exhausted": "retrieval_exhausted_requests",
    "retrieval_compactions": "retrieval_compacted_rounds",
}
#: Counted by cause instead (``offload_proxy_prefix_breaks_total{cause}``): the unlabelled
#: total would be the sum of the same family.
BY_CAUSE = "prefix_breaks"
#: The per-session families: bounded by the proxy's ``max_sessions``.
SESSION_COUNTERS = ("requests", "client_tokens", "wire_tokens", "tokens_saved", "reused_tokens")
SINCE = "since the store began"


def family(key: str) -> str:
    """The counter family of a counter key, ``_total`` included."""
    return f"{PREFIX}{NAMES.get(key, key)}_total"


def session_family(key: str) -> str:
    """The per-session counter family of a counter key."""
    return f"{PREFIX}session_{NAMES.get(key, key)}_total"


def render(
    snap: Mapping[str, Any],
    help_: Mapping[str, str],
    extra_gauges: Mapping[str, tuple[str, float]] | None = None,
) -> str:
    """Prometheus text of a :meth:`offload.proxy.figures.metrics.Metrics.snapshot`."""
    return text(SnapshotCollector(snap, help_, extra_gauges or {}))


def text(collector: Collector) -> str:
    """The Prometheus text exposition (format 0.0.4) of what ``collector`` yields."""
    return generate_latest(collector).decode("utf-8")


class SnapshotCollector:
    """A ``prometheus_client`` collector over one snapshot of the proxy's counters."""

    def __init__(
        self,
        snap: Mapping[str, Any],
        help_: Mapping[str, str],
        extra_gauges: Mapping[str, tuple[str, float]],
    ) -> None:
        self._snap = snap
        self._help = help_
        self._extra = extra_gauges

    def collect(self) -> Iterator[Metric]:
        """Every family: the counters, the per-session counters, then the gauges."""
        yield from self._counters()
        yield from self._sessions()
        yield from self._gauges()

    def _counters(self) -> Iterator[Metric]:
        totals = self._snap["cumulative"]
        for key, value in totals["counters"].items():
            if key == BY_CAUSE:
                fam = CounterMetricFamily(
                    family(key), f"{self._help[key]}, by cause, {SINCE}", labels=["cause"]
                )
                for cause, n in totals["breaks"].items():
                    fam.add_metric([cause], n)
            else:
                fam = CounterMetricFamily(family(key), f"{self._help[key]}, {SINCE}", value)
            yield fam

    def _sessions(self) -> Iterator[Metric]:
        sessions = self._snap["sessions"]
        for key in SESSION_COUNTERS:
            help_text = f"{self._help[key]}, per session (the most recent sessions only), {SINCE}"
            fam = CounterMetricFamily(session_family(key), help_text, labels=["session"])
            for sid, s in sessions.items():
                fam.add_metric([sid], s["cumulative"]["counters"][key])
            yield fam

    def _gauges(self) -> Iterator[Metric]:
        ratio = self._snap["cumulative"]["cache_reuse_ratio"]
        yield GaugeMetricFamily(
            f"{PREFIX}cache_reuse_ratio",
            f"upstream-cached prompt tokens / upstream prompt tokens, {SINCE}",
            ratio,
        )
        yield GaugeMetricFamily(
            f"{PREFIX}kv_reuse_ratio",
            "wire tokens shared as a prefix with the session's previous request / wire tokens,"
            f" {SINCE}",
            self._snap["cumulative"]["kv_reuse_ratio"],
        )
        gauges = {
            "start_time_seconds": (
                "unix time this proxy process started",
                self._snap["started_at"],
            ),
            **self._extra,
        }
        for name, (help_text, value) in gauges.items():
            yield GaugeMetricFamily(PREFIX + name, help_text, float(value))
