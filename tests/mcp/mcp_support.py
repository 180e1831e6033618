"""Helpers for the MCP server tests: a project with a real store, an in-memory SDK client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.client.client import Client
from mcp.types import TextContent

from offload.config import Settings, load_settings
from offload.mcp.context import McpContext
from offload.mcp.server import build_server
from offload.store.store import Store


@dataclass
class Result:
    """A tool result reduced to what the tests look at."""

    text: str
    is_error: bool


class Session:
    """An in-memory SDK client connected to a server built on ``ctx``."""

    def __init__(self, client: Client, ctx: McpContext) -> None:
        self.client = client
        self.ctx = ctx

    async def call(self, tool: str, /, **arguments: Any) -> Result:
        """Call a tool; return its text and error flag."""
        res = await self.client.call_tool(tool, arguments)
        texts = [c.text for c in res.content if isinstance(c, TextContent)]
        return Result("\n".join(texts), bool(res.is_error))

    async def ok(self, tool: str, /, **arguments: Any) -> str:
        """Call a tool that must succeed; its text."""
        res = await self.call(tool, **arguments)
        assert not res.is_error, res.text
        return res.text

    async def fail(self, tool: str, /, **arguments: Any) -> str:
        """Call a tool that must fail; its error text."""
        res = await self.call(tool, **arguments)
        assert res.is_error, res.text
        assert res.text.startswith("error: ")
        return res.text


@dataclass
class McpEnv:
    """A project directory with a git marker, its settings and an open store."""

    project: Path
    home: Path
    settings: Settings
    store: Store

    def context(self, **overrides: Any) -> McpContext:
        """A server context for the project, with optional dotted setting overrides."""
        settings = self.settings.with_overrides(overrides) if overrides else self.settings
        return McpContext.build(settings, self.store, self.project)

    @asynccontextmanager
    async def connect(self, **overrides: Any) -> AsyncIterator[Session]:
        """An in-memory client session on a fresh server for this project."""
        ctx = self.context(**overrides)
        async with Client(build_server(ctx)) as client:
            yield Session(client, ctx)

    def write(self, rel: str, text: str) -> Path:
        """Create a file in the project."""
        path = self.project / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path


def make_settings(home: Path, extra: Mapping[str, Any] | None = None) -> Settings:
    """Settings on a private store directory (the environment is never read)."""
    return load_settings(env={}, flags={"store.home": str(home), **(extra or {})})
