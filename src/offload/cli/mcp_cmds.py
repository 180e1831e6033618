"""``offload mcp``: the cooperative MCP server over stdio (default) or ``--http``."""

from __future__ import annotations

import argparse
from pathlib import Path

from offload.cli.common import (
    add_root_arg,
    emit,
    held_port,
    open_store,
    quiet_shutdown_cancels,
    scope_name,
)
from offload.config import Settings
from offload.core.text.wording import counted


def configure(parser: argparse.ArgumentParser) -> None:
    """Flags of ``offload mcp``."""
    parser.add_argument("--http", action="store_true", help="serve Streamable HTTP at /mcp")
    parser.add_argument("--host", help="HTTP listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="HTTP port (default 8901)")
    parser.add_argument(
        "--scope",
        type=scope_name,
        help="scope name (default: [mcp] scope, else the git root of the cwd)",
    )
    add_root_arg(parser)
    parser.add_argument("--tools", help="comma-separated subset of tools to offer (default: all)")
    parser.add_argument(
        "--catalog", action="store_true", help="print the tool catalog's token cost and exit"
    )


def overrides(args: argparse.Namespace) -> dict[str, object]:
    """Flags as dotted settings keys."""
    out: dict[str, object] = {}
    if args.host:
        out["mcp.host"] = args.host
    if args.port is not None:
        out["mcp.port"] = args.port
    if args.scope:
        out["mcp.scope"] = args.scope
    if args.root:
        out["mcp.roots"] = tuple(args.root)
    if args.tools:
        out["mcp.tools"] = tuple(t.strip() for t in args.tools.split(",") if t.strip())
    return out


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Serve until the client goes away (stdio) or until interrupted (HTTP)."""
    from offload.mcp.catalog import catalog_tokens, select

    tools = select(settings.mcp.tools)  # unknown names fail before anything starts
    if args.catalog:
        data = {"tools": [t.name for t in tools], "tokens": catalog_tokens(tools)}
        emit(
            args,
            data,
            lambda d: f"{counted(len(tools), 'tool')}, {counted(d['tokens'], 'token')} (cl100k)",
        )
        return 0
    from offload.mcp.context import McpContext
    from offload.mcp.server import build_server

    # a taken port is one line, exit 7, before the store opens; held from here on
    with held_port(settings.mcp.host, settings.mcp.port, "mcp.port", hold=args.http) as sock:
        store = open_store(settings, serving=True)
        try:
            server = build_server(McpContext.build(settings, store, Path.cwd()))
            if args.http:
                from offload.cli.headers_deadline import bounded_http
                from offload.mcp.http import run_http

                protocol = bounded_http(settings.http)
                quiet_shutdown_cancels()
                run_http(server, settings.mcp, http=settings.http, protocol=protocol, sock=sock)
            else:
                from offload.mcp.stdio import run_stdio

                run_stdio(server, settings.http.max_body_bytes)
        finally:
            store.close()
    return 0
