"""An ``offload`` command serving on a free loopback port in its own process, stopped by PID.

:class:`OffloadProcess` runs ``python -m offload.cli.main ARGS --port N`` with a private
store (:func:`realparts.child_env`), its output in a log file, and waits (bounded) until
:meth:`OffloadProcess.ready` says it serves. A free port can be taken between the probe
and the bind: a process that dies while starting is started again on a fresh port.
Subclasses name the command and what "ready" means (``offload serve`` in
``tests/serving.py``, ``offload mcp --http`` in ``tests/mcp/e2e_support.py``).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

from realparts import Started, child_env, free_port, stop_process, wait_until

# generous: a bound on a start that takes ~1 s, not a measure of it (the machine may be busy)
START_TIMEOUT_S = 60.0


def port_open(port: int) -> bool:
    """True when something accepts TCP connections on 127.0.0.1:port."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def listening_inodes(port: int) -> set[str]:
    """The socket inodes listening on TCP port ``port`` (IPv4 and IPv6), from /proc/net."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # local address "HEXIP:HEXPORT", state 0A = LISTEN, inode in field 9
            if len(fields) > 9 and fields[3] == "0A" and fields[1].endswith(f":{port:04X}"):
                found.add(fields[9])
    return found


def listens_on(pid: int, port: int) -> bool:
    """Whether process ``pid`` itself holds the socket listening on ``port`` (a free port
    probed before the bind can be taken by another process, which would then answer for
    it: the test must talk to its own server)."""
    inodes = listening_inodes(port)
    if not inodes:
        return False
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False


class OffloadProcess(Started):
    """``offload ARGS`` in a subprocess in ``cwd``, on a free loopback port."""

    what = "offload"  # for messages

    def __init__(
        self, cwd: Path, home: Path, log: Path, extra_env: Mapping[str, str] | None = None
    ) -> None:
        self.cwd = cwd
        self.home = home
        self.log = log
        self.extra_env = dict(extra_env or {})
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def arguments(self, port: int) -> Sequence[str]:
        """The command's arguments (after ``offload``) to serve on ``port``."""
        raise NotImplementedError

    def ready(self) -> bool:
        """True once the process serves on :attr:`port` (it holds the listening socket)."""
        proc = self.proc
        if proc is None or not port_open(self.port):
            return False
        return not Path("/proc/net/tcp").exists() or listens_on(proc.pid, self.port)

    def start(self) -> Self:
        """Start, and wait until it is ready; retry on a fresh port if it died starting."""
        for _attempt in range(3):
            self.port = free_port()
            command = [sys.executable, "-m", "offload.cli.main", *self.arguments(self.port)]
            with self.log.open("ab") as log:
                self.proc = subprocess.Popen(
                    command,
                    cwd=self.cwd,
                    env=child_env(self.home, self.extra_env),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                )
            proc = self.proc
            try:
                wait_until(
                    lambda p=proc: self.ready() or p.poll() is not None,  # type: ignore[misc]
                    START_TIMEOUT_S,
                    interval=0.05,
                    what=f"{self.what} on port {self.port} (log: {self.log})",
                )
            except BaseException:
                # a start that timed out must not leave the process serving past the test
                self.stop()
                raise
            if proc.poll() is None and self.ready():
                return self
            self.stop()  # it died, or another process holds the port it was given
        raise AssertionError(f"{self.what} would not start:\n{self.log_text()}")

    def stop(self) -> None:
        """Terminate by PID; kill if it lingers; always reap."""
        if self.proc is None:
            return
        stop_process(self.proc, timeout=15)
        self.proc = None

    def log_text(self) -> str:
        """Everything the process wrote so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""
