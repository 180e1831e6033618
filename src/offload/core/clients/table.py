"""Every client ``offload setup`` wires: its files, and the entry offload writes in each
(pure). Each format was checked against the client's own documentation or source, named
in the client's ``source`` (checked 2026-12).

An MCP entry is stdio (the client starts ``offload mcp``) or, with ``--mcp http``, the
``offload serve`` URL; with ``[mcp] bearer_token`` set the http entry carries
``Authorization: Bearer TOKEN`` in the field each client documents for static headers. A
provider entry points the client's model traffic at the proxy; it is written only when
asked for (``--provider`` / ``--only provider``).
"""

from __future__ import annotations

from collections.abc import Callable

from offload.core.clients.edits import Value
from offload.core.clients.model import NAME, Client, ConfigFile, Wiring
from offload.errors import InvalidInput


def _stdio_or_http(
    w: Wiring, stdio: dict[str, Value], http: dict[str, Value], headers: str = "headers"
) -> Value:
    """The stdio entry, or the http one with the token's header under ``headers`` (the
    key the client documents) when a token is configured."""
    if not w.mcp_url:
        return stdio
    auth = w.auth()
    return {**http, headers: auth} if auth else http


def _argv(w: Wiring) -> tuple[str, list[str]]:
    argv = list(w.mcp_command)
    return argv[0], argv[1:]


def _claude_mcp(w: Wiring) -> Value:
    cmd, args = _argv(w)
    return _stdio_or_http(
        w,
        {"type": "stdio", "command": cmd, "args": args, "env": {}},
        {"type": "http", "url": w.mcp_url},
    )


def _plain_mcp(w: Wiring) -> Value:
    """The common ``{command, args}`` / ``{url}`` shape (Cursor, Kiro's, Amp's)."""
    cmd, args = _argv(w)
    return _stdio_or_http(w, {"command": cmd, "args": args}, {"url": w.mcp_url})


def _codex_mcp(w: Wiring) -> Value:
    cmd, args = _argv(w)
    # Codex ignores a `headers` table: literal headers are `http_headers`
    return _stdio_or_http(w, {"command": cmd, "args": args}, {"url": w.mcp_url}, "http_headers")


def _codex_provider(w: Wiring) -> Value:
    # a provider Codex picks per run; the proxy serves the Responses API Codex speaks
    return {"name": "offload proxy", "base_url": f"{w.proxy_url}/v1", "wire_api": "responses"}


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


def _hermes_mcp(w: Wiring) -> Value:
    cmd, args = _argv(w)
    return _stdio_or_http(w, {"command": cmd, "args": args}, {"url": w.mcp_url})


def _hermes_model(w: Wiring) -> Value:
    return {"provider": "custom", "base_url": f"{w.proxy_url}/v1", "default": w.model}


def _pi_provider(w: Wiring) -> Value:
    # pi requires an apiKey; the proxy ignores it
    return {
        "baseUrl": f"{w.proxy_url}/v1",
        "api": "openai-completions",
        "apiKey": NAME,
        "models": [{"id": w.model, "name": f"{w.model} (through offload)"}],
    }


def _gemini_mcp(w: Wiring) -> Value:
    cmd, args = _argv(w)
    # `url` is SSE in Gemini CLI and Qwen Code; Streamable HTTP is `httpUrl`
    return _stdio_or_http(w, {"command": cmd, "args": args}, {"httpUrl": w.mcp_url})


def _continue_mcp(w: Wiring) -> Value:
    cmd, args = _argv(w)
    if not w.mcp_url:
        return {"name": NAME, "command": cmd, "args": args}
    http: dict[str, Value] = {"name": NAME, "type": "streamable-http", "url": w.mcp_url}
    auth = w.auth()
    return {**http, "requestOptions": {"headers": auth}} if auth else http


def _continue_model(w: Wiring) -> Value:
    return {
        "name": NAME,
        "provider": "openai",
        "model": w.model,
        "apiBase": f"{w.proxy_url}/v1",
        "roles": ["chat", "edit", "apply"],
    }


def _cline_mcp(w: Wiring) -> Value:
    cmd, args = _argv(w)
    return _stdio_or_http(
        w,
        {"command": cmd, "args": args, "disabled": False},
        {"type": "streamableHttp", "url": w.mcp_url, "disabled": False},
    )


def _roo_mcp(w: Wiring) -> Value:
    cmd, args = _argv(w)
    return _stdio_or_http(
        w, {"command": cmd, "args": args}, {"type": "streamable-http", "url": w.mcp_url}
    )


def _zed_mcp(w: Wiring) -> Value:
    cmd, args = _argv(w)
    return _stdio_or_http(w, {"command": cmd, "args": args, "env": {}}, {"url": w.mcp_url})


def _windsurf_mcp(w: Wiring) -> Value:
    cmd, args = _argv(w)
    return _stdio_or_http(w, {"command": cmd, "args": args}, {"serverUrl": w.mcp_url})


