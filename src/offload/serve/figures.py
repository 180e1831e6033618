"""The host's own Prometheus gauges: the store and the mounted surfaces."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: (key in ``Store.stats()``, family, help)
STORE_GAUGES = (
    ("entries", "offload_store_entries", "live entries in the store (every scope)"),
    ("tokens", "offload_store_tokens", "tokens of the live entries' text"),
    ("blocks", "offload_store_blocks", "content-addressed blocks holding the entries' text"),
    ("raw_bytes", "offload_store_raw_bytes", "block bytes before compression"),
    ("stored_bytes", "offload_store_stored_bytes", "block bytes as stored, after compression"),
    ("disk_bytes", "offload_store_disk_bytes", "the database's size on disk (WAL included)"),
)


def own_metrics(store: Mapping[str, Any], surfaces: Mapping[str, Any]) -> str:
    """Prometheus gauges of the store and of the mounted surfaces (one family per meaning,
    units in the names: see :mod:`offload.proxy.exposition` for the proxy's counters)."""
    lines: list[str] = []

    def family(name: str, kind: str, help_: str, samples: list[tuple[str, Any]]) -> None:
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{labels} {value}" for labels, value in samples)

    if "error" not in store:
        for key, name, help_ in STORE_GAUGES:
            family(name, "gauge", help_, [("", store[key])])
    family(
        "offload_surface_mounted",
        "gauge",
        "1 when the surface is served by this process, 0 when it is not mounted",
        [(f'{{surface="{name}"}}', int(s["mounted"])) for name, s in surfaces.items()],
    )
    calls = (surfaces.get("mcp") or {}).get("calls_by_tool") or {}
    family(
        "offload_mcp_tool_calls_total",
        "counter",
        "MCP tool calls answered at /mcp, by tool, since this process started",
        [(f'{{tool="{label(tool)}"}}', n) for tool, n in sorted(calls.items())],
    )
    upstreams = (surfaces.get("gateway") or {}).get("upstreams") or {}
    if upstreams:
        family(
            "offload_gateway_upstream_ready",
            "gauge",
            "1 while the gateway's upstream server is connected, 0 otherwise",
            [
                (f'{{server="{label(name)}"}}', int(u["state"] == "ready"))
                for name, u in upstreams.items()
            ],
        )
    return "\n".join(lines) + "\n"


def label(value: str) -> str:
    """A Prometheus label value, escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
