"""The ``offload serve`` dashboard: one self-contained HTML page (no external assets).

Rendered on the server from ``/api/stats`` figures; a little vanilla script refreshes them.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Mapping
from typing import Any

from offload.config import Settings

POLL_MS = 3000  # how often the page refreshes its figures
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
