"""Serving the gateway to its client: over stdio, or Streamable HTTP on loopback."""

from __future__ import annotations

import os
import signal

import anyio
import uvicorn
from mcp.server.stdio import stdio_server
from starlette.applications import Starlette

from offload.gateway.children import kill_all
from offload.gateway.server import Gateway

MCP_PATH = "/mcp"
_STOP_S = 5.0  # upstreams get this long to close after a signal, then they are killed


async def run_stdio(gateway: Gateway) -> None:
    """Serve one client over this process's stdin/stdout until it disconnects."""
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_exit_on_signal, gateway)

            async def body() -> None:
                async with stdio_server() as (read, write):
                    await gateway.server.run(
                        read, write, gateway.server.create_initialization_options()
                    )

            await gateway.serve(tg, body)
            tg.cancel_scope.cancel()
    finally:
        kill_all()


async def _exit_on_signal(gateway: Gateway) -> None:
    """SIGTERM/SIGHUP/SIGINT: stop the upstreams and their children, then exit.

    The exit is immediate (``os._exit``) because the SDK reads stdin in a worker thread
    that no cancellation interrupts; everything acknowledged is already committed.
    """
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP, signal.SIGINT) as signals:
        async for signum in signals:
            gateway.stop()
            await gateway.wait_stopped(_STOP_S)
            kill_all()
            os._exit(128 + signum)


def http_app(gateway: Gateway, host: str, *, path: str = MCP_PATH) -> Starlette:
    """The gateway's Streamable HTTP app at ``path``.

    Its lifespan runs the SDK session manager only; the upstream connections are started
    and stopped separately (:meth:`Gateway.serve`, or :meth:`Gateway.start` / ``stop``).
    """
    return gateway.server.streamable_http_app(streamable_http_path=path, host=host)


async def run_http(
    gateway: Gateway, host: str, port: int, *, ready: anyio.Event | None = None
) -> None:
    """Serve Streamable HTTP at ``http://host:port/mcp`` until cancelled."""
    app = http_app(gateway, host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    try:
        await _serve_http(gateway, server, ready)
    finally:
        kill_all()


async def _serve_http(gateway: Gateway, server: uvicorn.Server, ready: anyio.Event | None) -> None:
    async with anyio.create_task_group() as tg:

        async def body() -> None:
            async with anyio.create_task_group() as inner:
                inner.start_soon(server.serve)
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
