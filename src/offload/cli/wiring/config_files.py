"""Reading, backing up, writing and restoring agent clients' config files.

Used by ``offload setup``: every write is atomic (a temporary file in the same directory,
fsynced, renamed over the old one) and keeps the old file's mode; a backup is a byte copy
beside the file, ``NAME.offload-backup-STAMP``. A config that is a symlink (dotfiles kept in
a repository) is written through: its target changes, the link stays a link. What setup
added is recorded beside the configs (``offload.cli.wiring.setup_records``); ``STATE``,
:func:`check_unchanged` and :func:`restore` serve the store records an older ``offload
setup`` kept.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from offload.errors import InvalidInput, PathError

STATE = "setup"  # the store state namespace of setup runs
#: The largest client config setup reads (the largest seen are a few hundred KiB).
MAX_CONFIG_BYTES = 16 * 2**20


def read_config(path: Path) -> str | None:
    """The UTF-8 text of ``path``; ``None`` when it does not exist. Only a regular file
    (through its symlinks) of at most :data:`MAX_CONFIG_BYTES` is read: a config linked to
    ``/dev/zero`` would be read for ever, one linked to a FIFO would never answer, and one
    linked to ``/dev/null`` would read as empty and then be replaced by a file."""
    try:
        # non-blocking: opening a FIFO with no writer returns at once instead of waiting
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}; nothing changed") from exc
    with os.fdopen(fd, "rb") as fh:
        _regular(path, os.fstat(fh.fileno()).st_mode)
        try:
            data = fh.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise InvalidInput(f"cannot read {path}: {exc.strerror}; nothing changed") from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise InvalidInput(
            f"{path} is over {MAX_CONFIG_BYTES // 2**20} MiB, too large for a config file; "
            "nothing changed"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path} is not UTF-8 text; nothing changed") from exc


def _regular(path: Path, mode: int) -> None:
    """Refuse anything but a regular file: a directory, a device, a FIFO, a socket."""
    if stat.S_ISDIR(mode):
        raise InvalidInput(f"{path} is a directory, not a config file; nothing changed")
    if not stat.S_ISREG(mode):
        raise InvalidInput(
            f"{path} is a device, FIFO or socket, not a config file; nothing changed"
        )


def digest(data: bytes) -> str:
    """The sha256 hex of ``data`` (to notice a file edited after setup wrote it)."""
    return hashlib.sha256(data).hexdigest()


def backup(path: Path, stamp: str, *, private: bool = False) -> Path:
    """A byte copy of ``path`` beside it, named with ``stamp`` (never overwriting one);
    ``private``: it holds a secret (see :func:`write_atomic`)."""
    target = path.with_name(f"{path.name}.offload-backup-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.offload-backup-{stamp}-{n}")
    write_atomic(target, path.read_bytes(), like=path, private=private)
    return target


def through_links(path: Path) -> Path:
    """The file ``path`` names once its symlinks are followed (``path`` itself when it is
    none): renaming over a link would replace the link with a regular file."""
    if not path.is_symlink():
        return path
    real = Path(os.path.realpath(path))
    if real.is_symlink():  # realpath stops at a loop
        raise PathError(f"{path} is a symlink loop; nothing changed")
    return real


def missing_dirs(path: Path) -> list[str]:
    """The directories a write of ``path`` would create (deepest first): the ones
    ``setup`` records, so that ``--revert`` removes them again and no other."""
    parent = through_links(path).parent
    made: list[str] = []
    while not parent.exists() and parent != parent.parent:
        made.append(str(parent))
        parent = parent.parent
    return made


def remove_empty_dirs(dirs: list[str]) -> list[str]:
    """Remove each of ``dirs`` (deepest first) that is empty now; the ones removed."""
    removed: list[str] = []
    for name in dirs:
        try:
            os.rmdir(name)
        except OSError:  # gone already, or the user keeps something in it
            continue
        removed.append(name)
    return removed


def write_atomic(
    path: Path, data: bytes, *, like: Path | None = None, private: bool = False
) -> None:
    """Replace ``path`` with ``data`` in one rename, keeping the mode of ``like`` (or of
    ``path`` itself when it exists); a symlink is written through (its target is replaced,
    the link kept), never over a device, a FIFO or a socket (the rename would remove it). ``private`` (``data`` holds a secret): readable and writable by the
    owner alone, whatever the old mode let others do (0600 when new)."""
    try:
        path = through_links(path)
        if path.exists():  # renaming over a device or a FIFO would remove it
            _regular(path, path.stat().st_mode)
        path.parent.mkdir(parents=True, exist_ok=True)
        source = like if like is not None else path
        mode = source.stat().st_mode & 0o7777 if source.exists() else None
        if private:  # mkstemp's file is 0600 already; an old mode keeps only its owner bits
            mode = None if mode is None else mode & 0o700
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            if mode is not None:
                os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise PathError(f"cannot write {path}: {exc.strerror}") from exc


def check_unchanged(record: dict[str, Any]) -> None:
    """Refuse when a file was edited (or removed) after setup wrote it, or its backup is gone."""
    path = Path(record["path"])
    try:
        current = path.read_bytes()
    except OSError:
        current = None
    if current is None or digest(current) != record["written"]:
        raise InvalidInput(
            f"{path} changed after offload setup wrote it; nothing restored "
            f"(the backup is {record['backup'] or 'none: setup created the file'})"
        )
    if record["backup"] is not None and not Path(record["backup"]).is_file():
        raise InvalidInput(f"the backup {record['backup']} is gone; nothing restored")


def restore(record: dict[str, Any]) -> str:
    """Undo one file of a setup run: copy its backup back, or remove a file setup created.

    Refuses (changing nothing) when the file was edited after setup wrote it."""
    check_unchanged(record)
    path = Path(record["path"])
    if record["backup"] is None:
        # a link setup wrote through was dangling before: it is again, not removed
        through_links(path).unlink(missing_ok=True)
        return f"removed {path} (setup had created it)"
    saved = Path(record["backup"])
    try:
        data = saved.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"the backup {saved} is gone; nothing restored") from exc
    write_atomic(path, data, like=saved)
    return f"restored {path} from {saved.name}"


def stamp_now() -> str:
    """A UTC timestamp for backup names, e.g. ``20261201T091500Z``."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