def _goose_mcp(w: Wiring) -> Value:
    cmd, args = _argv(w)
    # some Goose releases require `description` on every extension
    common: dict[str, Value] = {
        "enabled": True,
        "name": NAME,
        "description": "offload: store bulky context, search and read it back",
        "envs": {},
        "timeout": 300,
    }
    return _stdio_or_http(
        w,
        {**common, "type": "stdio", "cmd": cmd, "args": args},
        {**common, "type": "streamable_http", "uri": w.mcp_url},
    )


def _claude_desktop_mcp(w: Wiring) -> Value:
    if w.mcp_url:
        raise InvalidInput(
            "Claude Desktop's config file takes stdio servers only (remote ones are added "
            "as connectors in the app); run it without --mcp http"
        )
    cmd, args = _argv(w)
    return {"command": cmd, "args": args}


def _vscode_mcp(w: Wiring) -> Value:
    cmd, args = _argv(w)
    return _stdio_or_http(
        w, {"type": "stdio", "command": cmd, "args": args}, {"type": "http", "url": w.mcp_url}
    )


def _kiro_mcp(w: Wiring) -> Value:
    cmd, args = _argv(w)
    return _stdio_or_http(
        w, {"command": cmd, "args": args, "disabled": False}, {"url": w.mcp_url, "disabled": False}
    )


def _copilot_mcp(w: Wiring) -> Value:
    cmd, args = _argv(w)
    # `tools` names the tools Copilot may call: all of offload's
    return _stdio_or_http(
        w,
        {"type": "stdio", "command": cmd, "args": args, "tools": ["*"]},
        {"type": "http", "url": w.mcp_url, "tools": ["*"]},
    )


_VSCODE = ".config/Code/User"
_VSCODE_MAC = "Library/Application Support/Code/User"
_CLINE = "globalStorage/saoudrizwan.claude-dev/settings/cline_mcp_settings.json"
_ROO = "globalStorage/rooveterinaryinc.roo-cline/settings/mcp_settings.json"
_CONTINUE = (("name", "Local Config"), ("version", "1.0.0"), ("schema", "v1"))


def _mcp(
    path: str,
    fmt: str,
    entry: Callable[[Wiring], Value],
    *at: str,
    match: str = "",
    mac: str = "",
    skeleton: tuple[tuple[str, Value], ...] = (),
) -> ConfigFile:
    """An MCP entry's file (the common case, in one line)."""
    return ConfigFile(path, fmt, "mcp", entry, at, match=match, mac=mac, skeleton=skeleton)


