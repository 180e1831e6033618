"""``offload setup CLIENT``: wire an agent client to offload in its own config files.

The entries themselves (which file, which key, which value) are :mod:`offload.core.clients`;
this adapter reads the files, shows the diff (``--dry-run``), backs each file up beside
itself, writes atomically and records the run in the store so ``--revert`` restores the
files byte for byte. Every file is parsed before any is written: an unreadable config
stops the command (exit 2) with nothing changed.
"""

from __future__ import annotations

import argparse
import difflib
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offload.cli.common import emit, open_store
from offload.cli.config_files import (
    STATE,
    backup,
    check_unchanged,
    digest,
    read_config,
    restore,
    stamp_now,
    write_atomic,
)
from offload.config import Settings
from offload.core.clients import CLIENTS, Client, ConfigFile, Wiring, apply
from offload.errors import InvalidInput


def configure(parser: argparse.ArgumentParser) -> None:
    """Flags of ``offload setup``."""
    parser.add_argument("client", choices=sorted(CLIENTS), help="the client to wire")
    parser.add_argument(
        "--mcp",
        choices=["stdio", "http"],
        default="stdio",
        help="stdio: the client starts `offload mcp`; http: it connects to `offload serve`",
    )
    parser.add_argument(
        "--only", choices=["mcp", "provider"], help="write only the MCP or the provider entry"
    )
    parser.add_argument("--url", help="the serve/proxy URL (default http://[proxy] host:port)")
    parser.add_argument("--model", help="the model name sent through the proxy (default: local)")
    parser.add_argument(
        "--config-dir",
        metavar="DIR",
        help="the directory client configs live under (default: your home directory)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the diff, write nothing")
    parser.add_argument("--revert", action="store_true", help="restore the last setup's files")


@dataclass
class Change:
    """One config file and its text before and after."""

    path: Path
    old: str | None
    new: str


def wiring_for(args: argparse.Namespace, settings: Settings, mcp: str) -> Wiring:
    """Where the entries point (``mcp``: "stdio" or "http"), from the flags and settings."""
    base = (args.url or f"http://{settings.proxy.host}:{settings.proxy.port}").rstrip("/")
    command = [*mcp_command(), "mcp"]
    if settings.store.home:  # a store other than the default one: pin it
        command += ["--home", str(settings.home)]
    return Wiring(
        mcp_command=tuple(command),
        mcp_url=f"{base}/mcp" if mcp == "http" else "",
        proxy_url=base,
        model=args.model or settings.proxy.model_alias or "local",
        mcp_token=settings.mcp.bearer_token if mcp == "http" else "",
    )


def mcp_command() -> list[str]:
    """How a client starts this offload: the script beside this interpreter, the one on
    PATH, or this interpreter running the module."""
    beside = Path(sys.executable).with_name("offload")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("offload")
    return [found] if found else [sys.executable, "-m", "offload.cli.main"]


def config_dir(args: argparse.Namespace) -> Path:
    """The directory the client's config paths are relative to."""
    return Path(args.config_dir).expanduser() if args.config_dir else Path.home()


def selected(client: Client, only: str | None) -> list[ConfigFile]:
    """The client's files offload writes, all or only one kind."""
    return [f for f in client.files if only is None or f.what == only]


def plan(client: Client, args: argparse.Namespace, wiring: Wiring) -> list[Change]:
    """Every file's new text, computed before anything is written."""
    files = selected(client, args.only)
    if not files:
        raise InvalidInput(f"{client.title} has no {args.only} entry; {client.note}")
    old: dict[Path, str | None] = {}
    new: dict[Path, str | None] = {}
    for file in files:  # two entries may share one file (OpenCode): apply them in turn
        path = config_dir(args) / file.path
        if path not in old:
            old[path] = new[path] = read_config(path)
        new[path] = apply(file, new[path], wiring, str(path))
    return [
        Change(p, old[p], text) for p, text in new.items() if text is not None and text != old[p]
    ]


def diff(change: Change, secret: str = "") -> str:
    """A unified diff of one change (the whole file when it is new); ``secret`` (the
    bearer token) is shown as a placeholder, never in clear."""
    old = (change.old or "").splitlines(keepends=True)
    new = change.new.splitlines(keepends=True)
    name = str(change.path)
    text = "".join(
        difflib.unified_diff(old, new, "/dev/null" if change.old is None else name, name)
    )
    return text.replace(secret, HIDDEN) if secret else text


HIDDEN = "<[mcp] bearer_token>"  # what output shows instead of the token


def write(changes: list[Change], secret: str = "") -> list[dict[str, Any]]:
    """Back up and write every change; the records ``--revert`` needs, one per file. A
    file (or backup) holding ``secret`` is readable by its owner alone (0600)."""
    stamp = stamp_now()
    records: list[dict[str, Any]] = []
    for change in changes:
        held = bool(secret) and secret in (change.old or "")
        saved = backup(change.path, stamp, private=held) if change.old is not None else None
        data = change.new.encode("utf-8")
        write_atomic(change.path, data, private=bool(secret) and secret in change.new)
        records.append(
            {
                "path": str(change.path),
                "backup": str(saved) if saved else None,
                "written": digest(data),
            }
        )
    return records


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Wire the client, print the diff, or revert the last run."""
    client = CLIENTS[args.client]
    if args.revert:
        return revert(args, settings, client)
    wiring = wiring_for(args, settings, args.mcp)
    changes = plan(client, args, wiring)
    if args.dry_run or not changes:
        data = {
            "client": client.name,
            "dry_run": bool(args.dry_run),
            "changes": [{"path": str(c.path), "diff": diff(c, wiring.mcp_token)} for c in changes],
            "note": client.note,
        }
        emit(args, data, _render_plan)
        return 0
    with open_store(settings) as store:
        runs = list(store.get_state(STATE, client.name) or [])
        records = write(changes, wiring.mcp_token)
        store.put_state(STATE, client.name, [*runs, {"files": records}])
    undo = f"offload setup {client.name} --revert" + (
        f" --config-dir {args.config_dir}" if args.config_dir else ""
    )
    done = {"client": client.name, "files": records, "note": client.note, "undo": undo}
    emit(args, done, _render_done)
    return 0


def revert(args: argparse.Namespace, settings: Settings, client: Client) -> int:
    """Restore the files of the client's last setup run, all or none."""
    with open_store(settings) as store:
        runs = list(store.get_state(STATE, client.name) or [])
        if not runs:
            raise InvalidInput(
                f"nothing to revert: offload setup has not written {client.title}'s config "
                f"(store {settings.db_path})"
            )
        files = runs[-1]["files"]
        for record in files:
            check_unchanged(record)
        done = [restore(record) for record in reversed(files)]
        store.put_state(STATE, client.name, runs[:-1])
    emit(args, {"client": client.name, "reverted": done}, lambda d: "\n".join(d["reverted"]))
    return 0


def _render_plan(data: dict[str, Any]) -> str:
    if not data["changes"]:
        return f"{data['client']}: already wired, nothing to change"
    out = [c["diff"].rstrip("\n") for c in data["changes"]]
    out.append("(dry run: nothing written)")
    return "\n".join(out)


def _render_done(data: dict[str, Any]) -> str:
    lines = []
    for record in data["files"]:
        saved = f" (backup {Path(record['backup']).name})" if record["backup"] else " (created)"
        lines.append(f"wrote {record['path']}{saved}")
    lines.append(f"undo with: {data['undo']}")
    if data["note"]:
        lines.append(f"note: {data['note']}")
    return "\n".join(lines)
