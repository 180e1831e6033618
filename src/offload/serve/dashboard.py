"""The ``offload serve`` dashboard: one self-contained page (no external assets).

Rendered on the server from the ``/api/stats`` figures (tables and inline SVG plots, so it
reads without script); ``assets/dashboard.js`` (package data, inlined) refreshes it, redraws
the plots from ``/api/stats`` and runs the store browser through ``/api/search`` and
``/api/entry``. Every piece of stored or client text is HTML-escaped here and set with
``textContent`` by the script.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

from offload.config import Settings
from offload.proxy.turns import stub_ref
from offload.serve import plots

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
# paths under proxy.live / proxy.cumulative; the label's term is explained in GLOSSARY
PROXY_FIGURES = (
    ("requests", "counters.requests", "int"),
    ("errors", "counters.errors", "int"),
    ("client tokens", "counters.client_tokens", "int"),
    ("wire tokens", "counters.wire_tokens", "int"),
    ("tokens saved", "counters.tokens_saved", "int"),
    ("stubs made", "counters.stubs_made", "int"),
    ("windowed requests", "counters.windowed", "int"),
    ("cache reuse", "cache_reuse_ratio", "pct"),
    ("KV reuse", "kv_reuse_ratio", "pct"),
    ("prefix breaks", "counters.prefix_breaks", "int"),
)
SUMMARY = (
    ("tokens saved, all time", "proxy.cumulative.counters.tokens_saved", "int"),
    ("requests, all time", "proxy.cumulative.counters.requests", "int"),
    ("cache reuse, all time", "proxy.cumulative.cache_reuse_ratio", "pct"),
    ("KV reuse, all time", "proxy.cumulative.kv_reuse_ratio", "pct"),
    ("entries in the store", "store.entries", "int"),
    ("n_ctx of the upstream", "proxy.upstream.n_ctx", "int"),
)
GLOSSARY = {
    "client tokens": "the prompt tokens your client sent to the proxy.",
    "wire tokens": "the prompt tokens the proxy forwarded to the model after rewriting:"
    " what the model actually read. Client tokens minus wire tokens are the tokens saved.",
    "stub": "a short line that stands in for bulky content moved into the store; it says"
    " what it replaced and how to read it back (stored as ctx:sha256:…).",
    "paged out": "older turns of a conversation moved into the store behind one range stub"
    " when the window grew past its high water.",
    "windowed requests": "requests on which the proxy paged out or stubbed to keep the"
    " prompt under its budget.",
    "n_ctx": "the model's context size, read from the upstream; the budget is a share of it.",
    "high water, target, ceiling": "the window's levels as shares of n_ctx: past the high"
    " water the proxy pages old turns out down to the target, in one bite (so the prompt"
    " prefix stays stable for many turns); the ceiling is the hard limit (an emergency"
    " trim).",
    "cache reuse": "the share of the prompt the upstream reported as reused from its KV"
    " cache instead of recomputed: high is fast and cheap.",
    "KV reuse": "the share of the wire tokens each request shared as a prefix with its"
    " session's previous request as the proxy sent it (counted by the proxy): what the"
    " upstream's KV cache can reuse, whether or not the upstream reports it.",
    "prefix breaks": "requests whose prompt did not start with the previous request's"
    " prompt, so the upstream's cache could not be reused; the cause says why (windowing,"
    " the client editing history, a restart, the previous turn's recall block or loop note"
    " dropped from the end, or the upstream evicting its cache).",
}
SESSION_ROWS = 15
PLOT_SESSIONS = 4
RECENT_ROWS = 30


@cache
def asset(name: str) -> str:
    """A file of ``offload/serve/assets`` (package data)."""
    return resources.files("offload.serve").joinpath("assets", name).read_text("utf-8")


def _term(label: str) -> str:
    """``label`` with its glossary explanation as a tooltip, when it has one."""
    e = html.escape
    explained = GLOSSARY.get(label)
    if explained is None:
        return e(label)
    return f'<span class="term" title="{e(explained)}">{e(label)}</span>'


def _session_name(sid: str, session: Mapping[str, Any]) -> str:
    title = session.get("title")
    return title if isinstance(title, str) and title else f"session {sid[:8]}"


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


def _summary_html(stats: Any) -> str:
    cards = "".join(
        f'<div class="card"><div class="muted">{_term(label)}</div>'
        f'<div class="big">{_span(stats, path, kind)}</div></div>'
        for label, path, kind in SUMMARY
    )
    return f'<div class="cards">{cards}</div>'


def _key(*items: tuple[str, str]) -> str:
    return (
        '<p class="key muted">'
        + "".join(
            f'<span><i style="background:var(--{var})"></i>{html.escape(label)}</span>'
            for var, label in items
        )
        + "</p>"
    )


def _sessions_html(stats: Any, now: float) -> str:
    e = html.escape
    rows = []
    sessions = _get(stats, "proxy.sessions") or {}
    for sid, s in list(sessions.items())[:SESSION_ROWS]:
        c = s["cumulative"]
        cells = [
            fmt(c["counters"]["requests"], "int"),
            fmt(c["counters"]["client_tokens"], "int"),
            fmt(c["counters"]["wire_tokens"], "int"),
            fmt(c["counters"]["tokens_saved"], "int"),
            fmt(c["cache_reuse_ratio"], "pct"),
            fmt(c.get("kv_reuse_ratio"), "pct"),
            _ago(now - float(s.get("last_seen") or now)) + " ago",
        ]
        rows.append(
            f'<tr><td><span>{e(_session_name(sid, s))}</span><span class="muted"> {e(sid[:8])}'
            "</span></td>" + "".join(f'<td class="n">{e(x)}</td>' for x in cells) + "</tr>"
        )
    head = "".join(
        f'<th class="n">{_term(h)}</th>'
        for h in (
            "requests",
            "client tokens",
            "wire tokens",
            "tokens saved",
            "cache reuse",
            "KV reuse",
        )
    )
    return (
        f"<table><thead><tr><th>session</th>{head}<th class=n>last seen</th></tr></thead>"
        f'<tbody id="sessions">{"".join(rows)}</tbody></table>'
        f'<p class="muted" id="nosessions"{" hidden" if rows else ""}>no proxy sessions yet</p>'
    )


def _session_plots_html(stats: Any) -> str:
    e = html.escape
    proxy = _get(stats, "proxy") or {}
    window = proxy.get("window") or {}
    n_ctx = _get(proxy, "upstream.n_ctx")
    shown = [(sid, s) for sid, s in (proxy.get("sessions") or {}).items() if s.get("turns")][
        :PLOT_SESSIONS
    ]
    cards = []
    for i, (sid, s) in enumerate(shown):
        name = _session_name(sid, s)
        cards.append(
            f'<div class="card" data-session="{e(sid)}"><h3>{e(name)}</h3>'
            '<p class="muted">window occupancy per turn: wire tokens (solid) and what the'
            " client sent (dashed, clipped at the top) against n_ctx</p>"
            + plots.svg(
                plots.occupancy_spec(s, window, n_ctx),
                plot_id=f"occupancy-{i}",
                title=f"window occupancy of {name}",
            )
            + '<p class="muted">cache reuse per turn: share of the prompt the upstream did not'
            " recompute</p>"
            + plots.svg(plots.cache_spec(s), plot_id=f"cache-{i}", title=f"cache reuse of {name}")
            + "</div>"
        )
    return (
        _key(
            ("wire", "wire tokens"),
            ("client", "client tokens"),
            ("ctx", "n_ctx"),
            ("ceiling", "ceiling"),
            ("high", "high water"),
            ("target", "target"),
            ("cache", "cache reuse"),
        )
        + f'<div class="sessions" id="session-plots">{"".join(cards)}</div>'
        + f'<p class="muted" id="noplots"{" hidden" if cards else ""}>no turns recorded yet</p>'
    )


def _what(r: Mapping[str, Any]) -> str:
    bits = []
    if r.get("error"):
        bits.append("error")
    if r.get("windowed"):
        bits.append("paged out (emergency)" if r.get("emergency") else "paged out")
    if r.get("break"):
        bits.append(f"prefix break: {r['break']}")
    if r.get("stubs_made"):
        bits.append(f"{r['stubs_made']} new stubs")
    return ", ".join(bits) or "prefix kept"


def _open_link(ref: str) -> str:
    e = html.escape
    href = "?entry=" + e(_urlquote(ref)) + "#store"
    return f' <a href="{href}" data-ref="{e(ref)}">open</a>'


def _urlquote(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")


def _recent_html(stats: Any, now: float) -> str:
    e = html.escape
    sessions = _get(stats, "proxy.sessions") or {}
    rows = []
    for r in (_get(stats, "proxy.recent") or [])[:RECENT_ROWS]:
        sid = str(r.get("session", ""))
        name = _session_name(sid, {"title": r.get("title") or sessions.get(sid, {}).get("title")})
        client, wire = int(r.get("client_tokens") or 0), int(r.get("wire_tokens") or 0)
        prompt, cached = r.get("prompt_tokens"), r.get("cached_tokens")
        reuse = fmt(cached / prompt, "pct") if prompt and cached is not None else "\u2014"
        stubs = r.get("stubs") or []
        items = "".join(
            f"<li>{e(line)}{_open_link(stub_ref(line)) if stub_ref(line) else ''}</li>"
            for line in stubs
        )
        if not stubs:
            items = (
                '<li class="muted">nothing stubbed or paged: the wire is what the client sent</li>'
            )
        elif int(r.get("stubbed_messages") or 0) > len(stubs):
            items += (
                f'<li class="muted">\u2026 and {int(r["stubbed_messages"]) - len(stubs)} more</li>'
            )
        n = int(r.get("stubbed_messages") or 0)
        summary = f"{_what(r)} \u00b7 {n} {'stub' if n == 1 else 'stubs'} on the wire"
        rows.append(
            f'<tr><td class="n">{e(_ago(now - float(r.get("at") or now)))} ago</td>'
            f"<td>{e(name)}</td>"
            f'<td class="n">{fmt(client, "int")} \u2192 {fmt(wire, "int")}</td>'
            f'<td class="n">{fmt(max(0, client - wire), "int")}</td><td class="n">{reuse}</td>'
            f'<td><details data-key="{e(sid)}:{e(str(r.get("at")))}"><summary>{e(summary)}'
            f'</summary><ul class="stubs">{items}</ul></details></td></tr>'
        )
    return (
        "<table><thead><tr><th class=n>when</th><th>session</th>"
        f'<th class="n">{_term("client tokens")} \u2192 {_term("wire tokens")}</th>'
        f'<th class="n">{_term("tokens saved")}</th><th class="n">{_term("cache reuse")}</th>'
        "<th>what happened (open a row: what was stubbed or paged)</th></tr></thead>"
        f'<tbody id="recent">{"".join(rows)}</tbody></table>'
        f'<p class="muted" id="norecent"{" hidden" if rows else ""}>no requests yet</p>'
    )


def _store_browser_html(browse: Mapping[str, Any] | None) -> str:
    e = html.escape
    browse = browse or {}
    query = str(browse.get("query") or "")
    hits = browse.get("hits")
    note = str(browse.get("error") or "")
    items = ""
    if hits is not None:
        note = note or (
            f"{len(hits)} hits for \u201c{query}\u201d"
            if hits
            else f"no hits for \u201c{query}\u201d"
        )
        for h in hits:
            items += (
                f'<li data-ref="{e(h["ref"])}"><a href="?entry={e(_urlquote(h["ref"]))}#store"'
                f' data-ref="{e(h["ref"])}">{e(_entry_name(h))}</a><span class="muted">'
                f" {e(h['ref'])} \u00b7 {e(h['kind'])} \u00b7 {fmt(h['tokens'], 'int')} tokens"
                f" \u00b7 line {h['match_line']}</span><pre>{e(h['snippet'])}</pre></li>"
            )
    opened = browse.get("entry")
    head, text = "", ""
    if opened is not None:
        en = opened["entry"]
        head = (
            f"{_entry_name(en)} \u2014 {en['ref']} \u00b7 {en['kind']} \u00b7"
            f" {fmt(en['tokens'], 'int')} tokens, {fmt(en['lines'], 'int')} lines"
            + (f" \u00b7 from {en['source']}" if en["source"] else "")
        )
        text = opened["text"] + ("\n\u2026 (cut)" if opened["truncated"] else "")
    elif browse.get("entry_error"):
        head = str(browse["entry_error"])
    return (
        '<form id="search" method="get" action="/#store"><input type="search" id="q" name="q"'
        f' value="{e(query)}" placeholder="search the store: words, identifiers, a phrase"'
        ' aria-label="search the store"> <button>search</button></form>'
        f'<p class="muted" id="search-note">{e(note)}</p><ol class="hits" id="hits">{items}</ol>'
        f'<div class="card" id="entry"{"" if head else " hidden"}><h3 id="entry-head">{e(head)}'
        f'</h3><pre class="entry" id="entry-text">{e(text)}</pre></div>'
    )


def _entry_name(entry: Mapping[str, Any]) -> str:
    """An entry's topic, else its first label, else its reference."""
    return str(entry.get("topic") or next(iter(entry.get("labels") or []), "") or entry["ref"])


