"""The ``offload`` parsers: every flag says what it does, every command shows an example.
What a newcomer breaks on purpose gets one line and the README's exit code: an unknown
option, a damaged store file, Ctrl-C in the middle of an add."""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import sqlite3
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.cli_support import run
from offload.cli.main import COMMANDS, command_parser
from offload.store.store import Store
from realparts import child_env, stop_process, wait_until


def parsers(command: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """The command's parser and its subcommands' (``models bench``), by their names."""
    _, parser = command_parser(command)
    yield command, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{command} {name}", sub


def every_parser() -> list[tuple[str, argparse.ArgumentParser]]:
    return [pair for command in COMMANDS for pair in parsers(command)]


def test_a_reference_that_names_nothing_is_told_with_the_cli_commands_that_list_entries(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    home = str(tmp_path / "home")
    assert run(capsys, "--home", home, "add", "one text")[0] == 0
    code, _, err = run(capsys, "--home", home, "cat", "nothing-here")
    assert code == 3
    assert err == (
        "offload cat: error: no entry matches 'nothing-here'; list the entries to find it: "
        "`offload ls` or `offload search WORDS`\n"
    )


def test_every_flag_and_argument_of_every_command_has_help_text() -> None:
    missing = [
        f"offload {name}: {'/'.join(action.option_strings) or action.dest}"
        for name, parser in every_parser()
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction)
        and (action.help is None or not action.help.strip())
    ]
    assert missing == []


def test_every_command_and_subcommand_help_ends_with_an_example_of_itself() -> None:
    without = [
        name
        for name, parser in every_parser()
        if f"example:\n  offload {name}" not in parser.format_help()
    ]
    assert without == []


def test_a_subcommands_help_describes_the_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        run(capsys, "models", "bench", "--help")
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: offload models bench")
    assert "--endpoint" in out
    assert "example:\n  offload models bench" in out


def test_global_flags_work_before_and_after_a_subcommand(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OFFLOAD_HOME", str(tmp_path))
    for argv in (
        ("config", "--json", "show"),
        ("--json", "config", "show"),
        ("config", "show", "--json"),
    ):
        code, out, _ = run(capsys, *argv)
        assert code == 0
        assert out.startswith("{"), argv


def test_an_unknown_option_before_any_command_is_named_with_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stopped:
        run(capsys, "--bogus")
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --bogus" in err


def a_store_with_damaged_pages(home: Path) -> None:
    """A store whose header is intact but whose later pages are scrambled."""
    home.mkdir()
    with Store(home / "offload.db") as store:
        for n in range(40):
            store.put(f"entry {n} " + "words to fill a few pages " * 40, scope="s")
    with sqlite3.connect(home / "offload.db") as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray((home / "offload.db").read_bytes())
    for i in range(8192, len(data), 3):
        data[i] ^= 0x5A
    (home / "offload.db").write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["not a database", "damaged pages"])
@pytest.mark.parametrize("argv", [["ls", "--all-scopes"], ["search", "words"], ["doctor"]])
def test_a_damaged_store_file_is_one_line_naming_it_with_exit_5(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    damage: str,
    argv: list[str],
) -> None:
    home = tmp_path / "home"
    if damage == "not a database":
        home.mkdir()
        (home / "offload.db").write_bytes(b"this is no SQLite file " * 2000)
    else:
        a_store_with_damaged_pages(home)
    monkeypatch.setenv("OFFLOAD_HOME", str(home))
    code, _, err = run(capsys, *argv)
    assert code == 5
    assert err.count("\n") == 1
    assert "Traceback" not in err
    assert f"the store file {home / 'offload.db'} is damaged" in err
    assert "offload import" in err


def bytes_waiting(fd: int) -> int:
    """How many bytes a pipe holds that its reader has not read yet (Linux's FIONREAD)."""
    held = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, held)
    return int.from_bytes(held, sys.byteorder)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="FIONREAD on a pipe")
def test_ctrl_c_in_the_middle_of_an_add_says_interrupted_exits_130_and_stores_nothing(
    tmp_path: Path,
) -> None:
    env = child_env(tmp_path / "home")
    # Python leaves SIGINT ignored when its parent started it so (a CI job run in the
    # background): the child takes Python's own handler back, as a terminal's process has it
    cli = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from offload.cli.main import main; sys.exit(main())"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", cli, "add", "--topic", "half"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"the first half of a long input\n" * 100)
        proc.stdin.flush()
        # once the child has read what was sent it is inside the add, reading the rest
        fd = proc.stdin.fileno()
        wait_until(lambda: bytes_waiting(fd) == 0, timeout=60, what="the add to read stdin")
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        stop_process(proc, timeout=10)
    assert proc.returncode == 130
    assert err.decode().strip() == "offload add: interrupted"
    assert out == b""
    with Store(tmp_path / "home" / "offload.db") as store:
        assert store.stats()["entries"] == 0


def test_a_path_whose_name_is_not_utf8_is_refused_saying_to_pipe_the_file_in(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OFFLOAD_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    name = os.fsdecode(b"caf\xe9.txt")  # how the OS hands over a Latin-1 file name
    code, _, err = run(capsys, "add", "--path", name)
    assert code == 2
    assert "--path is not valid UTF-8 text" in err
    assert err.rstrip().endswith("pipe the file in instead (offload add < FILE)")


@pytest.mark.parametrize("home", ["", "  "])
def test_an_empty_home_flag_or_variable_is_refused_naming_it(
    home: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OFFLOAD_HOME", str(tmp_path / "store"))
    code, _, err = run(capsys, "ls", "--home", home)
    assert code == 2 and err.count("\n") == 1 and "--home is empty" in err
    monkeypatch.setenv("OFFLOAD_HOME", home)
    code, _, err = run(capsys, "stats")
    assert code == 2 and err.count("\n") == 1 and "OFFLOAD_HOME is set but empty" in err
    assert not (tmp_path / "store").exists()  # refused before any store was opened


def test_the_mcp_catalog_cost_is_json_with_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = run(capsys, "--json", "--home", str(tmp_path), "mcp", "--catalog")
    data = json.loads(out)
    assert code == 0
    assert "peek" in data["tools"] and data["tokens"] > 0
