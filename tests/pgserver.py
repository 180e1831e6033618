"""A real PostgreSQL server for the tests: Debian's ``postgresql`` binaries in a temp dir.

- :func:`find_pg_bin` finds the server binaries (``initdb``, ``postgres``);
  :func:`require_pg` skips locally and fails under ``CI=true`` when they (or ``psycopg``)
  are missing.
- :class:`PgServer` runs ``initdb`` once and ``postgres`` as a direct child process on a free
  127.0.0.1 port (owned by the ``postgres`` user when the tests run as root: initdb refuses
  root), hands out ``postgresql://`` URLs, makes fresh databases from a template, restarts the
  server (a clean stop or a crash), and stops it by PID.
- :func:`kill_hard` is ``kill -9`` for a writer process the tests started.

``scripts/test`` installs the ``postgresql`` package when it is missing.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from realparts import ServerProcess, free_port, require, wait_until

# Debian installs each major version's server tools here (none of them on PATH)
DEBIAN_PG_ROOT = Path("/usr/lib/postgresql")
SUPERUSER = "postgres"
# test-only speed-ups: fsync only matters when the machine loses power, not when a process
# (a writer, the server itself) is killed, which is what the tests do
FAST_SETTINGS = {"fsync": "off", "full_page_writes": "off"}
_IDENT = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_names = itertools.count()


def find_pg_bin() -> Path | None:
    """The directory holding ``initdb`` and ``postgres``: the newest Debian version, else PATH."""
    versions: list[tuple[int, Path]] = []
    if DEBIAN_PG_ROOT.is_dir():
        for child in DEBIAN_PG_ROOT.iterdir():
            if child.name.isdigit() and (child / "bin" / "initdb").is_file():
                versions.append((int(child.name), child / "bin"))
    if versions:
        return max(versions)[1]
    initdb = shutil.which("initdb")
    if initdb and shutil.which("postgres"):
        return Path(initdb).parent
    return None


def psycopg_available() -> bool:
    """True when ``psycopg`` (3) is importable."""
    return importlib.util.find_spec("psycopg") is not None


def require_pg() -> Path:
    """Require the server binaries and psycopg; return the binaries' directory."""
    require(psycopg_available(), "psycopg is not installed (pip install -e '.[test]')")
    bin_dir = find_pg_bin()
    require(
        bin_dir is not None,
        "PostgreSQL server binaries missing (apt-get install postgresql; scripts/test does it)",
    )
    assert bin_dir is not None
    return bin_dir


def _as_postgres_user() -> dict[str, Any]:
    """Popen arguments that run a child as the ``postgres`` user when we are root."""
    if os.geteuid() != 0:
        return {}
    pw = pwd.getpwnam(SUPERUSER)
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


