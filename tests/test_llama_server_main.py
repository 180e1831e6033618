"""The llama.cpp test server (``tests/llama_server_main.py``) stops by itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from realparts import SERVER_MAIN, free_port, require_llama, wait_until

# starts the server as its child, says the child's PID, then waits to be killed
_LAUNCHER = (
    "import os, subprocess, sys\n"
    "argv = [sys.executable, *sys.argv[1:], str(os.getpid())]\n"
    "child = subprocess.Popen(argv, stdin=subprocess.DEVNULL)\n"
    "print(child.pid, flush=True)\n"
    "sys.stdin.read()\n"
)


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie nobody reaped yet counts as ended)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


@pytest.mark.slow
def test_the_server_ends_when_the_process_that_started_it_is_killed(tmp_path: Path) -> None:
    model = require_llama()
    argv = [str(SERVER_MAIN), str(model), str(free_port()), "512"]
    with (tmp_path / "log").open("ab") as log:
        launcher = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    assert launcher.stdout is not None
    server = int(launcher.stdout.readline())
    try:
        os.kill(launcher.pid, signal.SIGKILL)  # as a killed test run would end
        launcher.wait(timeout=30)
        wait_until(lambda: _gone(server), 120, interval=0.2, what="the orphaned server's end")
    finally:
        if not _gone(server):
            os.kill(server, signal.SIGKILL)
