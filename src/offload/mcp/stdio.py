"""Serving over stdio: what MCP clients spawn."""

from __future__ import annotations

from typing import Any

import anyio
from mcp.server import Server
from mcp.server.stdio import stdio_server


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one client on stdin/stdout until it closes them."""
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def run_stdio(server: Server[Any]) -> None:
    """Blocking :func:`serve_stdio`."""
    anyio.run(serve_stdio, server)
