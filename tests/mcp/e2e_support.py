"""Real processes for the end-to-end MCP tests: the stdio server, the HTTP server, the CLI."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import httpx
from mcp.client.stdio import StdioServerParameters

import loopback
from offload_process import OffloadProcess
from realparts import child_env

REPO = Path(__file__).resolve().parents[2]
PEERS_BIN = REPO / "tests" / "peers" / "node_modules" / ".bin"


def stdio_params(project: Path, home: Path, *args: str) -> StdioServerParameters:
    """How an MCP client spawns ``offload mcp`` in ``project``."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "offload.cli.main", "mcp", *args],
        env=child_env(home),
        cwd=project,
    )


def cli(project: Path, home: Path, *args: str, stdin: str | None = None) -> str:
    """Run ``offload ARGS`` as its own process in ``project``; its stdout (must succeed)."""
    done = subprocess.run(
        [sys.executable, "-m", "offload.cli.main", *args],
        cwd=project,
        env=child_env(home),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


class HttpServer(OffloadProcess):
    """``offload mcp --http`` in a subprocess on a free loopback port, stopped by PID."""

    what = "offload mcp --http"

    def __init__(self, project: Path, home: Path, extra_env: Mapping[str, str] | None = None):
        super().__init__(project, home, home.parent / "mcp-http.log", extra_env)
        self.project = project

    @property
    def url(self) -> str:
        """The MCP endpoint."""
        return f"http://127.0.0.1:{self.port}/mcp"

    def arguments(self, port: int) -> list[str]:
        return ["mcp", "--http", "--port", str(port)]

    def ready(self) -> bool:
        """The port is held from the start (before the store opens): ready once /mcp answers."""
        try:
            loopback.get(self.url, timeout=2)
        except httpx.TransportError:
            return False
        return super().ready()  # and the answer came from this process
