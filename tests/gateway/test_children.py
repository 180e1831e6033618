"""Upstream children never outlive the gateway, even while still in their handshake.

Real parts: the ``offload gateway`` command as a subprocess, with an upstream command
that starts, writes its pid and never answers ``initialize``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from realparts import child_env, stop_process, wait_until

pytestmark = pytest.mark.slow

# an upstream that never completes the handshake: it only writes its pid, then waits
NEVER_HANDSHAKES = (
    "import os, sys, time\n"
    "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid()))\n"
    "os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
    "time.sleep(600)\n"
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def start_gateway(tmp_path: Path, pid_file: Path) -> subprocess.Popen[bytes]:
    config = tmp_path / "gateway.toml"
    config.write_text(
        "[gateway]\nconnect_timeout_s = 120\n\n[servers.stuck]\n"
        f"command = {str(sys.executable)!r}\n"
        f"args = ['-c', {NEVER_HANDSHAKES!r}, {str(pid_file)!r}]\n"
    )
    home = tmp_path / "home"
    return subprocess.Popen(
        [sys.executable, "-m", "offload.cli.main", "gateway", "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "stderr.txt", "wb"),
        env=child_env(home),
    )


@pytest.mark.parametrize("how", ["sigterm", "sighup", "stdin-closed"])
def test_an_upstream_still_connecting_dies_with_the_gateway(tmp_path: Path, how: str) -> None:
    pid_file = tmp_path / "upstream.pid"
    gateway = start_gateway(tmp_path, pid_file)
    child = 0
    try:
        wait_until(pid_file.exists, 60, what="the upstream child to start")
        child = int(pid_file.read_text())
        assert alive(child)
        if how == "stdin-closed":
            assert gateway.stdin is not None
            gateway.stdin.close()
        else:
            gateway.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGHUP)
        gateway.wait(timeout=30)
        wait_until(lambda: not alive(child), 10, what=f"upstream {child} to be gone")
    finally:
        stop_process(gateway, 5)
        if child and alive(child):
            os.kill(child, signal.SIGKILL)
