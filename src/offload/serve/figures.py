"""The host's own Prometheus gauges: the store and the mounted surfaces."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def own_metrics(store: Mapping[str, Any], surfaces: Mapping[str, Any]) -> str:
    """Prometheus gauges of the store and of the mounted surfaces."""
    lines: list[str] = []

    def gauge(name: str, help_: str, samples: list[tuple[str, Any]]) -> None:
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} gauge")
        lines.extend(f"{name}{labels} {value}" for labels, value in samples)

    if "error" not in store:
        gauge(
            "offload_store_entries",
            "live entries in the store (every scope)",
            [("", store["entries"])],
        )
        gauge("offload_store_tokens", "tokens of the live entries", [("", store["tokens"])])
        gauge("offload_store_blocks", "content-addressed blocks", [("", store["blocks"])])
        gauge(
            "offload_store_bytes",
            "block bytes before (raw) and after (stored) compression, and the database on disk",
            [
                ('{kind="raw"}', store["raw_bytes"]),
                ('{kind="stored"}', store["stored_bytes"]),
                ('{kind="disk"}', store["disk_bytes"]),
            ],
        )
    gauge(
        "offload_surface_mounted",
        "1 when the surface is served by this process",
        [(f'{{surface="{name}"}}', int(s["mounted"])) for name, s in surfaces.items()],
    )
    upstreams = (surfaces.get("gateway") or {}).get("upstreams") or {}
    if upstreams:
        gauge(
            "offload_gateway_upstream_ready",
            "1 while the gateway's upstream server is connected",
            [
                (f'{{server="{label(name)}"}}', int(u["state"] == "ready"))
                for name, u in upstreams.items()
            ],
        )
    return "\n".join(lines) + "\n"


def label(value: str) -> str:
    """A Prometheus label value, escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
