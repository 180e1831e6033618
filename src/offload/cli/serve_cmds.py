"""``offload serve``: proxy + MCP + gateway + dashboard + ``/metrics``, one process, one port.

One uvicorn server on ``[proxy] host:port`` (default http://127.0.0.1:8900) routes each
request, path unchanged, to the surface that owns it:

- ``/mcp``: the cooperative MCP tools over Streamable HTTP (as ``offload mcp --http``);
- ``/gateway/mcp``: the gateway over Streamable HTTP, when a gateway config is given;
- ``/``, ``/metrics``, ``/api/stats``: the dashboard and figures of every surface;
- anything else: the proxy (``/v1/*``, and pass-through paths such as ``/props``).

Each surface comes from its own app factory and keeps its own guards (Host/Origin checks,
the optional bearer token). The host's lifespan runs each sub-app's ASGI lifespan, as a
server would, plus the gateway's upstream connections; shutdown stops them in reverse.
Surfaces never import each other: only this CLI module sees them all.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from offload.cli.common import add_root_arg, open_store
from offload.cli.dashboard import render_dashboard
from offload.config import Settings, load_settings
from offload.errors import OffloadError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from offload.gateway.server import Gateway
    from offload.mcp.context import McpContext
    from offload.store.store import Store

MCP_PATH = "/mcp"
GATEWAY_PATH = "/gateway/mcp"
HOST_PATHS = frozenset({"/", "/metrics", "/api/stats"})
# uvicorn waits this long for open streams (MCP SSE, long generations) on SIGTERM, then
# cancels them; then the lifespans shut down
SHUTDOWN_GRACE_S = 5
# gateway upstreams get this long to close their connections before they are cancelled
UPSTREAM_STOP_S = 5.0
NO_GATEWAY = "no gateway config: start with --gateway-config gateway.toml (or set [gateway] config)"


def configure(parser: argparse.ArgumentParser) -> None:
    """Flags of ``offload serve``."""
    parser.add_argument("--host", help="listen address (default [proxy] host, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (default [proxy] port, 8900)")
    parser.add_argument(
        "--upstream", help="the model server's base URL (default http://127.0.0.1:8080)"
    )
    parser.add_argument(
        "--gateway-config",
        metavar="FILE",
        help="gateway TOML with [servers.NAME] tables; mounts the gateway at /gateway/mcp",
    )
    parser.add_argument("--scope", help="MCP scope name (default: the git root of the cwd)")
    add_root_arg(parser)
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )


def overrides(args: argparse.Namespace) -> dict[str, object]:
    """Flags as dotted settings keys."""
    out: dict[str, object] = {}
    for flag, key in (
        ("host", "proxy.host"),
        ("port", "proxy.port"),
        ("upstream", "proxy.upstream"),
        ("gateway_config", "gateway.config"),
        ("scope", "mcp.scope"),
    ):
        value = getattr(args, flag, None)
        if value is not None and value != "":
            out[key] = value
    if getattr(args, "root", None):
        out["mcp.roots"] = tuple(args.root)
    return out


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Serve every surface until SIGINT/SIGTERM."""
    import logging
    import sys

    import uvicorn

    level = str(getattr(args, "log_level", "info")).upper()
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if level != "DEBUG":  # one line per upstream and in-process call drowns the access log
        logging.getLogger("httpx").setLevel(logging.WARNING)
    gateway_file = Path(settings.gateway.config) if settings.gateway.config else None
    if gateway_file is not None:
        settings = with_gateway_table(settings, gateway_file)
    store = open_store(settings)
    try:
        served = build(settings, store, cwd=Path.cwd(), gateway_file=gateway_file)
        print(served.banner(), file=sys.stderr, flush=True)
        # access logs carry method, path and status only: never headers or keys
        uvicorn.run(
            served.app,
            host=settings.proxy.host,
            port=settings.proxy.port,
            log_level=level.lower(),
            # a line per request costs ~0.1 ms on the streaming path; --log-level debug has it
            access_log=level == "DEBUG",
            lifespan="on",
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        )
    finally:
        store.close()
    return 0


