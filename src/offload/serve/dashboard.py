"""The ``offload serve`` dashboard: one self-contained page (no external assets).

Rendered on the server from the ``/api/stats`` figures (tables and inline SVG plots, so it
reads without script); ``assets/dashboard.js`` (package data, inlined) refreshes it, redraws
the plots from ``/api/stats`` and runs the store browser through ``/api/search`` and
``/api/entry``. The markup is ``templates/dashboard.html`` (Jinja2, autoescaping on: every
piece of stored or client text is HTML-escaped there) and the script sets such text with
``textContent``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any
from urllib.parse import quote

from markupsafe import Markup

from offload.config import Settings
from offload.core.text.wording import counted
from offload.proxy.figures.turns import stub_ref
from offload.serve import plots
from offload.serve.markup import render

POLL_MS = 3000  # how often the page refreshes its figures
STORE_FIGURES = (
    ("entries, every scope", "store.entries", "int"),
    ("entries in this scope", "store.scope_entries", "int"),
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
    ("entries in the store (every scope)", "store.entries", "int"),
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
    " prefix stays stable for many turns); the ceiling is the hard limit. By default the high"
    " water sits just under the ceiling (and at a small n_ctx the band is too narrow to page"
    " out in useful bites), so the proxy mostly waits for the ceiling and pages out once,"
    " deep: expected, not a fault.",
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


def _surfaces(surfaces: Mapping[str, Any], settings: Settings) -> dict[str, Any]:
    """What the Surfaces section shows of each surface, with the commands that wire a client."""
    proxy, mcp, gateway = surfaces["proxy"], surfaces["mcp"], surfaces["gateway"]
    root = proxy["url"].removesuffix("/v1")
    auth = ' --header "Authorization: Bearer $TOKEN"' if settings.mcp.bearer_token else ""
    shown: dict[str, Any] = {
        "proxy": {
            **proxy,
            "snippet": f"export OPENAI_BASE_URL={proxy['url']}      # OpenAI-compatible clients\n"
            f"export ANTHROPIC_BASE_URL={root}     # Anthropic Messages clients",
        },
        "mcp": {
            **mcp,
            "snippet": f"claude mcp add --transport http offload {mcp['url']}{auth}\n"
            + json.dumps({"mcpServers": {"offload": {"type": "http", "url": mcp["url"]}}}),
        },
        "gateway": dict(gateway),
        "metrics": {
            "url": surfaces["metrics"]["url"],
            "root": root,
            "snippet": f"curl -s {surfaces['metrics']['url']}",
        },
    }
    if gateway["mounted"]:
        server = {"offload-gateway": {"type": "http", "url": gateway["url"]}}
        shown["gateway"]["snippet"] = (
            f"claude mcp add --transport http offload-gateway {gateway['url']}\n"
            + json.dumps({"mcpServers": server})
        )
        shown["gateway"]["upstreams"] = [
            {**u, "name": name, "live": "." not in name} for name, u in gateway["upstreams"].items()
        ]
    return shown


def _sessions(stats: Any, now: float) -> list[dict[str, Any]]:
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
        rows.append({"name": _session_name(sid, s), "short": sid[:8], "cells": cells})
    return rows


PLOT_KEY = (
    ("wire", "wire tokens"),
    ("client", "client tokens"),
    ("ctx", "n_ctx"),
    ("ceiling", "ceiling"),
    ("high", "high water"),
    ("target", "target"),
    ("cache", "cache reuse"),
)


def _plot_cards(stats: Any) -> list[dict[str, Any]]:
    proxy = _get(stats, "proxy") or {}
    window = proxy.get("window") or {}
    n_ctx = _get(proxy, "upstream.n_ctx")
    shown = [(sid, s) for sid, s in (proxy.get("sessions") or {}).items() if s.get("turns")][
        :PLOT_SESSIONS
    ]
    cards = []
    for i, (sid, s) in enumerate(shown):
        name = _session_name(sid, s)
        occupancy = plots.svg(
            plots.occupancy_spec(s, window, n_ctx),
            plot_id=f"occupancy-{i}",
            title=f"window occupancy of {name}",
        )
        cache = plots.svg(plots.cache_spec(s), plot_id=f"cache-{i}", title=f"cache reuse of {name}")
        cards.append({"sid": sid, "name": name, "occupancy": occupancy, "cache": cache})
    return cards


EARLY = 3  # fewer requests than this since start: too early to judge the cache
GOOD_REUSE, FAIR_REUSE = 0.7, 0.3


def _window_level(c: Mapping[str, Any], n_ctx: Any) -> tuple[str, str, str]:
    requests, windowed, ceiling = c["requests"], c["windowed"], c["emergency"]
    if not windowed:
        return (
            "ok",
            "not needed yet",
            ("every prompt fit under the high water, so the model read each conversation whole."),
        )
    if not ceiling:
        return (
            "ok",
            "normal",
            (
                "past the high water the proxy paged old turns out to the store in one bite, so"
                " the prompt's start (and the model's cache) stays stable between page-outs"
                f" ({windowed:,} of {requests:,} requests)."
            ),
        )
    size = f" (here {int(n_ctx):,} tokens)" if isinstance(n_ctx, int) else ""
    return (
        "ok",
        "at the ceiling, as designed",
        (
            "the proxy waits until a turn would break the ceiling and pages out once, deep (the"
            " high water sits just under it by default; when n_ctx is small"
            f"{size} the band is too narrow anyway): the model's cache breaks as rarely as it"
            " can, and nothing is lost (the paged turns are in the store). Not a worry unless"
            " errors appear"
            f" ({ceiling:,} of {requests:,} requests paged out at the ceiling, {windowed:,} in all)."
        ),
    )


def _cache_level(c: Mapping[str, Any], ratio: Any) -> tuple[str, str, str]:
    if ratio is None:
        return "muted", "not reported", "the upstream reports no cache figures to judge."
    pct = fmt(ratio, "pct")
    if c["requests"] < EARLY:
        return (
            "muted",
            "too early to judge",
            (f"a conversation's first request has nothing cached yet ({pct} reused)."),
        )
    if ratio >= GOOD_REUSE:
        return (
            "ok",
            "good",
            (
                f"the model reused most of each prompt from its cache instead of recomputing it"
                f" ({pct} of prompt tokens)."
            ),
        )
    if ratio >= FAIR_REUSE:
        return (
            "warn",
            "fair",
            (
                f"part of each prompt was recomputed ({pct} reused): each page-out and prefix break"
                " costs one recompute; the causes are in Recent requests."
            ),
        )
    return (
        "bad",
        "low",
        (
            f"most of each prompt was recomputed ({pct} reused): look at the prefix breaks and"
            " their causes in Recent requests."
        ),
    )


def levels(stats: Any) -> list[dict[str, str]]:
    """What the proxy's figures since start mean, in words before numbers: each level a
    word (``cls`` says whether to worry: ok, warn, bad, muted) and a sentence."""
    live = _get(stats, "proxy.live") or {}
    c = live.get("counters") or {}
    if not c.get("requests"):
        return [{"name": "proxy", "cls": "muted", "word": "no requests yet", "text": ""}]
    errors = int(c.get("errors") or 0)
    shown = [
        ("windowing", *_window_level(c, _get(stats, "proxy.upstream.n_ctx"))),
        ("cache reuse", *_cache_level(c, live.get("cache_reuse_ratio"))),
        (
            "errors",
            *(
                ("bad", f"{errors:,} of {c['requests']:,} requests", "the proxy's log says why.")
                if errors
                else ("ok", "none", "every request got the model's answer.")
            ),
        ),
    ]
    return [{"name": n, "cls": cls, "word": w, "text": t} for n, cls, w, t in shown]


def _what(r: Mapping[str, Any]) -> str:
    bits = []
    if r.get("error"):
        bits.append("error")
    if r.get("windowed"):
        bits.append("paged out at the ceiling" if r.get("emergency") else "paged out")
    if r.get("break"):
        bits.append(f"prefix break: {r['break']}")
    if r.get("stubs_made"):
        bits.append(f"{r['stubs_made']} new stubs")
    return ", ".join(bits) or "prefix kept"


def _stub(line: str) -> dict[str, str]:
    """A stub line of a recent request, with the reference it names (if any) to open."""
    ref = stub_ref(line) or ""
    return {"line": line, "ref": ref, "quoted": quote(ref, safe="")}


def _recent(stats: Any, now: float) -> list[dict[str, Any]]:
    sessions = _get(stats, "proxy.sessions") or {}
    rows = []
    for r in (_get(stats, "proxy.recent") or [])[:RECENT_ROWS]:
        sid = str(r.get("session", ""))
        name = _session_name(sid, {"title": r.get("title") or sessions.get(sid, {}).get("title")})
        client, wire = int(r.get("client_tokens") or 0), int(r.get("wire_tokens") or 0)
        prompt, cached = r.get("prompt_tokens"), r.get("cached_tokens")
        stubs = [_stub(line) for line in r.get("stubs") or []]
        n = int(r.get("stubbed_messages") or 0)
        rows.append(
            {
                "ago": _ago(now - float(r.get("at") or now)),
                "name": name,
                "client": fmt(client, "int"),
                "wire": fmt(wire, "int"),
                "saved": fmt(max(0, client - wire), "int"),
                "reuse": fmt(cached / prompt, "pct") if prompt and cached is not None else "\u2014",
                "key": f"{sid}:{r.get('at')}",
                "summary": f"{_what(r)} \u00b7 {n} {'stub' if n == 1 else 'stubs'} on the wire",
                "stubs": stubs,
                "more": n - len(stubs) if stubs and n > len(stubs) else 0,
            }
        )
    return rows


def _browse(browse: Mapping[str, Any] | None) -> dict[str, Any]:
    """The store browser's search box, hits and opened entry, as rendered without script."""
    browse = browse or {}
    query = str(browse.get("query") or "")
    hits = browse.get("hits")
    note = str(browse.get("error") or "")
    shown = []
    if hits is not None:
        note = note or (
            f"{counted(len(hits), 'hit')} for \u201c{query}\u201d"
            if hits
            else f"no hits for \u201c{query}\u201d"
        ) + _scope_note(browse)
        also = "&all_scopes=1" if browse.get("all_scopes") else ""
        for h in hits:
            shown.append(
                {
                    "ref": h["ref"],
                    "quoted": quote(h["ref"], safe="") + also,
                    "name": _entry_name(h),
                    "kind": h["kind"],
                    "tokens": counted(int(h["tokens"]), "token", grouped=True),
                    "line": h["match_line"],
                    "snippet": h["snippet"],
                }
            )
    opened = browse.get("entry")
    head, text = "", ""
    if opened is not None:
        en = opened["entry"]
        head = (
            f"{_entry_name(en)} \u2014 {en['ref']} \u00b7 {en['kind']} \u00b7"
            f" {counted(int(en['tokens']), 'token', grouped=True)},"
            f" {counted(int(en['lines']), 'line', grouped=True)}"
            + (f" \u00b7 from {en['source']}" if en["source"] else "")
        )
        text = opened["text"] + ("\n\u2026 (cut)" if opened["truncated"] else "")
    elif browse.get("entry_error"):
        head = str(browse["entry_error"])
    return {
        "query": query,
        "note": note,
        "hits": shown,
        "head": head,
        "text": text,
        "all_scopes": bool(browse.get("all_scopes")),
        **_listing(browse.get("listing"), str(browse.get("listing_error") or "")),
    }


