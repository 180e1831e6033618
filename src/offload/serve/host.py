"""The one-port host: every surface from its own factory, routed by path.

Each request goes, path unchanged, to the surface that owns it:

- ``/mcp``: the cooperative MCP tools over Streamable HTTP (as ``offload mcp --http``);
- ``/gateway/mcp``: the gateway over Streamable HTTP, when a gateway config is given;
- ``/``, ``/metrics``, ``/api/stats``: the dashboard and figures of every surface;
- ``/api/*``: offload's own namespace: a path under it that names no route is a 404
  naming the routes (never the model server's 502), one of them with a trailing slash a
  redirect to it; ``/favicon.ico`` is the dashboard's (no icon: 204);
- anything else: the proxy (``/v1/*``, and pass-through paths such as ``/props``).

Each surface keeps its own guards (Host/Origin checks, the optional bearer token). The
router's lifespan runs each sub-app's ASGI lifespan (:mod:`offload.serve.lifespan`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from offload.config import Settings
from offload.core.http.bodylimit import BodyLimit, plain_json
from offload.core.http.listen import WILDCARDS, bind_url, exposure_warning, token_guard, url_host
from offload.core.untrusted import inline
from offload.core.urls import redact_url
from offload.errors import OffloadError
from offload.serve import store_api
from offload.serve.dashboard import render_dashboard
from offload.serve.figures import own_metrics
from offload.serve.lifespan import lifespans

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute
    from starlette.types import ASGIApp

    from offload.gateway.server import Gateway
    from offload.mcp.context import McpContext
    from offload.store.store import Store

MCP_PATH = "/mcp"
GATEWAY_PATH = "/gateway/mcp"
HOST_PATHS = ("/", "/metrics", "/api/stats", "/api/search", "/api/entry", "/api/entries")
# what [proxy] bearer_token guards on the host's own pages (the page itself shows no
# figures and no stored text without it)
TOKEN_PATHS = ("/metrics", "/api/stats", "/api/search", "/api/entry", "/api/entries")
NO_GATEWAY = "no gateway config: start with --gateway-config gateway.toml (or set [gateway] config)"
API_PREFIX = "/api/"
#: the host's routes under /api/ as a 404 names them
API_ROUTES = ("/api/stats", "/api/search?q=", "/api/entry?ref=", "/api/entries")
# the dashboard's origin: a browser asks it for an icon (the page itself declares none)
FAVICON = "/favicon.ico"
_ANY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def _host_part(host: str) -> str:
    if host in WILDCARDS:  # a wildcard bind is reached locally over loopback
        return "127.0.0.1"
    return url_host(host)


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
        """What ``offload serve`` prints on start: the address it binds (and the one to
        use from this machine when that is a wildcard), a warning when other machines can
        reach it, then each surface's URL."""
        host, port = self.settings.proxy.host, self.settings.proxy.port
        bound = bind_url(host, port)
        here = "" if bound == self.base_url else f" (from this machine: {self.base_url})"
        warning = exposure_warning(host, self.exposed())
        rows = [
            f"offload serve on {bound}{here}",
            *([warning] if warning else []),
            f"  proxy      {self.base_url}/v1  (upstream {redact_url(self.settings.proxy.upstream)})",
            f"  mcp        {self.base_url}{MCP_PATH}",
            "  gateway    "
            + (f"{self.base_url}{GATEWAY_PATH}" if self.gateway else f"not mounted ({NO_GATEWAY})"),
            f"  dashboard  {self.base_url}/   metrics {self.base_url}/metrics",
        ]
        return "\n".join(rows)

    def exposed(self) -> list[tuple[str, bool]]:
        """What a client on another machine reaches at this port, and whether a bearer
        token guards it (:func:`offload.core.http.listen.exposure_warning`)."""
        parts = [
            (
                "the proxy /v1 and every path it passes to the model server (offload has no"
                " token for them: only the upstream's own API key, if it checks one)",
                False,
            ),
            token_guard(
                self.settings.mcp.bearer_token,
                "the MCP tools /mcp (read, write and forget the store)",
                "[mcp] bearer_token",
            ),
            token_guard(
                self.settings.proxy.bearer_token,
                "the dashboard's figures and store browser, /metrics, /api/*",
                "[proxy] bearer_token",
            ),
        ]
        if self.gateway is not None:
            parts.append(
                token_guard(
                    self.settings.gateway.bearer_token,
                    "the gateway /gateway/mcp: every upstream's tools",
                    "[gateway] bearer_token",
                )
            )
        return parts

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
                    u.name: {
                        "state": u.state,
                        "tools": len(u.tools),
                        "error": u.error,
                        "catalog_cut": u.catalog_cut,  # empty: its whole catalog is kept
                    }
                    for u in self.gateway.upstreams.values()
                },
            }
        return {
            "proxy": {
                "mounted": True,
                "url": self.base_url + "/v1",
                # /api/stats and the dashboard show it: never a password
                "upstream": redact_url(self.settings.proxy.upstream),
            },
            "mcp": {
                "mounted": True,
                "url": self.base_url + MCP_PATH,
                "scope": self.mcp_ctx.scope,
                "tool_calls": sum(self.mcp_ctx.stats.calls.values()),
                "calls_by_tool": dict(self.mcp_ctx.stats.calls),
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
            stats: dict[str, Any] = await anyio.to_thread.run_sync(self._store_figures)
        except OffloadError as exc:  # a busy store: report it, keep serving
            return {"error": str(exc)}
        return stats

    def _store_figures(self) -> dict[str, Any]:
        """The whole store's figures, and the served scope's entries beside them (what the
        store browser and ``offload stats`` in the same project show)."""
        scope = self.mcp_ctx.scope
        counts = self.store.scope_counts()
        return {**self.store.stats(), "scope": scope, "scope_entries": counts.get(scope, 0)}

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


def build(
    settings: Settings, store: Store, *, cwd: Path, gateway_file: Path | None = None
) -> Served:
    """Build every surface from its own factory and the host app routing between them."""
    from offload.mcp.context import McpContext
    from offload.mcp.http import http_app as mcp_http_app
    from offload.mcp.server import build_server
    from offload.proxy.app import create_app, proxy_settings

    proxy = create_app(proxy_settings(settings, cwd), store, http=settings.http)
    mcp_ctx = McpContext.build(settings, store, cwd)
    # the MCP guard must accept the Host this process is actually reached at
    mcp_settings = dataclasses.replace(
        settings.mcp, host=settings.proxy.host, port=settings.proxy.port
    )
    mcp = mcp_http_app(build_server(mcp_ctx), mcp_settings, http=settings.http)
    gateway: Gateway | None = None
    gateway_app: ASGIApp | None = None
    if gateway_file is not None:
        from offload.gateway.config import load_gateway_config
        from offload.gateway.run import http_app as gateway_http_app
        from offload.gateway.server import Gateway
        from offload.llm.minilm import tool_encoder

        config = load_gateway_config(gateway_file)
        gateway = Gateway(settings.gateway, config, store, tool_encoder=tool_encoder(settings))
        gateway_app = gateway_http_app(
            gateway,
            settings.proxy.host,
            path=GATEWAY_PATH,
            port=settings.proxy.port,
            http=settings.http,
        )
    base = f"http://{_host_part(settings.proxy.host)}:{settings.proxy.port}"
    served = Served(settings, store, base, proxy, mcp, mcp_ctx, gateway, gateway_app, gateway_file)
    served.app = _router(served)
    return served


def _under(prefix: str, app: ASGIApp) -> list[BaseRoute]:
    """Routes sending ``prefix`` and everything below it to ``app`` with the path unchanged
    (a ``Route`` whose endpoint is an ASGI app passes the scope through; a ``Mount`` would
    move the prefix into ``root_path`` and redirect the bare prefix)."""
    from starlette.routing import Route

    return [Route(prefix, app), Route(prefix + "/{rest:path}", app)]


def _router(served: Served) -> ASGIApp:
    """Each request, path unchanged, to the surface that owns it; the lifespan runs every
    sub-app's lifespan."""
    from starlette.routing import Mount, Route, Router

    host = _host_app(served)
    routes: list[BaseRoute] = [
        *_under(MCP_PATH, served.mcp),
        *_under("/gateway", served.gateway_app or host),  # the host says it is not mounted
        *(Route(path, host) for path in HOST_PATHS),
        *(Route(path + "/", host) for path in HOST_PATHS if path != "/"),
        Route(API_PREFIX.rstrip("/"), host),
        Route(API_PREFIX + "{rest:path}", host),
        Route(FAVICON, host),
        Mount("", served.proxy),  # everything else, path unchanged
    ]
    return Router(routes=routes, lifespan=lambda _app: lifespans(served))


async def _slash(request: Request) -> Response:
    """A known route asked with a trailing slash: the same route (308 keeps the method)."""
    from starlette.responses import RedirectResponse

    query = f"?{request.url.query}" if request.url.query else ""
    return RedirectResponse(request.url.path.rstrip("/") + query, 308)


async def _no_api_route(request: Request) -> Response:
    """A path under /api/ that names no route: offload's namespace, never the upstream's."""
    from starlette.responses import JSONResponse

    return JSONResponse(unknown_api_route(request.url.path), 404)


async def _favicon(request: Request) -> Response:
    """The dashboard has no icon: an empty answer, not the model server's."""
    from starlette.responses import Response

    return Response(status_code=204)


def _store_query(
    served: Served, query: Callable[..., dict[str, Any]], param: str
) -> Callable[[Request], Awaitable[Response]]:
    """An endpoint answering ``query(store, ?param=..., scope=...)`` as JSON, off the
    event loop; an OffloadError is its message with the status it maps to."""
    from starlette.responses import JSONResponse

    async def endpoint(request: Request) -> Response:
        value = request.query_params.get(param, "")
        call = functools.partial(
            query, served.store, value, scope=scope_asked(served, request.query_params)
        )
        try:
            found = await anyio.to_thread.run_sync(call)
        except OffloadError as exc:
            return JSONResponse({"error": store_api.message_of(exc)}, store_api.status_of(exc))
        return JSONResponse(found)

    return endpoint


def _entries_endpoint(served: Served) -> Callable[[Request], Awaitable[Response]]:
    """``/api/entries``: the store's listing for the query's filters, off the event loop."""
    from starlette.responses import JSONResponse

    async def api_entries(request: Request) -> Response:
        params = dict(request.query_params)
        try:
            scope = scope_asked(served, params)
            listing = functools.partial(store_api.listing, served.store, params, scope=scope)
            found = await anyio.to_thread.run_sync(listing)
        except OffloadError as exc:
            return JSONResponse({"error": store_api.message_of(exc)}, store_api.status_of(exc))
        return JSONResponse(found)

    return api_entries


def _host_app(served: Served) -> ASGIApp:
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse
    from starlette.routing import Route

    from offload.proxy.transport.errors_http import Guard

    async def dashboard(request: Request) -> Response:
        token = bool(served.settings.proxy.bearer_token)
        stats = None if token else await served.stats()
        browse = None if token else await _browse(served, request.query_params)
        page = render_dashboard(
            served.surfaces(), stats, settings=served.settings, token_required=token, browse=browse
        )
        return HTMLResponse(page)

    api_search = _store_query(served, store_api.search, "q")
    api_entry = _store_query(served, store_api.entry, "ref")
    api_entries = _entries_endpoint(served)

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
            Route("/api/search", api_search, methods=["GET"]),
            Route("/api/entry", api_entry, methods=["GET"]),
            Route("/api/entries", api_entries, methods=["GET"]),
            Route("/gateway{rest:path}", no_gateway),
            *(Route(path + "/", _slash, methods=_ANY_METHOD) for path in HOST_PATHS if path != "/"),
            Route(API_PREFIX.rstrip("/"), _no_api_route, methods=_ANY_METHOD),
            Route(API_PREFIX + "{rest:path}", _no_api_route, methods=_ANY_METHOD),
            Route(FAVICON, _favicon),
        ]
    )
    # the host's own pages get the proxy's guard: Host/Origin checks, and the bearer token
    # on /metrics and /api/stats when [proxy] bearer_token is set; bodies are bounded too
    # (they take none, but an unread body must not be buffered without bound either)
    bounded = BodyLimit(app, served.settings.http, plain_json, anyio.fail_after)
    return Guard.for_proxy(bounded, served.settings.proxy, token_paths=TOKEN_PATHS)


