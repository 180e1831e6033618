"""Streamable HTTP at ``/mcp``: Host/Origin checks (DNS rebinding) and an optional bearer token."""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any, Literal

import anyio
from mcp.server import Server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp

from offload.config import HTTP_DEFAULTS, HttpSettings, McpSettings
from offload.core.http.bearer import BearerGuard, HostGuard, OriginGuard
from offload.core.http.bodylimit import BodyLimit, jsonrpc
from offload.core.http.listen import (
    SHUTDOWN_GRACE_S,
    Origins,
    bind_url,
    exposure_warning,
    served_names,
    token_guard,
    url_host,
)

MCP_PATH = "/mcp"


def security_settings(mcp: McpSettings) -> TransportSecuritySettings:
    """The MCP SDK's own checks, which run after offload's (:class:`HostGuard`,
    :class:`OriginGuard`) and so always agree: loopback names plus the configured host as
    Host; as Origin the served one plus ``[mcp] allowed_origins`` (never seen: offload's
    check, which compares as RFC 6454 says, does not pass the header on)."""
    names = [url_host(name) for name in served_names(mcp.host)]
    port = str(mcp.port) if mcp.port else "*"
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*names, *(f"{n}:*" for n in names)],  # as HostGuard, which runs first
        allowed_origins=[f"http://{n}:{port}" for n in names] + list(mcp.allowed_origins),
    )


def http_app(
    server: Server[Any], mcp: McpSettings, *, http: HttpSettings = HTTP_DEFAULTS
) -> ASGIApp:
    """The ASGI app serving ``server`` at ``/mcp`` (its lifespan runs the session manager),
    every request body bounded in size and time by ``http`` (a JSON-RPC error past it)."""
    app: ASGIApp = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        transport_security=security_settings(mcp),
        host=mcp.host,
        # the SDK's own bound (plain text) is set to ours, which answers first in JSON-RPC
        max_request_body_size=http.max_body_bytes,
    )
    app = BodyLimit(app, http, jsonrpc, anyio.fail_after)
    if mcp.bearer_token:
        app = BearerGuard(app, mcp.bearer_token, "[mcp] bearer_token")
    names = served_names(mcp.host)
    # Host, then Origin, before the token: a foreign page is refused as such
    app = OriginGuard(app, Origins(names, mcp.allowed_origins), "[mcp] allowed_origins")
    return HostGuard(app, names)


def banner(mcp: McpSettings) -> str:
    """What ``offload mcp --http`` prints on start: the URL it binds, and a warning when
    other machines can reach it."""
    head = f"offload mcp: Streamable HTTP at {bind_url(mcp.host, mcp.port)}{MCP_PATH}"
    tools = token_guard(
        mcp.bearer_token,
        f"the MCP tools {MCP_PATH} (read, write and forget the store)",
        "[mcp] bearer_token",
    )
    warning = exposure_warning(mcp.host, [tools])
    return head if warning is None else f"{head}\n{warning}"


def run_http(
    server: Server[Any],
    mcp: McpSettings,
    *,
    http: HttpSettings = HTTP_DEFAULTS,
    protocol: type[asyncio.Protocol] | Literal["auto"] = "auto",
    sock: socket.socket | None = None,
) -> None:
    """Serve until interrupted (``protocol``: uvicorn's HTTP protocol; ``sock``: a socket
    already listening on the address, else uvicorn binds it)."""
    import uvicorn

    app = http_app(server, mcp, http=http)
    config = uvicorn.Config(
        app,
        host=mcp.host,
        port=mcp.port,
        log_level="warning",
        lifespan="on",
        http=protocol,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
    print(banner(mcp), file=sys.stderr, flush=True)
    uvicorn.Server(config).run(sockets=None if sock is None else [sock])
