"""The ``offload`` parsers: every flag says what it does, every command shows an example."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.cli_support import run
from offload.cli.main import COMMANDS, command_parser


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