CLIENTS: dict[str, Client] = {
    c.name: c
    for c in (
        Client(
            "claude-code",
            "Claude Code",
            (
                _mcp(".claude.json", "json", _claude_mcp, "mcpServers", NAME),
                ConfigFile(
                    ".claude/settings.json",
                    "json",
                    "provider",
                    lambda w: w.proxy_url,
                    ("env", "ANTHROPIC_BASE_URL"),
                ),
            ),
            source="code.claude.com/docs/en/mcp, /settings",
        ),
        Client(
            "opencode",
            "OpenCode",
            (
                _mcp(
                    ".config/opencode/opencode.json",
                    "json",
                    _opencode_mcp,
                    "mcp",
                    NAME,
                    skeleton=(("$schema", "https://opencode.ai/config.json"),),
                ),
                ConfigFile(
                    ".config/opencode/opencode.json",
                    "json",
                    "provider",
                    _opencode_provider,
                    ("provider", NAME),
                    skeleton=(("$schema", "https://opencode.ai/config.json"),),
                ),
            ),
            note=f"pick the model as {NAME}/MODEL (/models in the TUI)",
            source="opencode.ai/docs/mcp-servers, /providers",
        ),
        Client(
            "codex",
            "Codex CLI",
            (
                _mcp(".codex/config.toml", "toml", _codex_mcp, "mcp_servers", NAME),
                ConfigFile(
                    ".codex/config.toml",
                    "toml",
                    "provider",
                    _codex_provider,
                    ("model_providers", NAME),
                ),
            ),
            note=(
                "pick the proxy per run: codex -c model_provider=offload"
                " -c web_search=disabled -m MODEL (the proxy refuses Codex's web_search tool)"
            ),
            source="github.com/openai/codex docs/config.md",
        ),
        Client(
            "cursor",
            "Cursor",
            (_mcp(".cursor/mcp.json", "json", _plain_mcp, "mcpServers", NAME),),
            note="MCP only: Cursor's base URL is set in its settings window",
            source="cursor.com/docs/context/mcp",
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
            source="aider.chat/docs/config/aider_conf.html",
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
                    (NAME,),
                    match="model_id",
                ),
            ),
            note=f"no MCP in llm; run it as: llm -m {NAME} PROMPT",
            source="llm.datasette.io/en/stable/other-models.html",
        ),
        Client(
            "hermes",
            "Hermes Agent",
            (
                _mcp(".hermes/config.yaml", "yaml", _hermes_mcp, "mcp_servers", NAME),
                ConfigFile(".hermes/config.yaml", "yaml", "provider", _hermes_model, ("model",)),
            ),
            note="the provider entry replaces Hermes's model block (revert puts it back)",
            source="hermes-agent.nousresearch.com/docs/user-guide/features/mcp, /configuration",
        ),
        Client(
            "pi",
            "pi (coding agent)",
            (
                ConfigFile(
                    ".pi/agent/models.json", "json", "provider", _pi_provider, ("providers", NAME)
                ),
            ),
            note=f"no MCP in pi; pick the model as {NAME}/MODEL (/model)",
            source="github.com/badlogic/pi-mono packages/coding-agent/docs/models.md",
        ),
        Client(
            "gemini",
            "Gemini CLI",
            (_mcp(".gemini/settings.json", "json", _gemini_mcp, "mcpServers", NAME),),
            note="MCP only: Gemini CLI speaks Gemini's API, not the proxy's",
            source="github.com/google-gemini/gemini-cli docs/tools/mcp-server.md",
        ),
        Client(
            "qwen",
            "Qwen Code",
            (_mcp(".qwen/settings.json", "json", _gemini_mcp, "mcpServers", NAME),),
            note="MCP only",
            source="github.com/QwenLM/qwen-code docs (Gemini CLI's mcpServers format)",
        ),
        Client(
            "continue",
            "Continue",
            (
                _mcp(
                    ".continue/config.yaml",
                    "yaml",
                    _continue_mcp,
                    "mcpServers",
                    NAME,
                    match="name",
                    skeleton=_CONTINUE,
                ),
                ConfigFile(
                    ".continue/config.yaml",
                    "yaml",
                    "provider",
                    _continue_model,
                    ("models", NAME),
                    match="name",
                    skeleton=_CONTINUE,
                ),
            ),
            source="docs.continue.dev/reference (config.yaml mcpServers, models)",
        ),
        Client(
            "cline",
            "Cline",
            (
                _mcp(
                    f"{_VSCODE}/{_CLINE}",
                    "json",
                    _cline_mcp,
                    "mcpServers",
                    NAME,
                    mac=f"{_VSCODE_MAC}/{_CLINE}",
                ),
            ),
            note="MCP only: Cline's provider is set in its settings panel",
            source="docs.cline.bot/mcp/configuring-mcp-servers",
        ),
        Client(
            "roo",
            "Roo Code",
            (
                _mcp(
                    f"{_VSCODE}/{_ROO}",
                    "json",
                    _roo_mcp,
                    "mcpServers",
                    NAME,
                    mac=f"{_VSCODE_MAC}/{_ROO}",
                ),
            ),
            note="MCP only: Roo Code's provider is set in its settings panel",
            source="docs.roocode.com/features/mcp/using-mcp-in-roo",
        ),
        Client(
            "zed",
            "Zed",
            (_mcp(".config/zed/settings.json", "jsonc", _zed_mcp, "context_servers", NAME),),
            note="MCP only; your settings' comments are kept",
            source="zed.dev/docs/ai/mcp",
        ),
        Client(
            "windsurf",
            "Windsurf",
            (_mcp(".codeium/windsurf/mcp_config.json", "json", _windsurf_mcp, "mcpServers", NAME),),
            note="MCP only",
            source="docs.windsurf.com/windsurf/cascade/mcp",
        ),
        Client(
            "goose",
            "Goose",
            (_mcp(".config/goose/config.yaml", "yaml", _goose_mcp, "extensions", NAME),),
            note="MCP only: Goose's provider is GOOSE_PROVIDER in the same file",
            source="block.github.io/goose/docs/guides/config-files",
        ),
        Client(
            "claude-desktop",
            "Claude Desktop",
            (
                _mcp(
                    ".config/Claude/claude_desktop_config.json",
                    "json",
                    _claude_desktop_mcp,
                    "mcpServers",
                    NAME,
                    mac="Library/Application Support/Claude/claude_desktop_config.json",
                ),
            ),
            note="MCP (stdio) only; restart Claude Desktop to load it",
            source="modelcontextprotocol.io/docs/develop/connect-local-servers",
        ),
        Client(
            "vscode",
            "VS Code (Copilot agent mode)",
            (
                _mcp(
                    f"{_VSCODE}/mcp.json",
                    "jsonc",
                    _vscode_mcp,
                    "servers",
                    NAME,
                    mac=f"{_VSCODE_MAC}/mcp.json",
                ),
            ),
            note="MCP only, in your user mcp.json",
            source="code.visualstudio.com/docs/copilot/customization/mcp-servers",
        ),
        Client(
            "copilot",
            "GitHub Copilot CLI",
            (_mcp(".copilot/mcp-config.json", "json", _copilot_mcp, "mcpServers", NAME),),
            note="MCP only",
            source="docs.github.com/en/copilot/how-tos/copilot-cli/customize-copilot/add-mcp-servers",
        ),
        Client(
            "kiro",
            "Kiro",
            (_mcp(".kiro/settings/mcp.json", "json", _kiro_mcp, "mcpServers", NAME),),
            note="MCP only",
            source="kiro.dev/docs/mcp/configuration",
        ),
        Client(
            "amp",
            "Amp",
            (_mcp(".config/amp/settings.json", "json", _plain_mcp, "amp.mcpServers", NAME),),
            note="MCP only",
            source="ampcode.com/manual (amp.mcpServers)",
        ),
    )
}