def unknown_api_route(path: str) -> dict[str, Any]:
    """The 404 body of a path under ``/api/`` that names no route: offload's namespace,
    so never passed to the model server."""
    return {
        "error": f"no route {inline(path, 200)}: offload's routes under /api/ are "
        + ", ".join(API_ROUTES)
        + " (a model server's own /api/ routes, such as Ollama's, are reached through its"
        " /v1 here, or through `offload proxy` alone)",
        "routes": list(API_ROUTES),
    }


def scope_asked(served: Served, params: Mapping[str, str]) -> str | None:
    """The scope a store browser request looks in: the served scope (the MCP server's),
    or every scope with ``all_scopes=1``."""
    every = params.get("all_scopes", "").strip().lower() in ("1", "true", "on")
    return None if every else served.mcp_ctx.scope


async def _browse(served: Served, params: Mapping[str, str]) -> dict[str, Any] | None:
    """The store search and entry that ``/?q=...&entry=...`` asks for, or without either a
    page of entries to browse (``/?kind=...&pinned=1&page=...``), for the page without
    script; errors are shown on the page."""
    query, ref = params.get("q", "").strip(), params.get("entry", "").strip()
    scope = scope_asked(served, params)
    if not query and not ref:
        listing = functools.partial(store_api.listing, served.store, params, scope=scope)
        try:
            found = await anyio.to_thread.run_sync(listing)
        except OffloadError as exc:
            return {"listing_error": str(exc), "scope": scope, "all_scopes": scope is None}
        return {"listing": found, "scope": scope, "all_scopes": scope is None}
    out: dict[str, Any] = {"query": query, "scope": scope}
    if query:
        search = functools.partial(store_api.search, served.store, query, scope=scope)
        try:
            out.update(await anyio.to_thread.run_sync(search))
        except OffloadError as exc:
            out["error"] = str(exc)
    if ref:
        opened = functools.partial(store_api.entry, served.store, ref, scope=scope)
        try:
            out["entry"] = await anyio.to_thread.run_sync(opened)
        except OffloadError as exc:
            out["entry_error"] = str(exc)
    return out
