"""Real processes for the end-to-end MCP tests: the stdio server, the HTTP server, the CLI."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from mcp.client.stdio import StdioServerParameters

from realparts import child_env, free_port, stop_process, wait_until

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


def port_open(port: int) -> bool:
    """True when something accepts TCP connections on 127.0.0.1:port."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class HttpServer:
    """``offload mcp --http`` in a subprocess on a free loopback port, stopped by PID."""

    def __init__(self, project: Path, home: Path, extra_env: Mapping[str, str] | None = None):
        self.project = project
        self.home = home
        self.extra_env = dict(extra_env or {})
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = home.parent / "mcp-http.log"

    @property
    def url(self) -> str:
        """The MCP endpoint."""
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> HttpServer:
        """Start and wait (bounded) until the port accepts connections."""
        self.port = free_port()
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "offload.cli.main",
                    "mcp",
                    "--http",
                    "--port",
                    str(self.port),
                ],
                cwd=self.project,
                env=child_env(self.home, self.extra_env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        proc = self.proc
        wait_until(
            lambda: port_open(self.port) or proc.poll() is not None,
            timeout=30,
            what=f"offload mcp --http on port {self.port}",
        )
        assert proc.poll() is None, self.log.read_text(errors="replace")
        return self

    def stop(self) -> None:
        """Terminate by PID; kill if it lingers; always reap."""
        if self.proc is None:
            return
        stop_process(self.proc, timeout=10)
        self.proc = None

    def __enter__(self) -> HttpServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
