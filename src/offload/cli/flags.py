"""The global flags every ``offload`` command and subcommand takes (no heavy imports: the
top-level ``--help`` builds its parser without importing any command)."""

from __future__ import annotations

import argparse


def add_global_flags(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """``--config``, ``--home`` and ``--json``. ``suppress`` for a subcommand's parser: a
    flag given before the subcommand (``offload models --json bench``) is then not reset
    by the subcommand's own default."""
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument("--config", metavar="FILE", default=default, help="a TOML settings file")
    parser.add_argument(
        "--home", metavar="DIR", default=default, help="the store directory ($OFFLOAD_HOME)"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="machine-readable output",
    )


def subcommand(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help_: str,
    example: str,
) -> argparse.ArgumentParser:
    """A subcommand's parser (``offload models bench``) with its own help, the global flags
    and an example, so ``offload models bench --help`` describes ``bench``."""
    parser = subparsers.add_parser(
        name,
        help=help_,
        description=help_,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_global_flags(parser, suppress=True)
    return parser
