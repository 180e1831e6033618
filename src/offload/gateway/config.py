"""The gateway's own TOML tables: upstream servers and per-client switches.

They live in the same file as offload's settings (``offload gateway --config gateway.toml``),
next to ``[gateway]``, which :mod:`offload.config` reads::

    [gateway]
    response_threshold = 16384

    [servers.git]
    command = "mcp-server-git"
    args = ["--repository", "/path/to/repo"]
    timeout_s = 30                 # per-call timeout for this server
    response_threshold = 32768     # overrides the global threshold
    index_responses = false        # opt this server out of response indexing

    [servers.git.tools.git_log]
    response_threshold = 65536     # or index_responses = false

    [servers.docs]
    url = "http://127.0.0.1:9000/mcp"
    headers = { Authorization = "Bearer ..." }

    [clients."claude-code"]        # by clientInfo.name
    index_responses = true
    compress_catalog = false

Values left at their defaults are never written back (:func:`render_toml`).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offload.errors import ConfigError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_SERVER_KEYS = {
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "timeout_s",
    "response_threshold",
    "index_responses",
    "enabled",
    "tools",
}
_TOOL_KEYS = {"response_threshold", "index_responses"}
_CLIENT_KEYS = {"index_responses", "compress_catalog"}


@dataclass(frozen=True)
class ToolRule:
    """Per-tool overrides of response indexing."""

    response_threshold: int | None = None
    index_responses: bool | None = None


@dataclass(frozen=True)
class ServerConfig:
    """One upstream MCP server: a stdio command or a Streamable HTTP URL."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float | None = None
    response_threshold: int | None = None
    index_responses: bool | None = None
    enabled: bool = True
    tools: Mapping[str, ToolRule] = field(default_factory=dict)

    @property
    def transport(self) -> str:
        """``"stdio"`` or ``"http"``."""
        return "http" if self.url else "stdio"


@dataclass(frozen=True)
class ClientRule:
    """Per-client switches (by ``clientInfo.name``); ``None`` follows the global setting."""

    index_responses: bool | None = None
    compress_catalog: bool | None = None


@dataclass(frozen=True)
class GatewayConfig:
    """The upstreams and per-client rules of one gateway."""

    servers: tuple[ServerConfig, ...] = ()
    clients: Mapping[str, ClientRule] = field(default_factory=dict)

    def server(self, name: str) -> ServerConfig | None:
        """The server called ``name``, if configured."""
        return next((s for s in self.servers if s.name == name), None)


