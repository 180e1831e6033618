"""``offload serve``: proxy + MCP + gateway + dashboard + ``/metrics``, one process, one port.

Flags and settings only: the host itself (routing, lifespans, dashboard, figures) is
:mod:`offload.serve`. One uvicorn server runs it on ``[proxy] host:port`` (default
http://127.0.0.1:8900).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from offload.cli.common import add_root_arg, held_port, open_store, scope_name, server_logging
from offload.config import Settings, load_settings
from offload.core.http.listen import SHUTDOWN_GRACE_S
from offload.errors import ConfigError

if TYPE_CHECKING:
    import socket


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
    parser.add_argument(
        "--scope",
        type=scope_name,
        help="MCP scope name (default: [mcp] scope, else the git root of the cwd)",
    )
    add_root_arg(parser)
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log verbosity on stderr; debug adds a line per request (default info)",
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
    # before the banner, the store and uvicorn: a taken port is one line, exit 7
    with held_port(settings.proxy.host, settings.proxy.port, "proxy.port") as sock:
        _serve(args, settings, sock)
    return 0


def _serve(args: argparse.Namespace, settings: Settings, sock: socket.socket | None) -> None:
    import os
    import sys

    from offload.serve.heap import freeze_startup, tune_heap

    # before any worker thread: a long-running process keeps its heap compact
    tune_heap(os.environ)

    import uvicorn

    from offload.cli.headers_deadline import bounded_http
    from offload.serve.host import build

    level = server_logging(args)
    gateway_file = Path(settings.gateway.config) if settings.gateway.config else None
    if gateway_file is not None:
        settings = with_gateway_table(settings, gateway_file)
    store = open_store(settings, serving=True)
    try:
        served = build(settings, store, cwd=Path.cwd(), gateway_file=gateway_file)
        print(served.banner(), file=sys.stderr, flush=True)
        freeze_startup()  # what starting made lives as long as the process: never walk it
        # access logs carry method, path and status only: never headers or keys
        config = uvicorn.Config(
            served.app,
            host=settings.proxy.host,
            port=settings.proxy.port,
            log_level=level.lower(),
            # a line per request costs ~0.1 ms on the streaming path; --log-level debug has it
            access_log=level == "DEBUG",
            lifespan="on",
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
            http=bounded_http(settings.http),
        )
        uvicorn.Server(config).run(sockets=None if sock is None else [sock])
    finally:
        store.close()


def with_gateway_table(settings: Settings, path: Path) -> Settings:
    """The gateway file's own ``[gateway]`` table applies, as with ``offload gateway
    --config FILE``; environment and flags still win."""
    if not path.is_file():  # said as the gateway's file, not as a settings file
        raise ConfigError(f"gateway config {str(path)[:200]!r} is not a file (--gateway-config)")
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
