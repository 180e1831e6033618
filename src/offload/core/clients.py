"""What ``offload setup CLIENT`` writes into each agent client's config (pure, no I/O).

A client is a list of config files, each a path relative to the user's home, a format and
an entry: the MCP server (stdio command or the ``serve`` URL) and, where the client has
one, the model provider / base URL pointing at the proxy. :func:`apply` turns a file's old
text into its new text; :func:`wired` says whether a text already holds the entry.

Formats, as each client documents them (checked 2026-12):

- Claude Code: ``~/.claude.json`` ``mcpServers`` (user scope); ``~/.claude/settings.json``
  ``env.ANTHROPIC_BASE_URL`` (the proxy serves Anthropic Messages at ``/v1/messages``).
- OpenCode: ``~/.config/opencode/opencode.json`` ``mcp`` (``local`` command array or
  ``remote`` URL) and ``provider`` (``@ai-sdk/openai-compatible`` with ``options.baseURL``).
- Codex CLI: ``~/.codex/config.toml`` ``[mcp_servers.NAME]``. No provider: Codex speaks
  only the Responses API since ``wire_api = "chat"`` was removed, and the proxy serves
  chat completions.
- Cursor: ``~/.cursor/mcp.json`` ``mcpServers`` (its base URL lives in the app's settings).

With ``[mcp] bearer_token`` set, an http MCP entry carries ``Authorization: Bearer TOKEN``
where each client documents static headers: ``headers`` (Claude Code, Cursor, OpenCode),
``http_headers`` (Codex).
- aider: ``~/.aider.conf.yml`` ``openai-api-base`` (aider has no MCP client).
- llm: ``extra-openai-models.yaml`` in llm's config directory, a ``model_id`` with
  ``api_base`` (llm has no MCP client).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from offload.core.client_edits import (
    Value,
    dig,
    json_set,
    parse,
    toml_set_table,
    yaml_set_item,
    yaml_set_key,
)

NAME = "offload"  # the key of every entry offload writes


@dataclass(frozen=True)
class Wiring:
    """Where the entries point: the stdio command or the MCP URL, and the proxy."""

    mcp_command: tuple[str, ...]  # argv of ``offload mcp`` (used when mcp_url is empty)
    mcp_url: str  # the serve host's /mcp URL, or "" for stdio
    proxy_url: str  # the proxy's root, e.g. http://127.0.0.1:8900 (no /v1)
    model: str  # the model name clients send through the proxy
    mcp_token: str = ""  # [mcp] bearer_token: sent as Authorization on the http entry

    def auth(self) -> dict[str, Value]:
        """The headers the http MCP entry sends (none without a token)."""
        return {"Authorization": f"Bearer {self.mcp_token}"} if self.mcp_token else {}


@dataclass(frozen=True)
class ConfigFile:
    """One config file of a client and the entry offload keeps in it."""

    path: str  # relative to the home directory, "/"-separated
    fmt: str  # "json", "toml" or "yaml"
    what: str  # "mcp" or "provider"
    entry: Callable[[Wiring], Value]  # the value offload writes
    at: tuple[str, ...]  # where the entry lives (for a YAML list: ("model_id", NAME))


@dataclass(frozen=True)
class Client:
    """A supported client: its name on the command line, its title, its files."""

    name: str
    title: str
    files: tuple[ConfigFile, ...]
    note: str = ""


def _stdio_or_http(
    w: Wiring, stdio: dict[str, Value], http: dict[str, Value], headers: str = "headers"
) -> Value:
    """The stdio entry, or the http one with the token's header under ``headers`` (the
    key the client documents) when a token is configured."""
    if not w.mcp_url:
        return stdio
    auth = w.auth()
    return {**http, headers: auth} if auth else http


def _claude_mcp(w: Wiring) -> Value:
    argv = list(w.mcp_command)
    return _stdio_or_http(
        w,
        {"type": "stdio", "command": argv[0], "args": argv[1:], "env": {}},
        {"type": "http", "url": w.mcp_url},
    )


def _cursor_mcp(w: Wiring) -> Value:
    argv = list(w.mcp_command)
    return _stdio_or_http(w, {"command": argv[0], "args": argv[1:]}, {"url": w.mcp_url})


def _codex_mcp(w: Wiring) -> Value:
    argv = list(w.mcp_command)
    # Codex ignores a `headers` table: literal headers are `http_headers`
    return _stdio_or_http(
        w, {"command": argv[0], "args": argv[1:]}, {"url": w.mcp_url}, "http_headers"
    )


def _opencode_mcp(w: Wiring) -> Value:
    return _stdio_or_http(
        w,
        {"type": "local", "command": list(w.mcp_command), "enabled": True},
        {"type": "remote", "url": w.mcp_url, "enabled": True},
    )


def _opencode_provider(w: Wiring) -> Value:
    return {
        "npm": "@ai-sdk/openai-compatible",
        "name": "offload proxy",
        "options": {"baseURL": f"{w.proxy_url}/v1"},
        "models": {w.model: {"name": f"{w.model} (through offload)"}},
    }


def _llm_model(w: Wiring) -> Value:
    return {"model_id": NAME, "model_name": w.model, "api_base": f"{w.proxy_url}/v1"}


CLIENTS: dict[str, Client] = {
    c.name: c
    for c in (
        Client(
            "claude-code",
            "Claude Code",
            (
                ConfigFile(".claude.json", "json", "mcp", _claude_mcp, ("mcpServers", NAME)),
                ConfigFile(
                    ".claude/settings.json",
                    "json",
                    "provider",
                    lambda w: w.proxy_url,
                    ("env", "ANTHROPIC_BASE_URL"),
                ),
            ),
        ),
        Client(
            "opencode",
            "OpenCode",
            (
                ConfigFile(
                    ".config/opencode/opencode.json", "json", "mcp", _opencode_mcp, ("mcp", NAME)
                ),
                ConfigFile(
                    ".config/opencode/opencode.json",
                    "json",
                    "provider",
                    _opencode_provider,
                    ("provider", NAME),
                ),
            ),
            note=f"pick the model as {NAME}/MODEL (/models in the TUI)",
        ),
        Client(
            "codex",
            "Codex CLI",
            (ConfigFile(".codex/config.toml", "toml", "mcp", _codex_mcp, ("mcp_servers", NAME)),),
            note="MCP only: Codex speaks the Responses API, the proxy serves chat completions",
        ),
        Client(
            "cursor",
            "Cursor",
            (ConfigFile(".cursor/mcp.json", "json", "mcp", _cursor_mcp, ("mcpServers", NAME)),),
            note="MCP only: Cursor's base URL is set in its settings window",
        ),
        Client(
            "aider",
            "aider",
            (
                ConfigFile(
                    ".aider.conf.yml",
                    "yaml",
                    "provider",
                    lambda w: f"{w.proxy_url}/v1",
                    ("openai-api-base",),
                ),
            ),
            note="no MCP in aider; run it as: aider --model openai/MODEL",
        ),
        Client(
            "llm",
            "llm (simonw)",
            (
                ConfigFile(
                    ".config/io.datasette.llm/extra-openai-models.yaml",
                    "yaml",
                    "provider",
                    _llm_model,
                    ("model_id", NAME),
                ),
            ),
            note=f"no MCP in llm; run it as: llm -m {NAME} PROMPT",
        ),
    )
}


def apply(file: ConfigFile, text: str | None, wiring: Wiring, name: str) -> str:
    """``text`` (``None``: absent) with offload's entry set; unchanged when it is already set."""
    value = file.entry(wiring)
    if file.fmt == "json":
        if text is None and file.path.endswith("opencode.json"):
            text = json_set(None, ("$schema",), "https://opencode.ai/config.json", name)
        return json_set(text, file.at, value, name)
    if file.fmt == "toml":
        return toml_set_table(text, file.at, value, name)
    if len(file.at) == 1:
        return yaml_set_key(text, file.at[0], value, name)
    return yaml_set_item(text, (file.at[0], file.at[1]), value, name)


def wired(file: ConfigFile, text: str | None, wirings: Sequence[Wiring], name: str) -> str:
    """``"yes"`` (offload's entry as one of ``wirings`` would write it), ``"other"`` (an
    entry of offload's name that differs) or ``"no"``."""
    doc = parse(text, file.fmt, name)
    if file.fmt == "yaml" and len(file.at) == 2:
        items = doc if isinstance(doc, list) else []
        found = [x for x in items if dig(x, file.at[:1]) == file.at[1]]
        current: Value = found[0] if found else None
    else:
        current = dig(doc, file.at)
    if current is None:
        return "no"
    return "yes" if any(current == file.entry(w) for w in wirings) else "other"
