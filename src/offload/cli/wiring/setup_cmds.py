"""``offload setup CLIENT``: wire an agent client to offload in its own config files.

The entries themselves (which file, which key, which value) are :mod:`offload.core.clients.wiring`;
this adapter reads the files, shows the diff (``--dry-run``), backs each file up beside
itself, writes atomically and records what it added (:mod:`offload.cli.wiring.setup_records`) so
``--revert`` takes exactly that out again, even after the client rewrote its file. Every
file is parsed before any is written: an unreadable config stops the command (exit 2) with
nothing changed.

MCP wiring is the default. Routing the client's model traffic through the proxy (the
provider entry) is a separate choice, ``--provider`` (both) or ``--only provider``, and is
printed with what it means.
"""

from __future__ import annotations

import argparse
import difflib
import shutil
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from offload.cli.common import emit, open_store
from offload.cli.wiring import setup_records
from offload.cli.wiring.config_files import (
    STATE,
    backup,
    check_unchanged,
    digest,
    missing_dirs,
    read_config,
    remove_empty_dirs,
    restore,
    stamp_now,
    through_links,
    write_atomic,
)
from offload.config import Settings
from offload.core.clients.wiring import (
    CLIENTS,
    Client,
    ConfigFile,
    Wiring,
    added,
    apply,
    leftover,
    undo,
)
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
        "--provider",
        action="store_true",
        help="also route the client's model requests through offload's proxy",
    )
    parser.add_argument(
        "--only",
        choices=["mcp", "provider"],
        help="write only the MCP entry, or only the provider entry (routes model requests)",
    )
    parser.add_argument("--url", help="the serve/proxy URL (default http://[proxy] host:port)")
    parser.add_argument("--model", help="the model name sent through the proxy (default: local)")
    parser.add_argument(
        "--config-dir",
        metavar="DIR",
        help="the directory client configs live under (default: your home directory)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the diff, write nothing")
    parser.add_argument(
        "--revert", action="store_true", help="take out what setup added to this client's files"
    )


@dataclass
class Change:
    """One config file, its text before and after, and what each entry added."""

    path: Path
    old: str | None
    new: str
    files: list[ConfigFile] = field(default_factory=list)
    added: list[dict[str, Any]] = field(default_factory=list)


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
    # absolute: the record names each file by its path, wherever revert is run from
    return Path(args.config_dir).expanduser().absolute() if args.config_dir else Path.home()


def config_path(args: argparse.Namespace, file: ConfigFile) -> Path:
    """Where ``file`` is on this machine."""
    return config_dir(args) / file.where(sys.platform)


def kinds(client: Client, args: argparse.Namespace) -> set[str]:
    """The kinds of entry asked for: MCP by default, the provider only when asked."""
    if args.only and args.provider:
        raise InvalidInput("--provider writes both entries; with --only pick one of them")
    wanted = {args.only} if args.only else {"mcp", "provider"} if args.provider else {"mcp"}
    has = {f.what for f in client.files}
    if not wanted & has:
        if "mcp" in wanted and "provider" in has:
            raise InvalidInput(
                f"{client.title} has no MCP client; `offload setup {client.name} --provider` "
                "routes its model requests through offload's proxy instead"
            )
        raise InvalidInput(f"{client.title} has no {'/'.join(sorted(wanted))} entry; {client.note}")
    return wanted & has


def plan(client: Client, args: argparse.Namespace, wiring: Wiring) -> list[Change]:
    """Every file's new text, computed before anything is written."""
    wanted = kinds(client, args)
    changes: dict[Path, Change] = {}
    for file in client.files:  # two entries may share one file (OpenCode): apply them in turn
        if file.what not in wanted:
            continue
        path = config_path(args, file)
        if path not in changes:
            old = read_config(path)
            changes[path] = Change(path, old, old or "")
        change = changes[path]
        text = change.new if change.files or change.old is not None else None
        change.new = apply(file, text, wiring, str(path))
        change.files.append(file)
        change.added.append(added(file, text, file.entry(wiring), str(path)))
    return [c for c in changes.values() if c.new != c.old]


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


