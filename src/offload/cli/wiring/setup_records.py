"""What ``offload setup`` added to each client's config, recorded for ``--revert``.

The record of a client lives in a per-user state directory tied to the config files, not
to the store: ``$XDG_STATE_HOME/offload/setup/CLIENT.json`` (default
``~/.local/state/offload/setup/``), or ``DIR/.local/state/offload/setup/`` with
``--config-dir DIR``. So ``--revert`` finds it whatever ``OFFLOAD_HOME`` or ``--home`` says.
It holds, per file: whether setup created it, its first backup, the digest of the last
bytes setup wrote, and for each entry the value written and what it replaced. It is
readable by its owner alone (an http entry's value may hold the bearer token).

Revert puts the first backup back byte for byte while the file is exactly as setup last
wrote it; once the client (or the user) has changed the file, it takes only offload's
entries out of it as it is now, putting back what they replaced.

The directories setup created (for any client's file, or for the records themselves) are
listed once for all clients in ``made-dirs.json`` beside the records: two clients may
share a directory one of them created (VS Code's ``globalStorage`` for Cline and Roo), so
a client's revert removes every empty one on the way to its files, and the last revert the
records' own; a directory the user had is never in the list, so never removed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from offload.cli.wiring.config_files import missing_dirs, read_config, write_atomic
from offload.errors import InvalidInput


def records_dir(config_dir: str | None) -> Path:
    """Where setup's records live (see the module docstring)."""
    if config_dir:
        return Path(config_dir).expanduser().absolute() / ".local" / "state" / "offload" / "setup"
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "offload" / "setup"


def record_path(config_dir: str | None, client: str) -> Path:
    """The record file of one client."""
    return records_dir(config_dir) / f"{client}.json"


def load(path: Path) -> dict[str, Any] | None:
    """The record at ``path``, or None when there is none."""
    text = read_config(path)
    if text is None:
        return None
    try:
        record = json.loads(text)
    except (ValueError, RecursionError) as exc:  # not JSON, or nested past the stack
        raise InvalidInput(f"{path} is not valid JSON; nothing changed, move it away") from exc
    if not isinstance(record, dict) or not isinstance(record.get("files"), dict):
        raise InvalidInput(f"{path} is not an offload setup record; nothing changed")
    return record


def save(path: Path, record: dict[str, Any]) -> None:
    """Write the record (owner-only: it may hold the bearer token)."""
    data = json.dumps(record, indent=2, ensure_ascii=False) + "\n"
    write_atomic(path, data.encode("utf-8"), private=True)


def forget(path: Path) -> None:
    """Remove the record once its client is reverted."""
    path.unlink(missing_ok=True)


MADE = "made-dirs.json"  # beside the records: the directories setup created


def _load_made(path: Path) -> list[str]:
    try:
        made = json.loads(read_config(path) or "{}").get("dirs", [])
    except (ValueError, AttributeError, InvalidInput):  # unreadable: forget nothing more
        return []
    return [d for d in made if isinstance(d, str)] if isinstance(made, list) else []


def save_record(
    config_dir: str | None, client: str, record: dict[str, Any], made: list[str]
) -> None:
    """Save a client's record, and list ``made`` (the directories this run created for its
    files) with the ones the records' own directory needed."""
    where = record_path(config_dir, client)
    made = [*made, *missing_dirs(where)]
    save(where, record)
    if made:
        registry = where.with_name(MADE)
        known = _load_made(registry)
        save(registry, {"dirs": known + [d for d in made if d not in known]})


def made_for(listed: Any, file: Path, top: Path) -> list[str]:
    """The directories a record lists as made for ``file`` that revert may remove: those on
    its way strictly below ``top`` (the config directory, else home), deepest first. A
    record is a file anyone with the account can edit: a directory it lists anywhere else
    (or ``top`` itself, or a name that is not a string) is not setup's to remove."""
    if not isinstance(listed, list):
        return []
    below = {str(p) for p in file.parents if p != top and p.is_relative_to(top)}
    return [d for d in listed if isinstance(d, str) and d in below]


def sweep_dirs(config_dir: str | None, files: list[Path], top: Path) -> list[str]:
    """After a revert: remove the directories setup created on the way to ``files`` that
    are empty now (deepest first), and once no client's record is left, the records' own
    directories too; only ever below ``top`` (see :func:`made_for`). The ones removed."""
    folder = records_dir(config_dir)
    registry = folder / MADE
    known = [d for d in _load_made(registry) if d != str(top) and Path(d).is_relative_to(top)]
    ancestors = {str(p) for f in files for p in f.parents}
    removed = _remove([d for d in known if d in ancestors])
    left = [d for d in known if Path(d).is_dir()]
    if any(p.name != MADE for p in folder.glob("*.json")):
        if left != known:
            save(registry, {"dirs": left})
        return removed
    registry.unlink(missing_ok=True)  # the last client is reverted: nothing left to find
    return removed + _remove([d for d in left if d == str(folder) or folder.is_relative_to(d)])


def _remove(dirs: list[str]) -> list[str]:
    """rmdir each of ``dirs`` (deepest first) that is empty; the ones removed."""
    removed = []
    for name in sorted(dirs, key=lambda d: len(Path(d).parts), reverse=True):
        try:
            os.rmdir(name)
        except OSError:  # gone already, or the user keeps something in it
            continue
        removed.append(name)
    return removed
