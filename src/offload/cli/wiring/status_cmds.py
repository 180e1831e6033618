"""``offload status``: what a user needs to know works, in one look.

The store (opens, SQLite quick check, entries), the upstream model server (reachable, its
context size), whether ``offload serve`` answers, and which clients are wired (the entries
``offload setup`` writes, read from each client's config).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import anyio
import httpx

from offload.cli.common import emit, open_store, store_location
from offload.cli.wiring import setup_records
from offload.cli.wiring.config_files import read_config
from offload.cli.wiring.setup_cmds import config_path, wiring_for
from offload.config import Settings
from offload.core.clients.edits import Value, parse
from offload.core.clients.wiring import CLIENTS, NAME, current, wired
from offload.core.text.wording import counted
from offload.core.urls import redact_url
from offload.errors import OffloadError
from offload.llm.upstream import UpstreamClient
from offload.store.life.health import quick_check
from offload.store.sqlite.db import DATABASE_ERRORS, database_failure

PROBE_TIMEOUT_S = 3.0


def configure(parser: argparse.ArgumentParser) -> None:
    """Flags of ``offload status``."""
    parser.add_argument("--upstream", help="the model server to probe (default [proxy] upstream)")
    parser.add_argument("--url", help="the serve URL (default http://[proxy] host:port)")
    parser.add_argument(
        "--config-dir", metavar="DIR", help="where client configs live (default: your home)"
    )
    parser.add_argument("--model", help="the model name setup wrote (default: local)")


def overrides(args: argparse.Namespace) -> dict[str, object]:
    """Flags as dotted settings keys."""
    return {"proxy.upstream": args.upstream} if args.upstream else {}


def store_status(settings: Settings) -> dict[str, Any]:
    """The store opens, passes SQLite's quick check; its size. ``path`` is where it is: the
    SQLite file, or a PostgreSQL store's URL without its password."""
    where = store_location(settings)
    try:
        with open_store(settings) as store:
            check = quick_check(store)
            stats = store.stats()
    except OffloadError as exc:
        return {"ok": False, "path": where, "error": str(exc)}
    except DATABASE_ERRORS as exc:  # opened, then a damaged page
        error = str(database_failure(settings.db_path, exc))
        return {"ok": False, "path": where, "error": error}
    return {"ok": check == "ok", "path": where, "check": check, "entries": stats.get("entries")}


async def upstream_status(url: str) -> dict[str, Any]:
    """The model server answers; its context size from ``/props`` when it has one (``url``
    shown without its password)."""
    shown = redact_url(url)
    async with UpstreamClient(url, timeout=PROBE_TIMEOUT_S, connect_timeout=PROBE_TIMEOUT_S) as up:
        if not await up.health():
            return {"ok": False, "url": shown, "error": "not reachable (is llama-server running?)"}
        try:
            n_ctx = await up.n_ctx()
        except OffloadError as exc:
            return {"ok": True, "url": shown, "n_ctx": None, "error": str(exc)}
    return {"ok": True, "url": shown, "n_ctx": n_ctx}


def serve_status(url: str) -> dict[str, Any]:
    """``offload serve`` answers at ``url``."""
    try:
        resp = httpx.get(f"{url}/api/stats", timeout=PROBE_TIMEOUT_S)
    except httpx.HTTPError:
        return {"ok": False, "url": url}
    return {"ok": resp.status_code == 200, "url": url}


def clients_status(args: argparse.Namespace, settings: Settings) -> list[dict[str, Any]]:
    """For each client and each entry: wired as setup would write it, differently, or not;
    and the URL it points at, if any (the proxy, or serve's /mcp)."""
    both = [wiring_for(args, settings, mcp) for mcp in ("stdio", "http")]
    out = []
    for client in CLIENTS.values():
        written = setup_written(args, client.name)
        for file in client.files:
            path = config_path(args, file)
            url, ours = None, False
            try:
                text = read_config(path)
                state = wired(file, text, both, str(path))
                value = current(file, parse(text, file.fmt, str(path)))
                url = first_url(value)
                # a key named offload is setup's even when it points elsewhere; another key
                # (ANTHROPIC_BASE_URL, Hermes's model block) is setup's while it holds what
                # setup wrote there (another --url), else the user's own
                ours = NAME in file.at or written.get((str(path), file.what), ()) == value
            except OffloadError:
                state = "unreadable"
            row = {"client": client.name, "what": file.what, "path": str(path), "wired": state}
            out.append({**row, "url": url if state == "yes" or ours else None})
    return out


