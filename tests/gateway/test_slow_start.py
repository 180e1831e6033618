"""A client that connects while upstreams are still starting sees them as they come up.

Real parts: upstreams as real stdio children (``catalog_server.py``), the gateway started
in the background as ``offload serve`` starts it, the SDK client in-process.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from gateway_helpers import catalog_upstream

from mcp import Client
from offload.config import GatewaySettings
from offload.gateway.config import GatewayConfig, ServerConfig
from offload.gateway.server import Gateway
from offload.store.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


async def first_contact(tmp_path: Path, servers: list[ServerConfig]) -> tuple[str, list[str]]:
    """Start the gateway in the background and connect at once: (instructions, tool names)."""
    store = Store(tmp_path / "offload.db")
    settings = GatewaySettings(connect_timeout_s=30.0)
    gateway = Gateway(settings, GatewayConfig(tuple(servers), {}), store)
    instructions, names = "", []
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(gateway.start, tg)  # not awaited: as offload serve does
            try:
                async with Client(gateway.server, mode="legacy") as client:
                    names = [t.name for t in (await client.list_tools()).tools]
                    instructions = client.instructions or ""
            finally:
                gateway.stop()
    finally:
        store.close()
    return instructions, names


async def test_a_slow_healthy_upstream_is_not_listed_as_unavailable(tmp_path: Path) -> None:
    instructions, names = await first_contact(
        tmp_path, [catalog_upstream("git", "mcp-server-git.json")]
    )
    assert "Unavailable" not in instructions, instructions
    assert "git__git_status" in names