def _glossary_html() -> str:
    e = html.escape
    rows = "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in GLOSSARY.items())
    return f'<dl class="glossary">{rows}</dl>'


def _config_json() -> str:
    config = {
        "pollMs": POLL_MS,
        "rows": SESSION_ROWS,
        "plotSessions": PLOT_SESSIONS,
        "geometry": {
            "width": plots.WIDTH,
            "height": plots.HEIGHT,
            "left": plots.LEFT,
            "right": plots.RIGHT,
            "top": plots.TOP,
            "bottom": plots.BOTTOM,
        },
    }
    return json.dumps(config).replace("</", "<\\/")


def render_dashboard(
    surfaces: Mapping[str, Any],
    stats: Mapping[str, Any] | None,
    *,
    settings: Settings | None = None,
    token_required: bool = False,
    browse: Mapping[str, Any] | None = None,
) -> str:
    """The dashboard: one self-contained page (no external assets) whose script refreshes
    the figures from ``/api/stats``. ``stats`` None renders placeholders (the script fills
    them in once it has the bearer token). ``browse``: a store search (``query``, ``hits``
    from :func:`offload.serve.store_api.search`, ``error``) and an opened ``entry`` (from
    :func:`offload.serve.store_api.entry`, or ``entry_error``) rendered without script."""
    from offload import __version__

    e = html.escape
    settings = settings or Settings()
    now = time.time()
    store_rows = "".join(
        f"<tr><td>{e(label)}</td>{_cell(stats, path, kind)}</tr>"
        for label, path, kind in STORE_FIGURES
    )
    proxy_rows = "".join(
        f"<tr><td>{_term(label)}</td>{_cell(stats, 'proxy.live.' + path, kind)}"
        f"{_cell(stats, 'proxy.cumulative.' + path, kind)}</tr>"
        for label, path, kind in PROXY_FIGURES
    )
    savings = plots.svg(
        plots.savings_spec(_get(stats, "proxy") or {}),
        plot_id="savings-plot",
        title="tokens saved over time, cumulative",
    )
    note = (
        "<p class=muted>[proxy] bearer_token is set: figures appear once the page has it.</p>"
        if token_required
        else ""
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>offload</title>
<meta name="viewport" content="width=device-width,initial-scale=1">
<meta name="color-scheme" content="light dark"><style>{asset("dashboard.css")}</style></head>
<body><h1>offload <span class="muted">{e(__version__)}</span></h1>
<p class="muted" id="at">{"" if stats is None else "rendered " + time.strftime("%H:%M:%S")}</p>
{note}<form id="auth" hidden><input id="tok" type="password" placeholder="proxy bearer token">
<button>use</button></form>
{_summary_html(stats)}
<h2>Tokens saved over time</h2>
<p class="muted">Cumulative {_term("client tokens")} minus {_term("wire tokens")} over the
last requests of every session.</p>
{savings}
<h2>Sessions</h2>{_sessions_html(stats, now)}
<h2>Window and cache per turn</h2>{_session_plots_html(stats)}
<h2>Recent requests</h2>{_recent_html(stats, now)}
<h2 id="store">Store</h2>{_store_browser_html(browse)}
<table>{store_rows}</table>
<h2>Proxy</h2><table><tr><th></th><th class="n">since start</th><th class="n">all time</th></tr>
{proxy_rows}</table>
<h2>Surfaces</h2>{_surfaces_html(surfaces, stats, settings)}
<h2>What the words mean</h2>{_glossary_html()}
<script type="application/json" id="dash-config">{_config_json()}</script>
<script>{asset("dashboard.js")}</script></body></html>
"""
