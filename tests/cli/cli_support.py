"""Helpers shared by the CLI tests: the command run in process, its exit code and output."""

from __future__ import annotations

import pytest

from offload.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``offload ARGV`` in this process: (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
