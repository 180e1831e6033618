"""What every tool handler gets: settings, the store, the scope, roots and session figures."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from offload.config import Settings
from offload.store.paths import default_scope, project_root
from offload.store.store import Store


@dataclass
class SessionStats:
    """Operation counts and volumes since this server started (no token-savings claim)."""

    calls: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    bytes_in: int = 0  # argument bytes received
    bytes_out: int = 0  # result text bytes sent
    stored: int = 0  # new entries
    deduped: int = 0  # offloads that matched an existing entry
    stored_bytes: int = 0  # bytes of content in new entries
    bodies: int = 0  # fenced bodies handed out (checkout, retrieve, resources)
    body_bytes: int = 0

    def record(self, tool: str, bytes_in: int, bytes_out: int, *, error: bool) -> None:
        """Count one call."""
        self.calls[tool] += 1
        if error:
            self.errors[tool] += 1
        self.bytes_in += bytes_in
        self.bytes_out += bytes_out


@dataclass
class McpContext:
    """The server's world: built once at start-up, shared by every request."""

    settings: Settings
    store: Store
    scope: str
    roots: tuple[Path, ...]
    stats: SessionStats = field(default_factory=SessionStats)

    @classmethod
    def build(cls, settings: Settings, store: Store, cwd: Path) -> McpContext:
        """Scope and roots from the settings, defaulting to the project ``cwd`` is in."""
        scope = default_scope(settings, cwd)
        roots: Sequence[str | Path] = settings.mcp.roots or (project_root(cwd),)
        resolved = tuple(Path(r).expanduser().resolve() for r in roots)
        return cls(settings, store, scope, resolved)

    @property
    def root_names(self) -> list[str]:
        """The allowed roots as strings, for messages."""
        return [str(r) for r in self.roots]