def with_gateway_table(settings: Settings, path: Path) -> Settings:
    """The gateway file's own ``[gateway]`` table applies, as with ``offload gateway
    --config FILE``; environment and flags still win."""
    from_file = load_settings(config_file=path, env={})
    found: dict[str, Any] = {}
    for key, source in from_file.sources.items():
        if not key.startswith("gateway.") or key == "gateway.config":
            continue
        if source.startswith("file:") and not settings.sources.get(key, "").startswith(
            ("env:", "flag")
        ):
            found[key] = getattr(from_file.gateway, key.partition(".")[2])
    return settings.with_overrides(found) if found else settings


# -- composition ---------------------------------------------------------------------------


def _host_part(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):  # a wildcard bind is reached locally over loopback
        return "127.0.0.1"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


@dataclass
class Served:
    """The composed app and what the dashboard and ``/api/stats`` report about it."""

    settings: Settings
    store: Store
    base_url: str
    proxy: ASGIApp
    mcp: ASGIApp
    mcp_ctx: McpContext
    gateway: Gateway | None
    gateway_app: ASGIApp | None
    gateway_file: Path | None
    app: ASGIApp = dataclasses.field(init=False)

    def banner(self) -> str:
        """What ``offload serve`` prints on start."""
        rows = [
            f"offload serve on {self.base_url}",
            f"  proxy      {self.base_url}/v1  (upstream {self.settings.proxy.upstream})",
            f"  mcp        {self.base_url}{MCP_PATH}",
            "  gateway    "
            + (f"{self.base_url}{GATEWAY_PATH}" if self.gateway else f"not mounted ({NO_GATEWAY})"),
            f"  dashboard  {self.base_url}/   metrics {self.base_url}/metrics",
        ]
        return "\n".join(rows)

    def surfaces(self) -> dict[str, Any]:
        """Which surfaces are mounted, where, and their health."""
        gateway: dict[str, Any]
        if self.gateway is None:
            gateway = {"mounted": False, "url": None, "why": NO_GATEWAY}
        else:
            gateway = {
                "mounted": True,
                "url": self.base_url + GATEWAY_PATH,
                "config": str(self.gateway_file),
                "upstreams": {
                    u.name: {"state": u.state, "tools": len(u.tools), "error": u.error}
                    for u in self.gateway.upstreams.values()
                },
            }
        return {
            "proxy": {
                "mounted": True,
                "url": self.base_url + "/v1",
                "upstream": self.settings.proxy.upstream,
            },
            "mcp": {
                "mounted": True,
                "url": self.base_url + MCP_PATH,
                "scope": self.mcp_ctx.scope,
                "tool_calls": sum(self.mcp_ctx.stats.calls.values()),
            },
            "gateway": gateway,
            "dashboard": {"mounted": True, "url": self.base_url + "/"},
            "metrics": {"mounted": True, "url": self.base_url + "/metrics"},
        }

    async def _proxy_get(self, path: str) -> tuple[int, str]:
        """One of the proxy's own endpoints, asked in-process through its public app."""
        import httpx

        headers = {}
        if self.settings.proxy.bearer_token:
            headers["authorization"] = f"Bearer {self.settings.proxy.bearer_token}"
        transport = httpx.ASGITransport(app=self.proxy)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            resp = await c.get(path, headers=headers)
        return resp.status_code, resp.text

    async def _store_stats(self) -> dict[str, Any]:
        try:
            stats: dict[str, Any] = await anyio.to_thread.run_sync(self.store.stats)
        except OffloadError as exc:  # a busy store: report it, keep serving
            return {"error": str(exc)}
        return stats

    async def stats(self) -> dict[str, Any]:
        """``/api/stats``: proxy stats, store stats and the mounted surfaces."""
        from offload import __version__

        status, text = await self._proxy_get("/api/stats")
        proxy: dict[str, Any] = (
            json.loads(text) if status == 200 else {"error": f"proxy /api/stats: {status}"}
        )
        return {
            "version": __version__,
            "url": self.base_url,
            "now": time.time(),
            "surfaces": self.surfaces(),
            "proxy": proxy,
            "store": await self._store_stats(),
        }

    async def metrics(self) -> str:
        """``/metrics``: the proxy's Prometheus text plus store and surface gauges."""
        status, text = await self._proxy_get("/metrics")
        proxy_text = text if status == 200 else f"# proxy /metrics answered {status}\n"
        return proxy_text + own_metrics(await self._store_stats(), self.surfaces())


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
                (f'{{server="{_label(name)}"}}', int(u["state"] == "ready"))
                for name, u in upstreams.items()
            ],
        )
    return "\n".join(lines) + "\n"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def build(
    settings: Settings, store: Store, *, cwd: Path, gateway_file: Path | None = None
) -> Served:
    """Build every surface from its own factory and the host app routing between them."""
    from offload.mcp.context import McpContext
    from offload.mcp.http import http_app as mcp_http_app
    from offload.mcp.server import build_server
    from offload.proxy.app import create_app

    proxy = create_app(settings.proxy, store)
    mcp_ctx = McpContext.build(settings, store, cwd)
    # the MCP guard must accept the Host this process is actually reached at
    mcp_settings = dataclasses.replace(settings.mcp, host=settings.proxy.host)
    mcp = mcp_http_app(build_server(mcp_ctx), mcp_settings)
    gateway: Gateway | None = None
    gateway_app: ASGIApp | None = None
    if gateway_file is not None:
        from offload.gateway.config import load_gateway_config
        from offload.gateway.run import http_app as gateway_http_app
        from offload.gateway.server import Gateway

        gateway = Gateway(settings.gateway, load_gateway_config(gateway_file), store)
        gateway_app = gateway_http_app(gateway, settings.proxy.host, path=GATEWAY_PATH)
    base = f"http://{_host_part(settings.proxy.host)}:{settings.proxy.port}"
    served = Served(settings, store, base, proxy, mcp, mcp_ctx, gateway, gateway_app, gateway_file)
    served.app = PathRouter(_host_app(served), proxy, mcp, gateway_app)
    return served


