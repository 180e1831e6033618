#!/usr/bin/env python3
"""Write docs/cli.md from the command-line parsers (``--check``: fail if it differs)."""

from __future__ import annotations

import sys
from pathlib import Path

from offload.cli.reference import render

PAGE = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE} is out of date: run scripts/cli_docs.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