def kill_hard(proc: subprocess.Popen[Any], timeout: float = 10.0) -> int:
    """``kill -9`` a process the test started (a writer mid-transaction) and reap it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    return proc.wait(timeout=timeout)


@contextmanager
def private_server() -> Iterator[PgServer]:
    """A server of one's own, for tests that stop, crash or restart it (the session's one
    stays up); stopped and removed afterwards, a failed start included."""
    server = PgServer(require_pg())
    try:
        yield server.start()
    finally:
        server.cleanup()


class PgServer(ServerProcess):
    """A real PostgreSQL server in a temp dir on a free loopback port, stopped by PID."""

    def __init__(
        self,
        bin_dir: Path,
        *,
        base_dir: Path | None = None,
        settings: dict[str, str] | None = None,
        startup_timeout: float = 60.0,
        stop_timeout: float = 30.0,
    ) -> None:
        self.bin_dir = bin_dir
        # a short path under /tmp: the Unix socket lives here too (108-byte limit), and the
        # postgres user must be able to reach it (pytest's tmp dirs are private to root)
        self.base_dir = base_dir or Path(tempfile.mkdtemp(prefix="offload-pg-"))
        self.data_dir = self.base_dir / "data"
        self.log_path = self.base_dir / "postgres.log"
        self.settings = {**FAST_SETTINGS, **(settings or {})}
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    # -- addresses -----------------------------------------------------------------------

    def url(self, dbname: str = "postgres") -> str:
        """``postgresql://postgres@127.0.0.1:PORT/DBNAME`` (trust authentication)."""
        if not self.port:
            raise RuntimeError("PostgreSQL server was never started")
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    @property
    def pid(self) -> int | None:
        """The postmaster's process id while it runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> PgServer:
        """initdb on first use, then start ``postgres`` and wait until it accepts queries.

        The first start picks a free port (retrying if it was taken meanwhile); later starts
        (a restart) reuse it, so URLs handed out before stay valid.
        """
        if self.pid is not None:
            return self
        if not self.data_dir.exists():
            self._initdb()
        attempts = 1 if self.port else 3
        for _attempt in range(attempts):
            if not self.port or attempts > 1:
                self.port = free_port()
            self._spawn()
            try:
                wait_until(
                    self._ready_or_dead,
                    self.startup_timeout,
                    interval=0.05,
                    what=f"PostgreSQL on port {self.port} (log: {self.log_path})",
                )
            except AssertionError:
                self.stop()
                raise
            if self.pid is not None:
                return self
            self._reap()
        raise AssertionError(f"PostgreSQL would not start; log:\n{self.log_tail()}")

    def stop(self, mode: str = "fast") -> None:
        """Stop the postmaster by PID: ``fast`` (SIGINT: roll back, checkpoint, exit),
        ``immediate`` (SIGQUIT: exit at once, crash recovery on the next start) or ``kill``
        (SIGKILL). Escalates to SIGKILL after ``stop_timeout``; always reaps it."""
        sig = {"fast": signal.SIGINT, "immediate": signal.SIGQUIT, "kill": signal.SIGKILL}[mode]
        if self._proc is None:
            return
        try:
            if self._proc.poll() is None:
                self._proc.send_signal(sig)
                try:
                    self._proc.wait(timeout=self.stop_timeout)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
        finally:
            self._reap()

    def restart(self, mode: str = "fast") -> None:
        """Stop (``fast`` or ``immediate``, a crash) and start again on the same port."""
        self.stop(mode)
        self.start()

    def cleanup(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    # -- databases -----------------------------------------------------------------------

    def execute(self, sql: str, dbname: str = "postgres") -> list[tuple[Any, ...]]:
        """Run one statement in autocommit as the superuser; the rows it returns, if any."""
        import psycopg

        with psycopg.connect(self.url(dbname), autocommit=True, connect_timeout=10) as conn:
            cur = conn.execute(sql.encode())
            return cur.fetchall() if cur.description is not None else []

    def create_database(self, name: str | None = None, *, template: str = "template1") -> str:
        """A fresh empty database (a copy of ``template``, fast); its URL.

        Make a migrated database once, then pass its name as ``template`` for a fresh copy
        per test (the template must have no open connections while it is copied).
        """
        name = name or f"t{os.getpid()}_{next(_names)}"
        for ident in (name, template):
            if not _IDENT.fullmatch(ident):
                raise ValueError(f"not a plain database name: {ident!r}")
        self.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop ``name``, disconnecting whoever is still on it."""
        if not _IDENT.fullmatch(name):
            raise ValueError(f"not a plain database name: {name!r}")
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    # -- internals -----------------------------------------------------------------------

    def _initdb(self) -> None:
        as_pg = _as_postgres_user()
        if as_pg:
            os.chown(self.base_dir, as_pg["user"], as_pg["group"])
        done = subprocess.run(
            [
                str(self.bin_dir / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                SUPERUSER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
            cwd=self.base_dir,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
            timeout=120,
            **as_pg,
        )
        if done.returncode != 0:
            out = (done.stdout + done.stderr).decode(errors="replace")
            raise AssertionError(f"initdb failed ({done.returncode}):\n{out}")

    def _spawn(self) -> None:
        args = [
            str(self.bin_dir / "postgres"),
            "-D",
            str(self.data_dir),
            "-p",
            str(self.port),
            "-k",
            str(self.base_dir),
            "-c",
            "listen_addresses=127.0.0.1",
        ]
        for key, value in self.settings.items():
            args += ["-c", f"{key}={value}"]
        as_pg = _as_postgres_user()
        with self.log_path.open("ab") as log:
            if as_pg:
                os.chown(self.log_path, as_pg["user"], as_pg["group"])
            self._proc = subprocess.Popen(
                args,
                cwd=self.base_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                **as_pg,
            )

    def _ready_or_dead(self) -> bool:
        import psycopg

        assert self._proc is not None
        if self._proc.poll() is not None:
            return True  # start() notices the exit
        try:
            with psycopg.connect(self.url(), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True

    def __enter__(self) -> PgServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()