def routes(client: Client, wanted: set[str], wiring: Wiring, settings: Settings) -> str:
    """What the provider entry means, in a sentence ("" without one)."""
    if "provider" not in wanted:
        return ""
    return (
        f"{client.title}'s model requests will go to offload's proxy at {wiring.proxy_url}, "
        f"which forwards them to the model server at {settings.proxy.upstream}; while "
        "`offload serve` (or `offload proxy`) is not running they fail"
    )


def write(
    client: Client, args: argparse.Namespace, changes: list[Change], secret: str = ""
) -> list[dict[str, Any]]:
    """Back up and write every change, and record what it added; one line per file. A
    file (or backup) holding ``secret`` is readable by its owner alone (0600)."""
    where = setup_records.record_path(args.config_dir, client.name)
    record = setup_records.load(where) or {"client": client.name, "files": {}}
    stamp = stamp_now()
    done: list[dict[str, Any]] = []
    made_now: list[str] = []
    for change in changes:
        held = bool(secret) and secret in (change.old or "")
        saved = backup(change.path, stamp, private=held) if change.old is not None else None
        data = change.new.encode("utf-8")
        made = missing_dirs(change.path)
        write_atomic(change.path, data, private=bool(secret) and secret in change.new)
        made_now += made
        _remember(record, change, saved, data)
        record["files"][str(change.path)].setdefault("dirs", made)
        done.append({"path": str(change.path), "backup": str(saved) if saved else None})
    setup_records.save_record(args.config_dir, client.name, record, made_now)
    return done


def _remember(record: dict[str, Any], change: Change, saved: Path | None, data: bytes) -> None:
    """Fold one write into the client's record: the first backup and what each entry first
    replaced stay; the value written and the digest are the latest."""
    old_bytes = change.old.encode("utf-8") if change.old is not None else None
    rec = record["files"].get(str(change.path))
    if rec is None:
        rec = {"created": change.old is None, "backup": str(saved) if saved else None}
        rec.update(exact=True, entries={})
    else:  # the file changed between two setups: its first backup is no longer exact
        rec["exact"] = (
            rec["exact"] and old_bytes is not None and digest(old_bytes) == rec["written"]
        )
    for entry in change.added:
        kept = rec["entries"].get(entry["what"])
        rec["entries"][entry["what"]] = {**entry, **_first(kept)} if kept else entry
    rec["written"] = digest(data)
    record["files"][str(change.path)] = rec


