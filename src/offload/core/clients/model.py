"""The shapes of ``offload setup``'s client table (pure): where the entries point, one
config file and the entry offload keeps in it, a client."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from offload.core.clients.edits import Value

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
    """One config file of a client and the entry offload keeps in it.

    ``at`` is the entry's path of keys. With ``match`` the entry is an item of a list:
    ``at[:-1]`` is the list's path and the item is the one whose ``match`` field is
    ``at[-1]`` (llm's ``model_id``, Continue's ``name``)."""

    path: str  # relative to the home directory, "/"-separated (Linux and Windows layout)
    fmt: str  # "json", "jsonc" (leading comments kept), "toml" or "yaml"
    what: str  # "mcp" or "provider"
    entry: Callable[[Wiring], Value]  # the value offload writes
    at: tuple[str, ...]
    match: str = ""
    mac: str = ""  # the path on macOS, when the client keeps it elsewhere there
    skeleton: tuple[tuple[str, Value], ...] = ()  # top-level keys a new file starts with

    def where(self, platform: str) -> str:
        """The path for ``platform`` (``sys.platform``)."""
        return self.mac if self.mac and platform == "darwin" else self.path


@dataclass(frozen=True)
class Client:
    """A supported client: its name on the command line, its title, its files."""

    name: str
    title: str
    files: tuple[ConfigFile, ...]
    note: str = ""
    source: str = ""  # where its format is documented