def setup_written(args: argparse.Namespace, client: str) -> dict[tuple[str, str], Any]:
    """What setup's record says it wrote for ``client``, by (file, entry): {} without one."""
    try:
        record = setup_records.load(setup_records.record_path(args.config_dir, client))
    except OffloadError:
        return {}
    written: dict[tuple[str, str], Any] = {}
    for path, file in (record or {}).get("files", {}).items():
        entries = file.get("entries") if isinstance(file, dict) else None
        for what, entry in (entries if isinstance(entries, dict) else {}).items():
            if isinstance(entry, dict) and "value" in entry:
                written[(path, what)] = entry["value"]
    return written


def first_url(value: Value) -> str | None:
    """The first http(s) URL in an entry's value (where it sends the client), or None."""
    if isinstance(value, str):
        return value if value.startswith(("http://", "https://")) else None
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return next((u for u in map(first_url, items) if u), None)


def root_of(url: str) -> str:
    """The proxy's or serve's root from an entry's URL (``/v1`` and ``/mcp`` dropped)."""
    url = url.rstrip("/")
    for tail in ("/v1", "/mcp"):
        if url.endswith(tail):
            return url[: -len(tail)]
    return url


def warnings(data: dict[str, Any]) -> list[str]:
    """A line for each wired client whose requests cannot get through: the proxy or serve
    it points at does not answer, or (provider) the upstream behind it does not."""
    answers: dict[str, bool] = {data["serve"]["url"]: data["serve"]["ok"]}
    out = []
    for row in data["clients"]:
        if row["wired"] not in ("yes", "other") or not row["url"]:
            continue
        root = root_of(row["url"])
        if root not in answers:
            answers[root] = serve_status(root)["ok"]
        if not answers[root]:
            kind = "model requests go to" if row["what"] == "provider" else "MCP entry points at"
            out.append(
                f"{row['client']}: its {kind} {row['url']}, where nothing answers; "
                f"start `offload serve`, or undo with `offload setup {row['client']} --revert`"
            )
        elif row["what"] == "provider" and not data["upstream"]["ok"]:
            out.append(
                f"{row['client']}: its model requests reach the proxy, but the model server "
                f"{data['upstream']['url']} does not answer"
            )
    return out


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Print the status; exit 1 when the store is unhealthy."""
    base = (args.url or f"http://{settings.proxy.host}:{settings.proxy.port}").rstrip("/")
    data: dict[str, Any] = {
        "store": store_status(settings),
        "upstream": anyio.run(upstream_status, settings.proxy.upstream),
        "serve": serve_status(base),
        "clients": clients_status(args, settings),
    }
    data["warnings"] = warnings(data)
    emit(args, data, _render)
    return 0 if data["store"]["ok"] else 1


def _render(data: dict[str, Any]) -> str:
    store, up, serve = data["store"], data["upstream"], data["serve"]
    lines = [
        f"store     {'ok' if store['ok'] else 'FAILING'}  {store['path']}"
        + (
            f"  {counted(store['entries'], 'entry')}"
            if store["ok"]
            else f"  {store.get('error') or store.get('check')}"
        ),
        f"upstream  {'ok' if up['ok'] else 'down'}  {up['url']}"
        + (
            f"  n_ctx {up['n_ctx']}" if up.get("n_ctx") else f"  {up.get('error', 'n_ctx unknown')}"
        ),
        f"serve     {'running' if serve['ok'] else 'not running'}  {serve['url']}",
    ]
    home = str(Path.home())
    for row in data["clients"]:
        if row["wired"] == "no":  # twenty clients: those not wired share one line below
            continue
        shown = row["path"].replace(home, "~", 1) if row["path"].startswith(home) else row["path"]
        lines.append(f"client    {row['client']:<14} {row['what']:<9} {row['wired']:<10} {shown}")
    idle = sorted(
        {r["client"] for r in data["clients"]}
        - {r["client"] for r in data["clients"] if r["wired"] != "no"}
    )
    if idle:
        lines.append(f"not wired {', '.join(idle)} (offload setup CLIENT)")
    if any(r["wired"] == "other" for r in data["clients"]):
        lines.append(
            f"other     wired, but not as setup writes it for {serve['url']} and this offload "
            "(another --url, another install, or by hand); `--url URL` compares with yours"
        )
    lines += [f"warning   {line}" for line in data["warnings"]]
    return "\n".join(lines)
