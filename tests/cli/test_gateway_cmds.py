"""``offload gateway set``: what it reports having written."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from cli.cli_support import run


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
