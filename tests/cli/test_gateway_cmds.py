"""``offload gateway``: what ``set`` reports having written, and the stdio loop it serves on."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cli.cli_support import run
from realparts import child_env


def test_gateway_set_reports_the_value_as_the_toml_file_spells_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gw.toml"
    path.write_text('[servers.git]\ncommand = "mcp-server-git"\n')
    home = str(tmp_path / "home")
    args = ["gateway", "--config", str(path), "--home", home, "set", "index_responses", "false"]
    code, out, _ = run(capsys, *args, "--server", "git", "--tool", "git_diff")
    assert code == 0
    assert out == f"servers.git.tools.git_diff.index_responses set to false in {path}\n"
    tools = tomllib.loads(path.read_text())["servers"]["git"]["tools"]
    assert tools == {"git_diff": {"index_responses": False}}


def _ping(n: int, pad: str = "") -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": n, "method": "ping", "params": {"x": pad}}).encode()


@pytest.mark.slow
def test_a_stdin_line_past_the_limit_is_dropped_with_an_error_and_the_next_is_served(
    tmp_path: Path,
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text("[gateway]\n")  # no upstream: the gateway's own server answers
    big = _ping(1, "a" * (3 * 1024 * 1024))  # a valid request, 3 MiB on a 1 MiB limit
    done = subprocess.run(
        [sys.executable, "-m", "offload.cli.main", "gateway", "--config", str(config)],
        input=big + b"\n" + _ping(2) + b"\n",
        capture_output=True,
        env=child_env(tmp_path / "home", {"OFFLOAD_HTTP__MAX_BODY_MB": "1"}),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert [a["id"] for a in answers] == [None, 2]  # the dropped line, then the next one
    assert answers[0]["error"]["code"] == -32600
    assert b"offload gateway: a message of 3145" in done.stderr