def _served_scope(surfaces: Mapping[str, Any]) -> str:
    """Which scope the store browser looks in (the MCP server's), said before a search."""
    return str((surfaces.get("mcp") or {}).get("scope") or "")


def _scope_note(browse: Mapping[str, Any]) -> str:
    """`` in scope X; 3 more in other scopes: tick every scope`` (empty for every scope)."""
    if browse.get("scope") is None:
        return " in every scope"
    more = int((browse.get("other_scopes") or {}).get("hits") or 0)
    tail = f"; {more} more in other scopes: tick \u201cevery scope\u201d" if more else ""
    return f" in scope {browse['scope']}{tail}"


def _nav_href(kind: str = "", pinned: bool = False, page: int = 1, every: bool = False) -> str:
    """The page's own link to a page of the store browser's listing."""
    parts = [f"kind={quote(kind, safe='')}"] if kind else []
    parts += ["pinned=1"] if pinned else []
    parts += [f"page={page}"] if page > 1 else []
    parts += ["all_scopes=1"] if every else []
    return "?" + "&".join(parts) + "#store" if parts else "./#store"


def _listing(listing: Mapping[str, Any] | None, error: str) -> dict[str, Any]:
    """The entries to browse without a query: kind and pinned links, a page, its pager."""
    if listing is None:
        return {"listing": None, "listing_note": error, "filters": [], "prev": "", "next": ""}
    kind, pinned, page = listing["kind"], listing["pinned"], listing["page"]
    total, size = listing["total"], listing["page_size"]
    every = bool(listing.get("all_scopes"))
    what = (f"{kind} " if kind else "") + ("pinned entries" if pinned else "entries")
    first = (page - 1) * size + 1
    shown = len(listing["entries"])
    note = (
        f"{what} {first}\u2013{first + shown - 1} of {total:,}, pinned first, then by salience"
        " and last use"
        if shown
        else f"no {what}" + (" on this page" if total else " yet")
    )
    links = [("all", "", False, listing["all"]), ("pinned", "", True, listing["all_pinned"])]
    links += [(k, k, False, n) for k, n in listing["kinds"].items()]
    return {
        "listing": [
            {
                "ref": e["ref"],
                "quoted": quote(e["ref"], safe="") + ("&all_scopes=1" if every else ""),
                "name": _entry_name(e),
                "meta": " \u00b7 ".join(
                    ([e["ref"]] if _entry_name(e) != e["ref"] else [])
                    + [e["kind"], counted(int(e["tokens"]), "token", grouped=True)]
                    + (["pinned"] if e["pinned"] else [])
                ),
            }
            for e in listing["entries"]
        ],
        "listing_note": note,
        "filters": [
            {
                "label": label,
                "count": fmt(n, "int"),
                "href": _nav_href(k, p, every=every),
                "current": (k, p) == (kind, pinned),
            }
            for label, k, p, n in links
        ],
        "prev": _nav_href(kind, pinned, page - 1, every) if page > 1 else "",
        "next": _nav_href(kind, pinned, page + 1, every) if page * size < total else "",
    }


