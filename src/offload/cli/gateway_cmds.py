"""``offload gateway``: run the MCP gateway, or change its config file.

offload gateway --config gateway.toml                 # stdio to the client
offload gateway --config gateway.toml --http          # Streamable HTTP on 127.0.0.1:8902/mcp
offload gateway --config gateway.toml set compress_catalog false --client claude-code
offload gateway --config gateway.toml set response_threshold 65536 --server git
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from offload.config import GatewaySettings, Settings
from offload.errors import ConfigError

if TYPE_CHECKING:
    import socket

    from offload.gateway.config import GatewayConfig

_CLIENT_KEYS: dict[str, type] = {"index_responses": bool, "compress_catalog": bool}
_SERVER_KEYS: dict[str, type] = {
    "response_threshold": int,
    "index_responses": bool,
    "timeout_s": float,
    "enabled": bool,
}
_TOOL_KEYS: dict[str, type] = {"response_threshold": int, "index_responses": bool}


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the gateway's arguments."""
    parser.add_argument(
        "action", nargs="?", default="run", choices=["run", "set"], help="run (default) or set"
    )
    parser.add_argument("key", nargs="?", help="with set: the setting to change")
    parser.add_argument("value", nargs="?", help='with set: its value ("default" removes it)')
    parser.add_argument("--http", action="store_true", help="serve Streamable HTTP, not stdio")
    parser.add_argument("--host", help="HTTP host (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="HTTP port (default 8902)")
    parser.add_argument("--client", help="with set: a per-client switch (by clientInfo.name)")
    parser.add_argument("--server", help="with set: a per-server setting")
    parser.add_argument("--tool", help="with set --server: a per-tool setting")


def overrides(args: argparse.Namespace) -> dict[str, object]:
    """Flags as dotted setting keys."""
    out: dict[str, object] = {}
    if args.host:
        out["gateway.host"] = args.host
    if args.port:
        out["gateway.port"] = args.port
    return out


def _config_path(args: argparse.Namespace, settings: Settings) -> Path:
    path = args.config or settings.gateway.config
    if not path:
        raise ConfigError(
            "no gateway config: pass --config gateway.toml (with [servers.NAME] tables) "
            "or set [gateway] config"
        )
    return Path(path)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run the gateway, or write one setting to its config file."""
    path = _config_path(args, settings)
    if args.action == "set":
        return _set(path, args)
    from offload.cli.common import held_port
    from offload.gateway.config import load_gateway_config

    config = load_gateway_config(path)
    gw = settings.gateway
    # a taken port is one line, exit 7, before any upstream starts; held from here on
    with held_port(gw.host, gw.port, "gateway.port", hold=args.http) as sock:
        _run_gateway(args, settings, config, sock)
    return 0


def _run_gateway(
    args: argparse.Namespace,
    settings: Settings,
    config: GatewayConfig,
    sock: socket.socket | None,
) -> None:
    import anyio

    from offload.cli.common import open_store, quiet_shutdown_cancels
    from offload.gateway.run import run_http, run_stdio
    from offload.gateway.server import Gateway
    from offload.gateway.upstreams import stderr_log_handler
    from offload.llm.minilm import tool_encoder

    gw = settings.gateway
    logger = logging.getLogger("offload.gateway")
    logger.addHandler(stderr_log_handler())
    logger.setLevel(logging.INFO)
    gateway = Gateway(
        settings.gateway,
        config,
        open_store(settings, serving=True),
        tool_encoder=tool_encoder(settings),
    )
    if args.http:
        from offload.cli.headers_deadline import bounded_http

        http = settings.http
        protocol = bounded_http(http)
        quiet_shutdown_cancels()
        anyio.run(
            lambda: run_http(gateway, gw.host, gw.port, http=http, protocol=protocol, sock=sock)
        )
    else:
        from offload.mcp.stdio import claimed_stdin, serve_stdio

        max_line = settings.http.max_body_bytes
        with claimed_stdin() as source:
            # the gateway's server on the bounded stdio loop `offload mcp` uses: a line
            # past http.max_body_mb is dropped with an error, not held whole
            anyio.run(
                lambda: run_stdio(
                    gateway, lambda server: serve_stdio(server, source, max_line, "offload gateway")
                )
            )


def _parse(raw: str, kind: type, key: str) -> Any:
    try:
        if kind is bool:
            text = raw.strip().lower()
            if text in {"1", "true", "yes", "on"}:
                return True
            if text in {"0", "false", "no", "off"}:
                return False
            raise ValueError(raw)
        return kind(raw)
    except ValueError as exc:
        raise ConfigError(f"{key} must be {kind.__name__}, got {raw!r}") from exc


def _set(path: Path, args: argparse.Namespace) -> int:
    from offload.gateway.config import parse_gateway_config, render_toml, set_value, toml_value

    if not args.key or args.value is None:
        raise ConfigError(
            "usage: offload gateway set KEY VALUE [--client N | --server N [--tool T]]"
        )
    key, raw = args.key, args.value
    data: dict[str, Any] = {}
    if path.is_file():
        with path.open("rb") as fh:
            try:
                data = tomllib.load(fh)
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    if args.client:
        table, where = _CLIENT_KEYS, ["clients", args.client, key]
        default: Any = None
    elif args.server and args.tool:
        table, where = _TOOL_KEYS, ["servers", args.server, "tools", args.tool, key]
        default = None
    elif args.server:
        table, where = _SERVER_KEYS, ["servers", args.server, key]
        default = True if key == "enabled" else None
        if args.server not in data.get("servers", {}):
            raise ConfigError(f"no [servers.{args.server}] in {path}; add its command or url first")
    else:
        fields = {f.name: f for f in dataclasses.fields(GatewaySettings)}
        if key not in fields or key == "config":
            raise ConfigError(
                f"unknown gateway setting {key!r}; known: {', '.join(sorted(fields))}"
            )
        table = {key: type(getattr(GatewaySettings(), key))}
        where = ["gateway", key]
        default = getattr(GatewaySettings(), key)
    if key not in table:
        raise ConfigError(f"unknown key {key!r} here; known: {', '.join(sorted(table))}")
    value = default if raw == "default" else _parse(raw, table[key], key)
    set_value(data, where, value, default)
    parse_gateway_config(data, str(path))  # refuse to write what would not load
    path.write_text(render_toml(data), encoding="utf-8")
    shown = "its default" if value == default else toml_value(value)
    print(f"{'.'.join(where)} set to {shown} in {path}")
    return 0