def _first(kept: dict[str, Any]) -> dict[str, Any]:
    first = {k: kept[k] for k in ("had", "before", "keep")}
    return {**first, "before_text": kept.get("before_text", "")}  # older records lack it


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Wire the client, print the diff, or revert what setup added."""
    client = CLIENTS[args.client]
    if args.revert:
        return revert(args, client, settings)
    wiring = wiring_for(args, settings, args.mcp)
    changes = plan(client, args, wiring)
    means = routes(client, kinds(client, args), wiring, settings)
    if args.dry_run or not changes:
        data = {
            "client": client.name,
            "dry_run": bool(args.dry_run),
            "changes": [{"path": str(c.path), "diff": diff(c, wiring.mcp_token)} for c in changes],
            "routes": means,
            "note": client.note,
        }
        emit(args, data, _render_plan)
        return 0
    records = write(client, args, changes, wiring.mcp_token)
    undo_cmd = f"offload setup {client.name} --revert" + (
        f" --config-dir {args.config_dir}" if args.config_dir else ""
    )
    done = {
        "client": client.name,
        "files": records,
        "routes": means,
        "note": client.note,
        "undo": undo_cmd,
    }
    emit(args, done, _render_done)
    return 0


def revert(args: argparse.Namespace, client: Client, settings: Settings) -> int:
    """Take out what setup added to the client's files, all files or none."""
    where = setup_records.record_path(args.config_dir, client.name)
    record = setup_records.load(where)
    if not record or not record["files"]:
        if revert_older(args, client, settings):
            return 0
        raise InvalidInput(
            f"nothing to revert: offload setup has not written {client.title}'s config "
            f"(no record at {where}, nor in the store {settings.db_path}; backups are "
            "beside the files, NAME.offload-backup-*)"
        )
    own = {str(config_path(args, f)) for f in client.files}
    foreign = sorted(p for p in record["files"] if p not in own)
    if foreign:  # a record edited or copied from elsewhere: revert touches only the client's
        raise InvalidInput(
            f"{where} names {foreign[0]}, which is not one of {client.title}'s config files"
            f" ({', '.join(sorted(own))}); nothing changed"
        )
    top = config_dir(args)
    steps = [
        replace(
            _undo_step(client, Path(p), rec),
            dirs=setup_records.made_for(rec.get("dirs"), Path(p), top),
        )
        for p, rec in record["files"].items()
    ]
    if args.dry_run:
        planned = [f"would {_WOULD[s.how]} {s.path}" for s in steps]
        secret = settings.mcp.bearer_token
        changes = [{"path": str(s.path), "diff": diff(s.change(), secret)} for s in steps if s.old]
        data = {"client": client.name, "dry_run": True, "changes": changes, "reverted": planned}
        emit(args, data, _render_undo)
        return 0
    stamp = stamp_now()
    done = [line for step in steps for line in _apply_step(step, stamp)]
    setup_records.forget(where)
    swept = setup_records.sweep_dirs(args.config_dir, [s.path for s in steps], top)
    done += [f"removed {d} (setup had created it; empty now)" for d in swept]
    if older_runs(client, settings):
        done.append(
            "an older offload's setup is still recorded in the store: --revert again "
            "puts back the files as they were before it"
        )
    emit(args, {"client": client.name, "dry_run": False, "reverted": done}, _render_undo)
    return 0


_WOULD = {
    "remove": "remove (setup had created it)",
    "restore": "restore from its backup",
    "edit": "take offload's entries out of",
    "none": "leave alone",
}


def _render_undo(data: dict[str, Any]) -> str:
    diffs = [c["diff"].rstrip("\n") for c in data.get("changes", []) if c["diff"]]
    tail = ["(dry run: nothing written)"] if data["dry_run"] else []
    return "\n".join([*diffs, *data["reverted"], *tail])


def revert_older(args: argparse.Namespace, client: Client, settings: Settings) -> bool:
    """Restore the files of the last run an older ``offload setup`` recorded in the store
    (byte for byte; refused when a file changed since). False when it recorded none; a
    store that does not exist is not created to find out."""
    if not settings.store.url and not settings.db_path.exists():
        return False
    with open_store(settings) as store:
        runs = list(store.get_state(STATE, client.name) or [])
        if not runs:
            return False
        files = runs[-1]["files"]
        for record in files:
            check_unchanged(record)
        if args.dry_run:  # what the run would do, as the run itself checks it
            done = [_would_restore(record) for record in reversed(files)]
        else:
            done = [restore(record) for record in reversed(files)]
            store.put_state(STATE, client.name, runs[:-1])
    data = {"client": client.name, "dry_run": args.dry_run, "reverted": done}
    emit(args, data, _render_undo)
    return True


def _would_restore(record: dict[str, Any]) -> str:
    if record["backup"] is None:
        return f"would {_WOULD['remove']} {record['path']}"
    return f"would restore {record['path']} from {Path(record['backup']).name}"


def older_runs(client: Client, settings: Settings) -> int:
    """How many runs of an older ``offload setup`` the store still records for ``client``
    (0 without a store: none is created to find out)."""
    if not settings.store.url and not settings.db_path.exists():
        return 0
    with open_store(settings) as store:
        return len(store.get_state(STATE, client.name) or [])


