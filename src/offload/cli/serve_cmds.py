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
import html
import json
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from offload.cli.common import open_store
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
POLL_MS = 3000
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
    parser.add_argument(
        "--root",
        action="append",
        default=[],
        metavar="DIR",
        help="a directory offload_path may read (repeatable; default: the project root)",
    )
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
    p = served.settings.proxy
    return Guard(
        app,
        bind_host=p.host,
        allowed_hosts=p.allowed_hosts,
        allowed_origins=p.allowed_origins,
        bearer_token=p.bearer_token,
    )


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


# -- the dashboard -------------------------------------------------------------------------

STORE_FIGURES = (
    ("entries", "store.entries", "int"),
    ("tokens", "store.tokens", "int"),
    ("blocks", "store.blocks", "int"),
    ("raw bytes", "store.raw_bytes", "bytes"),
    ("stored bytes", "store.stored_bytes", "bytes"),
    ("on disk", "store.disk_bytes", "bytes"),
    ("pinned", "store.pinned", "int"),
    ("checked out", "store.hot", "int"),
)
# paths under proxy.live / proxy.cumulative
PROXY_FIGURES = (
    ("requests", "counters.requests", "int"),
    ("errors", "counters.errors", "int"),
    ("client tokens", "counters.client_tokens", "int"),
    ("wire tokens", "counters.wire_tokens", "int"),
    ("tokens saved", "counters.tokens_saved", "int"),
    ("stubs made", "counters.stubs_made", "int"),
    ("windowed requests", "counters.windowed", "int"),
    ("cache reuse", "cache_reuse_ratio", "pct"),
    ("prefix breaks", "counters.prefix_breaks", "int"),
)
SESSION_ROWS = 15

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:64rem;padding:1rem 1.5rem;
color:#1d232a;background:#fafafa}h1{font-size:1.3rem;margin:.2rem 0}h2{font-size:1.05rem;
margin:1.4rem 0 .4rem}table{border-collapse:collapse;width:100%;background:#fff}
td,th{border-bottom:1px solid #e3e6ea;padding:.25rem .5rem;text-align:left}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}pre{background:#f0f2f4;
padding:.5rem .7rem;overflow-x:auto;margin:.3rem 0}.muted{color:#68717c}
.off{color:#a33}.on{color:#276b2f}section.s{background:#fff;border:1px solid #e3e6ea;
padding:.5rem .8rem;margin:.5rem 0}code{background:#f0f2f4;padding:0 .2rem}
"""

_JS = """
const fmt={int:v=>v==null?'\u2014':Number(v).toLocaleString('en-US'),
pct:v=>v==null?'\u2014':(v*100).toFixed(1)+'%',text:v=>v==null?'\u2014':String(v),
bytes:v=>{if(v==null)return'\u2014';const u=['B','KiB','MiB','GiB','TiB'];let i=0;
while(v>=1024&&i<4){v/=1024;i++}return(i?v.toFixed(1):String(v))+' '+u[i]}};
function get(o,p){for(const k of p.split('.')){if(o==null)return null;o=o[k]}return o}
function ago(s){s=Math.max(0,Math.round(s));return s<60?s+'s':s<3600?Math.floor(s/60)+'m':
s<86400?Math.floor(s/3600)+'h':Math.floor(s/86400)+'d'}
function sessions(st){const b=document.getElementById('sessions');b.replaceChildren();
const all=Object.entries(get(st,'proxy.sessions')||{}).slice(0,__ROWS__);
for(const [id,s] of all){const c=s.cumulative,tr=document.createElement('tr');
const cells=[id.slice(0,12),fmt.int(c.counters.requests),fmt.int(c.counters.client_tokens),
fmt.int(c.counters.wire_tokens),fmt.int(c.counters.tokens_saved),fmt.pct(c.cache_reuse_ratio),
ago(st.now-s.last_seen)+' ago'];cells.forEach((t,i)=>{const td=document.createElement('td');
td.textContent=t;if(i)td.className='n';tr.appendChild(td)});b.appendChild(tr)}
document.getElementById('nosessions').hidden=all.length>0}
async function poll(){const h={},t=sessionStorage.getItem('offload-token');
if(t)h.Authorization='Bearer '+t;try{const r=await fetch('/api/stats',{headers:h});
if(r.status===401){document.getElementById('auth').hidden=false;return}
const st=await r.json();document.getElementById('auth').hidden=true;
for(const el of document.querySelectorAll('[data-k]'))el.textContent=fmt[el.dataset.f](get(st,el.dataset.k));
sessions(st);document.getElementById('at').textContent='updated '+new Date().toLocaleTimeString()}
catch(e){document.getElementById('at').textContent='not answering: '+e}}
document.getElementById('auth').addEventListener('submit',e=>{e.preventDefault();
sessionStorage.setItem('offload-token',document.getElementById('tok').value);poll()});
poll();setInterval(poll,__POLL__);
"""


def _get(obj: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def fmt(value: Any, kind: str) -> str:
    """A figure as the dashboard shows it (the page's script formats the same way)."""
    if value is None or isinstance(value, dict | list):
        return "\u2014"
    if kind == "text":
        return str(value)
    if kind == "pct":
        return f"{float(value) * 100:.1f}%"
    if kind == "bytes":
        size, units = float(value), ("B", "KiB", "MiB", "GiB", "TiB")
        i = 0
        while size >= 1024 and i < len(units) - 1:
            size, i = size / 1024, i + 1
        return f"{size:.1f} {units[i]}" if i else f"{int(size)} B"
    return f"{int(value):,}"


def _ago(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    return f"{s // 3600}h" if s < 86400 else f"{s // 86400}d"


def _cell(stats: Any, path: str, kind: str) -> str:
    value = fmt(_get(stats, path), kind)
    return f'<td class="n" data-k="{html.escape(path)}" data-f="{kind}">{html.escape(value)}</td>'


def _snippet(text: str) -> str:
    return f"<pre>{html.escape(text)}</pre>"


def _span(stats: Any, path: str, kind: str) -> str:
    value = fmt(_get(stats, path), kind)
    return f'<span data-k="{html.escape(path)}" data-f="{kind}">{html.escape(value)}</span>'


def _surfaces_html(surfaces: Mapping[str, Any], stats: Any, settings: Settings) -> str:
    e = html.escape
    proxy, mcp, gateway = surfaces["proxy"], surfaces["mcp"], surfaces["gateway"]
    root = proxy["url"].removesuffix("/v1")
    auth = ' --header "Authorization: Bearer $TOKEN"' if settings.mcp.bearer_token else ""
    parts = [
        '<section class="s"><h3>LLM proxy <span class="on">mounted</span></h3>'
        f"<p>base URL <code>{e(proxy['url'])}</code>, upstream <code>{e(proxy['upstream'])}</code>"
        f" (n_ctx {_span(stats, 'proxy.upstream.n_ctx', 'int')})</p>"
        + _snippet(
            f"export OPENAI_BASE_URL={proxy['url']}      # OpenAI-compatible clients\n"
            f"export ANTHROPIC_BASE_URL={root}     # Anthropic Messages clients"
        )
        + "</section>",
        '<section class="s"><h3>MCP server <span class="on">mounted</span></h3>'
        f"<p>Streamable HTTP at <code>{e(mcp['url'])}</code>, scope <code>{e(mcp['scope'])}</code>,"
        f" {_span(stats, 'surfaces.mcp.tool_calls', 'int')} tool calls</p>"
        + _snippet(
            f"claude mcp add --transport http offload {mcp['url']}{auth}\n"
            + json.dumps({"mcpServers": {"offload": {"type": "http", "url": mcp["url"]}}})
        )
        + "</section>",
    ]
    if gateway["mounted"]:
        rows = "".join(
            f"<tr><td>{e(name)}</td>"
            + (
                f'<td data-k="surfaces.gateway.upstreams.{e(name)}.state" data-f="text">'
                if "." not in name
                else "<td>"
            )
            + f'{e(u["state"])}</td><td class="n">{u["tools"]}</td>'
            f'<td class="muted">{e(u["error"])}</td></tr>'
            for name, u in gateway["upstreams"].items()
        )
        parts.append(
            '<section class="s"><h3>MCP gateway <span class="on">mounted</span></h3>'
            f"<p>Streamable HTTP at <code>{e(gateway['url'])}</code>, config"
            f" <code>{e(gateway['config'])}</code></p>"
            + _snippet(
                f"claude mcp add --transport http offload-gateway {gateway['url']}\n"
                + json.dumps(
                    {"mcpServers": {"offload-gateway": {"type": "http", "url": gateway["url"]}}}
                )
            )
            + "<table><tr><th>upstream</th><th>state</th><th class=n>tools</th><th></th></tr>"
            + rows
            + "</table></section>"
        )
    else:
        parts.append(
            '<section class="s"><h3>MCP gateway <span class="off">not mounted</span></h3>'
            f"<p>{e(gateway['why'])}</p></section>"
        )
    parts.append(
        '<section class="s"><h3>Metrics <span class="on">mounted</span></h3>'
        f"<p>Prometheus text at <code>{e(surfaces['metrics']['url'])}</code>, JSON at"
        f" <code>{e(root)}/api/stats</code></p>"
        + _snippet(f"curl -s {surfaces['metrics']['url']}")
        + "</section>"
    )
    return "".join(parts)


def render_dashboard(
    surfaces: Mapping[str, Any],
    stats: Mapping[str, Any] | None,
    *,
    settings: Settings | None = None,
    token_required: bool = False,
) -> str:
    """The dashboard: one self-contained page (no external assets) whose script refreshes
    the figures from ``/api/stats``. ``stats`` None renders placeholders (the script fills
    them in once it has the bearer token)."""
    from offload import __version__

    e = html.escape
    settings = settings or Settings()
    store_rows = "".join(
        f"<tr><td>{e(label)}</td>{_cell(stats, path, kind)}</tr>"
        for label, path, kind in STORE_FIGURES
    )
    proxy_rows = "".join(
        f"<tr><td>{e(label)}</td>{_cell(stats, 'proxy.live.' + path, kind)}"
        f"{_cell(stats, 'proxy.cumulative.' + path, kind)}</tr>"
        for label, path, kind in PROXY_FIGURES
    )
    session_rows = ""
    sessions = _get(stats, "proxy.sessions") or {}
    now = time.time()
    for sid, s in list(sessions.items())[:SESSION_ROWS]:
        c = s["cumulative"]
        cells = [
            fmt(c["counters"]["requests"], "int"),
            fmt(c["counters"]["client_tokens"], "int"),
            fmt(c["counters"]["wire_tokens"], "int"),
            fmt(c["counters"]["tokens_saved"], "int"),
            fmt(c["cache_reuse_ratio"], "pct"),
            _ago(now - float(s.get("last_seen") or now)) + " ago",
        ]
        session_rows += f"<tr><td>{e(sid[:12])}</td>" + "".join(
            f'<td class="n">{e(x)}</td>' for x in cells
        )
        session_rows += "</tr>"
    script = _JS.replace("__ROWS__", str(SESSION_ROWS)).replace("__POLL__", str(POLL_MS))
    note = (
        "<p class=muted>[proxy] bearer_token is set: figures appear once the page has it.</p>"
        if token_required
        else ""
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>offload</title>
<meta name="viewport" content="width=device-width,initial-scale=1"><style>{_CSS}</style></head>
<body><h1>offload <span class="muted">{e(__version__)}</span></h1>
<p class="muted" id="at">{"" if stats is None else "rendered " + time.strftime("%H:%M:%S")}</p>
{note}<form id="auth" hidden><input id="tok" type="password" placeholder="proxy bearer token">
<button>use</button></form>
<h2>Store</h2><table>{store_rows}</table>
<h2>Proxy</h2><table><tr><th></th><th class="n">since start</th><th class="n">all time</th></tr>
{proxy_rows}</table>
<h2>Sessions</h2><table><thead><tr><th>session</th><th class="n">requests</th>
<th class="n">client tokens</th><th class="n">wire tokens</th><th class="n">saved</th>
<th class="n">cache reuse</th><th class="n">last seen</th></tr></thead>
<tbody id="sessions">{session_rows}</tbody></table>
<p class="muted" id="nosessions"{" hidden" if session_rows else ""}>no proxy sessions yet</p>
<h2>Surfaces</h2>{_surfaces_html(surfaces, stats, settings)}
<script>{script}</script></body></html>
"""