class PathRouter:
    """Pure ASGI: each request goes, path unchanged, to the surface that owns it; the
    lifespan goes to the host app, which runs every sub-app's lifespan."""

    def __init__(
        self, host: ASGIApp, proxy: ASGIApp, mcp: ASGIApp, gateway: ASGIApp | None
    ) -> None:
        self.host = host
        self.proxy = proxy
        self.mcp = mcp
        self.gateway = gateway

    def pick(self, path: str) -> ASGIApp:
        """The app serving ``path``."""
        if _under(path, MCP_PATH):
            return self.mcp
        if _under(path, "/gateway"):
            return self.gateway or self.host  # the host says it is not mounted
        if path in HOST_PATHS:
            return self.host
        return self.proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self.host if scope["type"] == "lifespan" else self.pick(scope.get("path", "/"))
        await app(scope, receive, send)


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


def _host_app(served: Served) -> ASGIApp:
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse
    from starlette.routing import Route

    from offload.proxy.errors_http import Guard

    async def dashboard(request: Request) -> Response:
        token = bool(served.settings.proxy.bearer_token)
        stats = None if token else await served.stats()
        page = render_dashboard(
            served.surfaces(), stats, settings=served.settings, token_required=token
        )
        return HTMLResponse(page)

    async def metrics(request: Request) -> Response:
        return PlainTextResponse(await served.metrics(), media_type="text/plain; version=0.0.4")

    async def api_stats(request: Request) -> Response:
        return JSONResponse(await served.stats())

    async def no_gateway(request: Request) -> Response:
        return JSONResponse({"error": f"the gateway is not mounted: {NO_GATEWAY}"}, 404)

    app = Starlette(
        routes=[
            Route("/", dashboard, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/api/stats", api_stats, methods=["GET"]),
            Route("/gateway{rest:path}", no_gateway),
        ],
        lifespan=lambda _app: lifespans(served),
    )
    # the host's own pages get the proxy's guard: Host/Origin checks, and the bearer token
    # on /metrics and /api/stats when [proxy] bearer_token is set
    return Guard.for_proxy(app, served.settings.proxy)


# -- lifespans -----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def lifespans(served: Served) -> AsyncIterator[None]:
    """Start the proxy, the MCP session manager, the gateway's upstreams and its session
    manager, in that order; stop them in reverse, then close the store.

    The store is closed here, not only after ``uvicorn.run`` returns: on SIGTERM uvicorn
    re-raises the signal once shutdown is complete, so code after it never runs.
    """
    async with AsyncExitStack() as stack:
        stack.callback(served.store.close)
        await stack.enter_async_context(asgi_lifespan(served.proxy, "proxy"))
        await stack.enter_async_context(asgi_lifespan(served.mcp, "mcp"))
        if served.gateway is not None and served.gateway_app is not None:
            await stack.enter_async_context(gateway_upstreams(served.gateway))
            await stack.enter_async_context(asgi_lifespan(served.gateway_app, "gateway"))
        yield


@contextlib.asynccontextmanager
async def asgi_lifespan(app: ASGIApp, name: str) -> AsyncIterator[None]:
    """Run ``app``'s own ASGI lifespan, as a server would: startup on entry, shutdown on exit.

    The app runs in a task of its own for the whole span, so whatever its lifespan opens
    (task groups, the MCP session manager) is closed by the task that opened it.
    """
    to_app, app_inbox = anyio.create_memory_object_stream[dict[str, Any]](1)
    app_outbox, from_app = anyio.create_memory_object_stream[dict[str, Any]](1)
    scope: dict[str, Any] = {
        "type": "lifespan",
        "asgi": {"version": "3.0", "spec_version": "2.0"},
        "state": {},
    }

    async def receive() -> Message:
        return await app_inbox.receive()

    async def send(message: Message) -> None:
        await app_outbox.send(dict(message))

    async def run_app() -> None:
        async with app_outbox:  # closed when the app returns, so nobody waits forever
            await app(scope, receive, send)

    async with anyio.create_task_group() as tg, to_app, from_app:
        tg.start_soon(run_app)
        await to_app.send({"type": "lifespan.startup"})
        await _expect(from_app, "lifespan.startup", name)
        try:
            yield
        finally:
            await to_app.send({"type": "lifespan.shutdown"})
            await _expect(from_app, "lifespan.shutdown", name)


async def _expect(stream: MemoryObjectReceiveStream[dict[str, Any]], phase: str, name: str) -> None:
    try:
        message = await stream.receive()
    except anyio.EndOfStream:
        raise OffloadError(f"{name}: its app returned during {phase}") from None
    if message.get("type") != f"{phase}.complete":
        raise OffloadError(f"{name}: {phase} failed: {message.get('message', '')}")


@contextlib.asynccontextmanager
async def gateway_upstreams(gateway: Gateway) -> AsyncIterator[None]:
    """The gateway's upstream connections, each owned by its task for its whole life.

    Started in the background: a slow or broken upstream does not hold up the proxy and
    the MCP tools (the gateway's catalog fills in, with list_changed, as upstreams connect).
    """
    async with anyio.create_task_group() as tg:
        tg.start_soon(gateway.start, tg)
        try:
            yield
        finally:
            gateway.stop()
            # the upstream tasks close their connections and return; cancel stragglers
            tg.cancel_scope.deadline = anyio.current_time() + UPSTREAM_STOP_S
