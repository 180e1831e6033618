"""Helpers shared by the CLI commands."""

from __future__ import annotations

import logging
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.cli_support import run
from offload.cli.common import held_port, listen_on, server_logging
from offload.errors import AddressInUse


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another socket listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_a_port_someone_listens_on_is_refused_naming_the_address_and_the_setting(
    taken_port: int,
) -> None:
    with pytest.raises(AddressInUse) as refused:
        listen_on("127.0.0.1", taken_port, "proxy.port")
    message = str(refused.value)
    assert f"127.0.0.1:{taken_port}" in message
    assert "--port" in message and "proxy.port" in message
    assert refused.value.exit_code == 7


def test_a_free_port_is_held_from_the_check_until_the_server_lets_it_go() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    held = listen_on("127.0.0.1", port, "proxy.port")
    assert held is not None
    try:
        # a second server started while the first is still starting is refused at its check
        # (it got past it and met uvicorn's own bind error, exit 3, when the check let go)
        with pytest.raises(AddressInUse):
            listen_on("127.0.0.1", port, "proxy.port")
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # already listening: a client that comes early waits in the backlog
    finally:
        held.close()
    again = listen_on("127.0.0.1", port, "proxy.port")  # let go with the server
    assert again is not None
    again.close()


def test_a_held_port_is_let_go_when_its_block_ends_and_none_is_held_without_a_port() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(RuntimeError), held_port("127.0.0.1", port, "mcp.port") as sock:
        assert sock is not None
        with pytest.raises(AddressInUse):
            listen_on("127.0.0.1", port, "mcp.port")
        raise RuntimeError("the server stopped")
    with held_port("127.0.0.1", port, "mcp.port", hold=False) as none:
        assert none is None
        listen_on("127.0.0.1", port, "mcp.port").close()  # type: ignore[union-attr]


def test_port_0_is_left_for_the_server_to_pick() -> None:
    assert listen_on("127.0.0.1", 0, "proxy.port") is None


@pytest.mark.parametrize(
    "argv",
    [["serve"], ["proxy"], ["mcp", "--http"], ["gateway", "--http", "--config", "gateway.toml"]],
)
def test_serving_on_a_taken_port_is_one_line_and_exit_7_before_anything_starts(
    argv: list[str],
    taken_port: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("OFFLOAD_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gateway.toml").write_text('[servers.none]\ncommand = "true"\n')
    code, out, err = run(capsys, *argv, "--host", "127.0.0.1", "--port", str(taken_port))
    assert code == 7
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"offload {argv[0]}: error: cannot listen on 127.0.0.1:{taken_port}")
    assert not (tmp_path / "home").exists()  # no store was opened


@pytest.mark.parametrize(
    "argv",
    [
        ["ls", "--scope", "x", "--all-scopes"],
        ["search", "q", "--scope", "x", "--all-scopes"],
        ["cat", "1", "--scope", "x", "--all-scopes"],
        ["ls", "--scope", ""],
        ["add", "--scope", "  ", "text"],
        ["export", "out.offload", "--scope", ""],
        ["mcp", "--scope", ""],
    ],
)
def test_a_scope_and_every_scope_at_once_or_a_blank_scope_are_refused(
    argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as exited:
        run(capsys, "--home", str(tmp_path / "home"), *argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert "not allowed with" in err or "needs a scope's name" in err, err
    assert not (tmp_path / "home").exists()  # refused before any store was opened


def test_opening_a_store_an_older_offload_left_says_once_that_it_upgrades_its_schema(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    home = str(tmp_path / "home")
    code, _, err = run(capsys, "--home", home, "add", "kept across the upgrade")
    assert code == 0 and "upgrading" not in err  # a fresh store is made, not upgraded
    conn = sqlite3.connect(tmp_path / "home" / "offload.db")
    with conn:  # as an offload that did not know the newest migration left it
        conn.execute("DELETE FROM _migrations WHERE name = 'm_entry_rank_indexes_ascending'")
    conn.close()
    code, out, err = run(capsys, "--home", home, "--json", "ls")
    assert code == 0 and err == (
        "offload: upgrading the store's schema (1 migration, once; a large store takes a while)\n"
    )
    assert "kept across the upgrade" in out  # stdout stays the command's own
    code, _, err = run(capsys, "--home", home, "ls")
    assert code == 0 and err == ""


@pytest.mark.parametrize("command", ["proxy", "serve"])
def test_a_server_below_debug_keeps_httpx_s_line_per_upstream_request_out_of_its_log(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from offload.cli.main import command_parser

    root, httpx_log = logging.getLogger(), logging.getLogger("httpx")
    monkeypatch.setattr(root, "handlers", [])  # basicConfig adds one; the test's stay
    monkeypatch.setattr(root, "level", root.level)
    monkeypatch.setattr(httpx_log, "level", httpx_log.level)
    parser = command_parser(command)[1]
    args = parser.parse_args([])
    assert server_logging(args) == "INFO"
    assert httpx_log.getEffectiveLevel() == logging.WARNING  # `offload proxy` logged each
    args = parser.parse_args(["--log-level", "debug"])
    root.handlers = []
    assert server_logging(args) == "DEBUG" and httpx_log.getEffectiveLevel() == logging.DEBUG
