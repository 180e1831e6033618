"""The host's own Prometheus gauges: the store and the mounted surfaces."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from offload.proxy.figures.exposition import text

#: (key in ``Store.stats()``, family, help)
STORE_GAUGES = (
    ("entries", "offload_store_entries", "live entries in the store (every scope)"),
    ("tokens", "offload_store_tokens", "tokens of the live entries' text"),
    ("blocks", "offload_store_blocks", "content-addressed blocks holding the entries' text"),
    ("raw_bytes", "offload_store_raw_bytes", "block bytes before compression"),
    ("stored_bytes", "offload_store_stored_bytes", "block bytes as stored, after compression"),
    ("disk_bytes", "offload_store_disk_bytes", "the database's size on disk (WAL included)"),
    (
        "search_memory_bytes",
        "offload_store_search_memory_bytes",
        "memory this process holds to search the store (index, vectors, cached bodies)",
    ),
)


def own_metrics(store: Mapping[str, Any], surfaces: Mapping[str, Any]) -> str:
    """Prometheus gauges of the store and of the mounted surfaces (one family per meaning,
    units in the names: see :mod:`offload.proxy.figures.exposition` for the proxy's counters)."""
    return text(HostCollector(store, surfaces))


class HostCollector:
    """A ``prometheus_client`` collector over one reading of the store's statistics and
    of the surfaces' states."""

    def __init__(self, store: Mapping[str, Any], surfaces: Mapping[str, Any]) -> None:
        self._store = store
        self._surfaces = surfaces

    def collect(self) -> Iterator[Metric]:
        """The store's gauges (unless its statistics failed), then the surfaces'."""
        if "error" not in self._store:
            for key, name, help_ in STORE_GAUGES:
                yield GaugeMetricFamily(name, help_, self._store[key])
        mounted = GaugeMetricFamily(
            "offload_surface_mounted",
            "1 when the surface is served by this process, 0 when it is not mounted",
            labels=["surface"],
        )
        for name, s in self._surfaces.items():
            mounted.add_metric([name], int(s["mounted"]))
        yield mounted
        yield self._tool_calls()
        upstreams = (self._surfaces.get("gateway") or {}).get("upstreams") or {}
        if upstreams:
            ready = GaugeMetricFamily(
                "offload_gateway_upstream_ready",
                "1 while the gateway's upstream server is connected, 0 otherwise",
                labels=["server"],
            )
            for name, u in upstreams.items():
                ready.add_metric([name], int(u["state"] == "ready"))
            yield ready

    def _tool_calls(self) -> Metric:
        calls = (self._surfaces.get("mcp") or {}).get("calls_by_tool") or {}
        fam = CounterMetricFamily(
            "offload_mcp_tool_calls_total",
            "MCP tool calls answered at /mcp, by tool, since this process started",
            labels=["tool"],
        )
        for tool, n in sorted(calls.items()):
            fam.add_metric([tool], n)
        return fam
