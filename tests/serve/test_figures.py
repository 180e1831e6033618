"""The host's own gauges as Prometheus text: the store's and the surfaces' families, read
back by ``prometheus_client``'s parser."""

from __future__ import annotations

from exposition import read, value
from offload.serve.figures import STORE_GAUGES, own_metrics

STORE = {
    "entries": 3,
    "tokens": 100,
    "blocks": 2,
    "raw_bytes": 1000,
    "stored_bytes": 400,
    "disk_bytes": 4096,
    "search_memory_bytes": 2048,
}
SURFACES = {
    "proxy": {"mounted": True},
    "mcp": {"mounted": True, "calls_by_tool": {"search": 3, 'x"y': 1}},
    "gateway": {
        "mounted": True,
        "upstreams": {"git": {"state": "ready"}, "fs": {"state": "starting"}},
    },
}


def test_the_store_and_surface_families_keep_their_names_and_values() -> None:
    families = read(own_metrics(STORE, SURFACES))
    assert list(families) == [
        "offload_store_entries",
        "offload_store_tokens",
        "offload_store_blocks",
        "offload_store_raw_bytes",
        "offload_store_stored_bytes",
        "offload_store_disk_bytes",
        "offload_store_search_memory_bytes",
        "offload_surface_mounted",
        "offload_mcp_tool_calls_total",
        "offload_gateway_upstream_ready",
    ]
    for key, name, _ in STORE_GAUGES:
        assert value(families, name) == STORE[key]
    assert value(families, "offload_surface_mounted", surface="proxy") == 1
    assert value(families, "offload_mcp_tool_calls_total", tool='x"y') == 1
    assert value(families, "offload_gateway_upstream_ready", server="git") == 1
    assert value(families, "offload_gateway_upstream_ready", server="fs") == 0


def test_a_failed_store_reading_leaves_out_the_store_families() -> None:
    families = read(own_metrics({"error": "locked"}, {"proxy": {"mounted": False}}))
    assert list(families) == ["offload_surface_mounted", "offload_mcp_tool_calls_total"]
    assert value(families, "offload_surface_mounted", surface="proxy") == 0
