"""``offload context FILE...``: a cache-alignment report for context files, like ``/context``.

Each FILE is one section, in the order given. The section hashes of each run are kept in
the store (state namespace ``sections.context``, per set of files), so a second run says
which files changed since the first and whether they still sit in the cached prefix.
``--prompts`` reads each FILE as the whole prompt of one turn instead (oldest first),
split at markdown headings.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
from pathlib import Path
from typing import Any

from offload.config import Settings
from offload.core.hashing import decode, text_hash
from offload.core.untrusted import printable
from offload.errors import NotAFile, TooLarge
from offload.sections.alignment import AlignmentReport, align_history, align_prompts, format_report

_STATE = "sections.context"
_HISTORY = 20  # turns of hashes kept per file set


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``offload context``."""
    parser.add_argument("files", nargs="+", metavar="FILE", help="context files, prompt order")
    parser.add_argument(
        "--prompts",
        action="store_true",
        help="each FILE is a whole prompt of successive turns (oldest first)",
    )
    parser.add_argument(
        "--level", type=int, default=2, help="with --prompts: split at headings up to this level"
    )
    parser.add_argument(
        "--fresh", action="store_true", help="ignore and do not record earlier runs"
    )


def _read(path: str, limit: int) -> str:
    p = Path(path)
    try:
        if not p.is_file():
            what = "a directory, not a file" if p.is_dir() else "no such file"
            raise NotAFile(f"{printable(path[:200])}: {what}")
        size = p.stat().st_size
        if size > limit:
            raise TooLarge(f"{path}: {size:,} bytes is over the {limit:,}-byte limit")
        return decode(p.read_bytes())
    except OSError as exc:  # a name over the filesystem's limit (ENAMETOOLONG), EACCES, …
        shown = path if len(path) <= 200 else path[:199] + "…"
        raise NotAFile(f"{shown}: cannot read ({exc.strerror})") from exc


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Print the report (markdown, or ``--json``)."""
    from offload.core.tokens import default_counter

    limit = settings.store.max_file_bytes
    texts = [(path, _read(path, limit)) for path in args.files]
    counter = default_counter()
    if args.prompts:
        report = align_prompts([t for _, t in texts], level=args.level, counter=counter)
    else:
        report = _with_history(args, settings, texts, counter)
    if args.json:
        import json
        import sys

        json.dump(dataclasses.asdict(report), sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_report(report), end="")
    return 0


def _with_history(
    args: argparse.Namespace, settings: Settings, texts: list[tuple[str, str]], counter: Any
) -> AlignmentReport:
    if args.fresh:
        return align_history([], texts, counter)
    from offload.store.store import Store

    # One history per set of files, whatever their order, so following the suggested
    # order keeps comparing with the previous run.
    paths = sorted(str(Path(p).resolve()) for p, _ in texts)
    key = hashlib.sha256("\n".join(paths).encode("utf-8", "surrogateescape")).hexdigest()
    with Store.open(settings) as store:
        saved = store.get_state(_STATE, key)
        history: list[list[tuple[str, str]]] = []
        if isinstance(saved, list):
            history = [[(str(n), str(h)) for n, h in turn] for turn in saved]
        report = align_history(history, texts, counter)
        now = [[name, text_hash(text)] for name, text in texts]
        if not history or [list(p) for p in history[-1]] != now:
            store.put_state(_STATE, key, [*[list(map(list, t)) for t in history], now][-_HISTORY:])
    return report