@dataclass
class _Step:
    path: Path
    how: str  # "restore" (backup bytes), "remove" (the file), "edit" (new text), "none"
    data: bytes = b""
    source: str = ""
    old: str = ""  # the file's text now ("" when there is nothing to change)
    dirs: list[str] = field(default_factory=list)  # setup created them: removed when empty

    def change(self) -> Change:
        """The step as a change of the file's text, for a dry run's diff (a removed file
        becomes empty)."""
        new = "" if self.how == "remove" else self.data.decode("utf-8", errors="replace")
        return Change(self.path, self.old, new)


def _undo_step(client: Client, path: Path, rec: dict[str, Any]) -> _Step:
    """What reverting one file does, decided before anything is written."""
    text = read_config(path)
    if text is None:
        return _Step(path, "none", source="already gone")
    now = text.encode("utf-8")
    saved = Path(rec["backup"]) if isinstance(rec["backup"], str) and rec["backup"] else None
    if saved is not None and (
        saved.parent != path.parent or not saved.name.startswith(f"{path.name}.offload-backup-")
    ):
        saved = None  # setup's backups sit beside their file: another is not put in its place
    before = text
    if rec["exact"] and digest(now) == rec["written"]:  # untouched since setup wrote it
        if rec["created"]:
            return _Step(path, "remove", old=before)
        if saved is not None and saved.is_file():
            return _Step(path, "restore", saved.read_bytes(), saved.name, old=before)
    files = {f.what: f for f in client.files}
    for what, entry in reversed(list(rec["entries"].items())):
        text = undo(files[what], text, entry, str(path))
    if rec["created"] and not leftover(files[next(iter(rec["entries"]))], text):
        return _Step(path, "remove", old=before)
    if text.encode("utf-8") == now:
        return _Step(path, "none", source="offload's entries were already gone")
    return _Step(path, "edit", text.encode("utf-8"), old=before)


def _apply_step(step: _Step, stamp: str) -> list[str]:
    done = _apply_file_step(step, stamp)
    gone = remove_empty_dirs(step.dirs) if step.how in ("remove", "none") else []
    return [done, *(f"removed {d} (setup had created it; empty now)" for d in gone)]


def _apply_file_step(step: _Step, stamp: str) -> str:
    if step.how == "remove":
        # a config that is a link: setup created its target; the link is the user's
        through_links(step.path).unlink(missing_ok=True)
        return f"removed {step.path} (setup had created it)"
    if step.how == "restore":
        write_atomic(step.path, step.data, like=step.path)
        return f"restored {step.path} from {step.source}"
    if step.how == "edit":
        saved = backup(step.path, stamp, private=True)
        write_atomic(step.path, step.data)
        return (
            f"took offload's entries out of {step.path}, keeping later changes "
            f"(the file before: {saved.name})"
        )
    return f"{step.path}: nothing to do ({step.source})"


def _render_plan(data: dict[str, Any]) -> str:
    if not data["changes"]:
        return f"{data['client']}: already wired, nothing to change"
    out = [c["diff"].rstrip("\n") for c in data["changes"]]
    if data["routes"]:
        out.append(f"with this, {data['routes']}")
    if data["note"]:  # as the run itself prints it: a dry run shows what setup would say
        out.append(f"note: {data['note']}")
    out.append("(dry run: nothing written)")
    return "\n".join(out)


def _render_done(data: dict[str, Any]) -> str:
    lines = []
    for record in data["files"]:
        saved = f" (backup {Path(record['backup']).name})" if record["backup"] else " (created)"
        lines.append(f"wrote {record['path']}{saved}")
    if data["routes"]:
        lines.append(f"provider: {data['routes']}")
    lines.append(f"undo with: {data['undo']}")
    if data["note"]:
        lines.append(f"note: {data['note']}")
    return "\n".join(lines)
