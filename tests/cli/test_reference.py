"""The command-line reference, docs/cli.md, is what the parsers say: a command or flag
added without regenerating the page (scripts/cli_docs.py) fails here."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from offload.cli.main import COMMANDS, command_parser
from offload.cli.reference import GLOBAL, render

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


@pytest.fixture(scope="module")
def rendered() -> str:
    return render()  # imports every command's module: once for the file


def test_the_committed_reference_is_the_one_the_parsers_render(rendered: str) -> None:
    assert PAGE.read_text(encoding="utf-8") == rendered, "run scripts/cli_docs.py"


def test_every_command_and_every_flag_of_it_is_in_the_reference(rendered: str) -> None:
    page = rendered
    for name in COMMANDS:
        section = page.split(f"\n## offload {name}\n", 1)[1].split("\n## ", 1)[0]
        _, parser = command_parser(name)
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or set(action.option_strings) & set(GLOBAL):
                continue
            for flag in action.option_strings:
                assert f"`{flag}" in section, (name, flag)


def test_every_scope_flag_that_names_its_default_names_the_one_the_code_uses() -> None:
    # the default scope is `[mcp] scope` when set, else the cwd's project, for every
    # command (offload.store.paths.default_scope); `mcp` and `serve` said the git root alone
    for name in COMMANDS:
        _, parser = command_parser(name)
        for action in parser._actions:
            said = action.help or ""
            if "--scope" in action.option_strings and "scope name (default:" in said:
                assert "[mcp] scope, else" in said, (name, said)
