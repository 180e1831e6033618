"""Serving the gateway to its client: over stdio, or Streamable HTTP on loopback."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import anyio
import uvicorn
from mcp.server import Server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp

from offload.config import HTTP_DEFAULTS, HttpSettings
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
from offload.gateway.children import kill_all
from offload.gateway.server import Gateway

MCP_PATH = "/mcp"
_STOP_S = 5.0  # upstreams get this long to close after a signal, then they are killed


async def run_stdio(gateway: Gateway, serve: Callable[[Server[Any]], Awaitable[None]]) -> None:
    """Serve one client over this process's stdin/stdout until it disconnects; ``serve``
    runs the gateway's MCP server on them (the command's own stdio loop, which bounds a
    line)."""
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_exit_on_signal, gateway)

            async def body() -> None:
                await serve(gateway.server)

            await gateway.serve(tg, body)
            tg.cancel_scope.cancel()
    finally:
        kill_all()


async def _exit_on_signal(gateway: Gateway) -> None:
    """SIGTERM/SIGHUP/SIGINT: stop the upstreams and their children, then exit.

    The exit is immediate (``os._exit``) because stdin is read in a worker thread
    that no cancellation interrupts; everything acknowledged is already committed.
    """
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP, signal.SIGINT) as signals:
        async for signum in signals:
            gateway.stop()
            await gateway.wait_stopped(_STOP_S)
            kill_all()
            os._exit(128 + signum)


TOKEN_SETTING = "[gateway] bearer_token"


def http_app(
    gateway: Gateway,
    host: str,
    *,
    path: str = MCP_PATH,
    port: int = 0,
    http: HttpSettings = HTTP_DEFAULTS,
) -> ASGIApp:
    """The gateway's Streamable HTTP app at ``path``: Host loopback (or ``host``), Origin
    only the served one (those names on the port the request came in on), bodies bounded
    in size and time by ``http``.

    Its lifespan runs the SDK session manager only; the upstream connections are started
    and stopped separately (:meth:`Gateway.serve`, or :meth:`Gateway.start` / ``stop``).
    """
    names = [url_host(name) for name in served_names(host)]
    shown_port = str(port) if port else "*"
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*names, *(f"{n}:*" for n in names)],  # as HostGuard, which runs first
        allowed_origins=[f"http://{n}:{shown_port}" for n in names],
    )
    app: ASGIApp = gateway.server.streamable_http_app(
        streamable_http_path=path,
        host=host,
        transport_security=security,
        max_request_body_size=http.max_body_bytes,
    )
    app = BodyLimit(app, http, jsonrpc, anyio.fail_after)
    token = gateway.settings.bearer_token
    if token:
        app = BearerGuard(app, token, TOKEN_SETTING)
    # Host, then Origin, before the token: a foreign page is refused as such
    app = OriginGuard(app, Origins(served_names(host)))
    return HostGuard(app, served_names(host))


def banner(host: str, port: int, token: str = "") -> str:
    """What ``offload gateway --http`` prints on start: the URL it binds, and a warning
    when other machines can reach it (saying whether ``[gateway] bearer_token`` guards it)."""
    head = f"offload gateway: Streamable HTTP at {bind_url(host, port)}{MCP_PATH}"
    exposed = [token_guard(token, f"the gateway {MCP_PATH}: every upstream's tools", TOKEN_SETTING)]
    warning = exposure_warning(host, exposed)
    return head if warning is None else f"{head}\n{warning}"


async def run_http(
    gateway: Gateway,
    host: str,
    port: int,
    *,
    ready: anyio.Event | None = None,
    http: HttpSettings = HTTP_DEFAULTS,
    protocol: type[asyncio.Protocol] | Literal["auto"] = "auto",
    sock: socket.socket | None = None,
) -> None:
    """Serve Streamable HTTP at ``http://host:port/mcp`` until cancelled (``protocol``:
    uvicorn's HTTP protocol; ``sock``: a socket already listening on the address, else
    uvicorn binds it)."""
    app = http_app(gateway, host, port=port, http=http)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        http=protocol,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
    print(banner(host, port, gateway.settings.bearer_token), file=sys.stderr, flush=True)
    server = uvicorn.Server(config)
    try:
        await _serve_http(gateway, server, ready, None if sock is None else [sock])
    finally:
        kill_all()


async def _serve_http(
    gateway: Gateway,
    server: uvicorn.Server,
    ready: anyio.Event | None,
    sockets: list[socket.socket] | None,
) -> None:
    async with anyio.create_task_group() as tg:

        async def body() -> None:
            async with anyio.create_task_group() as inner:
                inner.start_soon(server.serve, sockets)
                while not server.started:
                    await anyio.sleep(0.02)
                if ready is not None:
                    ready.set()
                # uvicorn returns on SIGINT/SIGTERM (should_exit)
                while not server.should_exit:
                    await anyio.sleep(0.2)

        try:
            await gateway.serve(tg, body)
        finally:
            server.should_exit = True
            tg.cancel_scope.cancel()