def _entry_name(entry: Mapping[str, Any]) -> str:
    """An entry's topic, else its first label, else its reference."""
    return str(entry.get("topic") or next(iter(entry.get("labels") or []), "") or entry["ref"])


def _config_json() -> Markup:
    """The script's settings as JSON that cannot close its ``<script>`` element."""
    config = {
        "pollMs": POLL_MS,
        "rows": SESSION_ROWS,
        "plotSessions": PLOT_SESSIONS,
        "early": EARLY,
        "goodReuse": GOOD_REUSE,
        "fairReuse": FAIR_REUSE,
        "geometry": {
            "width": plots.WIDTH,
            "height": plots.HEIGHT,
            "left": plots.LEFT,
            "right": plots.RIGHT,
            "top": plots.TOP,
            "bottom": plots.BOTTOM,
        },
    }
    return Markup(json.dumps(config).replace("</", "<\\/"))


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

    now = time.time()
    return render(
        "dashboard.html",
        version=__version__,
        rendered_at="" if stats is None else "rendered " + time.strftime("%H:%M:%S"),
        token_required=token_required,
        glossary=GLOSSARY,
        levels=levels(stats),
        figure=lambda path, kind: fmt(_get(stats, path), kind),
        summary=SUMMARY,
        savings=plots.svg(
            plots.savings_spec(_get(stats, "proxy") or {}),
            plot_id="savings-plot",
            title="tokens saved over time, cumulative",
        ),
        sessions=_sessions(stats, now),
        plot_key=PLOT_KEY,
        plot_cards=_plot_cards(stats),
        recent=_recent(stats, now),
        browse=_browse(browse),
        served_scope=_served_scope(surfaces),
        store_figures=STORE_FIGURES,
        proxy_figures=PROXY_FIGURES,
        **_surfaces(surfaces, settings or Settings()),
        config_json=_config_json(),
        css=Markup(asset("dashboard.css")),
        js=Markup(asset("dashboard.js")),
    )
