"""The gateway's TOML tables: servers, per-tool rules, per-client switches, writing back."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from offload.cli.main import main
from offload.errors import ConfigError
from offload.gateway.config import (
    load_gateway_config,
    parse_gateway_config,
    render_toml,
    set_value,
)


def test_servers_tools_and_clients_are_read() -> None:
    cfg = parse_gateway_config(
        {
            "servers": {
                "git": {
                    "command": "mcp-server-git",
                    "args": ["--repository", "/r"],
                    "response_threshold": 100,
                    "tools": {"git_log": {"index_responses": False}},
                },
                "docs": {"url": "http://127.0.0.1:9/mcp", "headers": {"X": "y"}},
            },
            "clients": {"claude-code": {"compress_catalog": False}},
        }
    )
    git = cfg.server("git")
    assert git is not None and git.transport == "stdio" and git.args == ("--repository", "/r")
    assert git.tools["git_log"].index_responses is False
    assert cfg.server("docs") is not None and cfg.server("docs").transport == "http"  # type: ignore[union-attr]
    assert cfg.clients["claude-code"].compress_catalog is False


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ({"a__b": {"command": "x"}}, "must not contain '__'"),
        ({"a": {}}, "exactly one of command"),
        ({"a": {"command": "x", "url": "http://h"}}, "exactly one of command"),
        ({"a": {"command": "x", "bogus": 1}}, "unknown key(s) bogus"),
        ({"a": {"command": "x", "response_threshold": 0}}, "must be 1 or more"),
        ({"a": {"command": "x", "index_responses": "no"}}, "must be bool"),
    ],
)
def test_bad_server_tables_are_refused_clearly(servers: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_gateway_config({"servers": servers})


def test_values_at_their_defaults_are_not_written() -> None:
    data: dict[str, object] = {}
    set_value(data, ["clients", "cc", "compress_catalog"], False, None)
    set_value(data, ["gateway", "response_threshold"], 16384, 16384)
    text = render_toml(data)
    assert tomllib.loads(text) == {"clients": {"cc": {"compress_catalog": False}}}
    set_value(data, ["clients", "cc", "compress_catalog"], None, None)
    assert render_toml(data) == ""


def test_the_cli_set_command_writes_only_non_defaults(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('[servers.git]\ncommand = "mcp-server-git"\nenv = { A = "b" }\n')
    home = str(tmp_path / "home")
    assert (
        main(
            [
                "gateway",
                "--config",
                str(path),
                "--home",
                home,
                "set",
                "index_responses",
                "false",
                "--client",
                "cc",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "gateway",
                "--config",
                str(path),
                "--home",
                home,
                "set",
                "response_threshold",
                "65536",
                "--server",
                "git",
            ]
        )
        == 0
    )
    assert (
        main(
            ["gateway", "--config", str(path), "--home", home, "set", "catalog_threshold", "16384"]
        )
        == 0
    )
    data = tomllib.loads(path.read_text())
    assert data == {
        "servers": {
            "git": {"command": "mcp-server-git", "env": {"A": "b"}, "response_threshold": 65536}
        },
        "clients": {"cc": {"index_responses": False}},
    }
    assert load_gateway_config(path).clients["cc"].index_responses is False
    assert main(["gateway", "--config", str(path), "--home", home, "set", "nonsense", "1"]) == 2