def load_gateway_config(path: str | Path) -> GatewayConfig:
    """Read ``[servers.*]`` and ``[clients.*]`` from a TOML file."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError as exc:
        raise ConfigError(f"gateway config {str(p)!r} does not exist") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror}") from exc
    return parse_gateway_config(data, str(p))


def parse_gateway_config(data: Mapping[str, Any], origin: str = "config") -> GatewayConfig:
    """Validate the gateway tables of already-parsed TOML."""
    servers_raw = data.get("servers", {})
    clients_raw = data.get("clients", {})
    if not isinstance(servers_raw, dict) or not isinstance(clients_raw, dict):
        raise ConfigError(f"{origin}: [servers] and [clients] must be tables")
    servers = tuple(_server(name, body, origin) for name, body in servers_raw.items())
    clients = {name: _client(name, body, origin) for name, body in clients_raw.items()}
    return GatewayConfig(servers, clients)


def _check_keys(body: Any, allowed: set[str], where: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {sorted(allowed)}")
    return body


def _typed(body: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) and kind is not bool:
        raise ConfigError(f"{where}.{key} must be {_kind_name(kind)}, got a boolean")
    if not isinstance(value, kind):
        raise ConfigError(f"{where}.{key} must be {_kind_name(kind)}, got {type(value).__name__}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    if isinstance(kind, tuple):
        return " or ".join(k.__name__ for k in kind)
    return kind.__name__


def _str_map(body: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    value = body.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{where}.{key} must be a table of strings")
    return dict(value)


def _threshold(body: Mapping[str, Any], where: str) -> int | None:
    value = _typed(body, "response_threshold", int, where)
    if value is not None and value < 1:
        raise ConfigError(f"{where}.response_threshold must be 1 or more, got {value}")
    return None if value is None else int(value)


def _server(name: str, body: Any, origin: str) -> ServerConfig:
    where = f"{origin}: [servers.{name}]"
    if not _NAME.fullmatch(name) or "__" in name:
        raise ConfigError(
            f"{where}: a server name is letters, digits, '_', '.', '-' and must not contain '__'"
        )
    body = _check_keys(body, _SERVER_KEYS, where)
    command = _typed(body, "command", str, where) or ""
    url = _typed(body, "url", str, where) or ""
    if bool(command) == bool(url):
        raise ConfigError(f"{where}: give exactly one of command (stdio) or url (Streamable HTTP)")
    args = body.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{where}.args must be a list of strings")
    timeout = _typed(body, "timeout_s", (int, float), where)
    if timeout is not None and timeout <= 0:
        raise ConfigError(f"{where}.timeout_s must be positive, got {timeout}")
    tools_raw = body.get("tools", {})
    if not isinstance(tools_raw, dict):
        raise ConfigError(f"{where}.tools must be a table of tool tables")
    tools = {}
    for tool, rule in tools_raw.items():
        twhere = f"{where[:-1]}.tools.{tool}]"
        rule = _check_keys(rule, _TOOL_KEYS, twhere)
        tools[tool] = ToolRule(
            _threshold(rule, twhere), _typed(rule, "index_responses", bool, twhere)
        )
    enabled = _typed(body, "enabled", bool, where)
    return ServerConfig(
        name=name,
        command=command,
        args=tuple(args),
        env=_str_map(body, "env", where),
        cwd=_typed(body, "cwd", str, where) or "",
        url=url,
        headers=_str_map(body, "headers", where),
        timeout_s=None if timeout is None else float(timeout),
        response_threshold=_threshold(body, where),
        index_responses=_typed(body, "index_responses", bool, where),
        enabled=True if enabled is None else enabled,
        tools=tools,
    )


def _client(name: str, body: Any, origin: str) -> ClientRule:
    where = f"{origin}: [clients.{name}]"
    body = _check_keys(body, _CLIENT_KEYS, where)
    return ClientRule(
        _typed(body, "index_responses", bool, where),
        _typed(body, "compress_catalog", bool, where),
    )


# ----------------------------------------------------------------------------- writing


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_str(key)


def _toml_str(value: str) -> str:
    out = value.replace("\\", "\\\\").replace('"', '\\"')
    out = out.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return f'"{out}"'


def toml_value(value: Any) -> str:
    """``value`` as TOML writes it (``false``, not Python's ``False``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return _toml_str(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{_toml_key(k)} = {toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    raise ConfigError(f"cannot write {type(value).__name__} to TOML")


def render_toml(data: Mapping[str, Any]) -> str:
    """Nested tables of scalars, lists and inline string tables as TOML text.

    Empty tables and ``None`` values are left out, so nothing at its default is written.
    """
    lines: list[str] = []

    def table(path: list[str], body: Mapping[str, Any]) -> None:
        scalars = {k: v for k, v in body.items() if v is not None and not _is_table(k, v)}
        subtables = {k: v for k, v in body.items() if _is_table(k, v) and v}
        if scalars and path:
            if lines:
                lines.append("")
            lines.append("[" + ".".join(_toml_key(p) for p in path) + "]")
        for key, value in scalars.items():
            lines.append(f"{_toml_key(key)} = {toml_value(value)}")
        for key, value in subtables.items():
            table([*path, key], value)

    table([], data)
    return "\n".join(lines) + ("\n" if lines else "")


_INLINE = {"env", "headers"}


def _is_table(key: str, value: Any) -> bool:
    # string maps (env, headers) are written inline; every other dict is a [table]
    return isinstance(value, dict) and key not in _INLINE


def set_value(data: dict[str, Any], path: list[str], value: Any, default: Any) -> None:
    """Set ``data[path...] = value``, or remove it when ``value`` equals ``default``,
    pruning tables left empty."""
    node = data
    trail: list[tuple[dict[str, Any], str]] = []
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{'.'.join(path)}: {part} is not a table")
        trail.append((node, part))
        node = child
    if value == default:
        node.pop(path[-1], None)
        for parent, key in reversed(trail):
            if not parent[key]:
                del parent[key]
    else:
        node[path[-1]] = value
