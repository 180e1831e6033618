"""Reading files by path, confined to allowed roots; finding the project a directory is in
(its root, and the git remote that names it on every machine)."""

from __future__ import annotations

import configparser
import errno
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from offload.config import Settings
from offload.core.hashing import decode
from offload.core.project_id import choose_remote, normalise_remote
from offload.errors import BinaryFile, EncodingError, NotAFile, OutsideRoots, TooLarge

_SNIFF = 8192


def project_root(cwd: Path) -> Path:
    """The git root containing ``cwd`` (a ``.git`` dir or file), else ``cwd`` itself."""
    cwd = cwd.resolve()
    for candidate in (cwd, *cwd.parents):
        if (candidate / ".git").exists():
            return candidate
    return cwd


def project_scope(cwd: Path, by: str = "path") -> str:
    """The default scope name for work started in ``cwd``: its project root path, or with
    ``by="remote"`` the project's normalised git remote (the same for every clone, on any
    machine: what a team store wants), falling back to the path without one."""
    root = project_root(cwd)
    if by == "remote":
        identity = normalise_remote(project_remote(root) or "")
        if identity is not None:
            return identity
    return str(root)


def default_scope(settings: Settings, cwd: Path) -> str:
    """The scope work started in ``cwd`` uses when none is named: ``mcp.scope`` when set,
    else the project's (:func:`project_scope`, named as ``store.scope_by`` says). The MCP
    server and the CLI both ask this, so ``offload search`` finds what an agent offloaded."""
    return settings.mcp.scope or project_scope(cwd, settings.store.scope_by)


def project_remote(root: Path) -> str | None:
    """The URL of the remote naming the repository at ``root`` (``origin``, else the first
    by name), read from its git config; None without a repository or a remote.

    Read in-process rather than through ``git``: no binary needed, and no "dubious
    ownership" refusal for a checkout owned by another user. A worktree's ``.git`` file
    points at its git dir, whose ``commondir`` holds the shared config.
    """
    git_dir = _git_dir(root)
    if git_dir is None:
        return None
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    try:
        parser.read_string((git_dir / "config").read_text(encoding="utf-8", errors="replace"))
    except (OSError, configparser.Error):
        return None
    remotes: dict[str, str] = {}
    for section in parser.sections():
        m = _REMOTE_SECTION.fullmatch(section)
        url = parser.get(section, "url", fallback=None)
        if m is not None and url:
            remotes[m["name"]] = url
    return choose_remote(remotes)


_REMOTE_SECTION = re.compile(r'remote\s+"(?P<name>[^"]*)"', re.IGNORECASE)


def _git_dir(root: Path) -> Path | None:
    dot_git = root / ".git"
    try:
        if dot_git.is_dir():
            git_dir = dot_git
        elif dot_git.is_file():
            first = dot_git.read_text(encoding="utf-8", errors="replace").strip()
            if not first.startswith("gitdir:"):
                return None
            git_dir = (root / first[len("gitdir:") :].strip()).resolve()
        else:
            return None
        common = git_dir / "commondir"
        if common.is_file():
            git_dir = (git_dir / common.read_text(encoding="utf-8").strip()).resolve()
    except OSError:
        return None
    return git_dir


@dataclass(frozen=True)
class FileText:
    """A text file read under the confinement rules."""

    path: Path  # resolved, inside a root
    text: str
    size: int


def confine(path: str | Path, roots: Sequence[Path], *, base: Path | None = None) -> Path:
    """Resolve ``path`` (relative to ``base`` or the first root) and require it inside a root.

    Symlinks are resolved first, so a link that points outside every root is refused.
    """
    if not roots:
        raise OutsideRoots("no allowed roots are configured")
    if "\x00" in str(path):
        raise NotAFile(f"{str(path)!r}: a path cannot contain a NUL byte")
    resolved_roots = [Path(r).resolve() for r in roots]
    try:
        raw = Path(path).expanduser()
        if not raw.is_absolute():
            raw = (base or resolved_roots[0]) / raw
        real = Path(os.path.realpath(raw))
        os.fsencode(real)  # a lone surrogate has no bytes on a POSIX filesystem
    except RuntimeError as exc:  # ``~user`` naming no user
        raise NotAFile(f"{_shown(path)}: cannot expand ~ ({exc})") from exc
    except UnicodeError as exc:
        raise NotAFile(f"{_shown(path)!r}: not a name this filesystem can hold") from exc
    for root in resolved_roots:
        if real == root or real.is_relative_to(root):
            return real
    shown = ", ".join(str(r) for r in resolved_roots)
    linked = " (through a symlink)" if Path(os.path.abspath(raw)) != real else ""
    raise OutsideRoots(f"{path} resolves outside the allowed roots{linked}: {shown}")


def _shown(path: str | Path, limit: int = 200) -> str:
    """``path`` for a message, clipped (a fuzzed path may be kilobytes long)."""
    text = str(path)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def limit_text(max_bytes: int) -> str:
    """The size limit and how to raise it, for a message."""
    mib = f" ({max_bytes / 2**20:.4g} MiB)" if max_bytes >= 2**20 else ""
    return (
        f"the {max_bytes}-byte limit{mib} of store.max_file_bytes; "
        "raise it with OFFLOAD_STORE__MAX_FILE_BYTES=N or max_file_bytes = N under [store] "
        "in offload.toml"
    )


def read_text_file(
    path: str | Path, roots: Sequence[Path], *, max_bytes: int, base: Path | None = None
) -> FileText:
    """Read a UTF-8 text file inside ``roots``; clear errors for every way it can't be.

    The file is opened once and judged by what was opened, not by its name: a name swapped
    meanwhile for a FIFO (which would block the read), a device, or a symlink out of the
    roots (the last part, or a directory on the way) is refused."""
    real = confine(path, roots, base=base)
    with os.fdopen(open_confined(real, path, roots), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            raise TooLarge(f"{path}: {size} bytes is over {limit_text(max_bytes)}")
        try:
            # a file growing since fstat() is still capped; read() allocates what it is
            # asked for, so ask for the file's size, not the limit
            data = f.read(size + 1)
            if len(data) > size:  # it grew: read on to one byte past the limit
                data += f.read(max_bytes - size)
        except OSError as exc:
            raise NotAFile(f"{path}: cannot read ({exc.strerror})") from exc
    if len(data) > max_bytes:
        raise TooLarge(f"{path}: it grew while being read, over {limit_text(max_bytes)}")
    size = len(data)
    if b"\x00" in data[:_SNIFF]:
        raise BinaryFile(f"{path}: looks binary (NUL bytes); offload stores text only")
    try:
        text = decode(data)
    except EncodingError as exc:
        raise BinaryFile(f"{path}: not UTF-8 text; offload stores text only") from exc
    return FileText(real, text, size)


_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)  # the last part a symlink now: ELOOP
    | getattr(os, "O_NONBLOCK", 0)  # a FIFO opens at once, to be refused, not waited on
    | getattr(os, "O_NOCTTY", 0)  # a terminal opened is never made this process's own
    | getattr(os, "O_CLOEXEC", 0)
)
# a directory on the way, opened below the one before it: a symlink there now is ELOOP
_DIR_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_DIRECTORY", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def open_confined(real: Path, path: str | Path, roots: Sequence[Path]) -> int:
    """A descriptor of ``real``, a regular file still inside ``roots`` as opened.

    ``real`` is opened part by part from the root that holds it, each directory below the
    one before and none of them followed if it is a symlink now: a name on the way swapped
    for a link (out of the roots or not) after the check is refused, without asking the
    system where the file opened lives (``/proc`` may not be mounted)."""
    try:
        fd = _open_below(_holding_root(real, roots), real)
    except FileNotFoundError as exc:
        raise NotAFile(f"{path}: no such file") from exc
    except OSError as exc:  # ELOOP (swapped for a link), ENAMETOOLONG, EACCES, ENXIO, …
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise NotAFile(
                f"{_shown(path)}: not read: it or a directory on its way is a symlink now,"
                " changed after the allowed roots were checked"
            ) from exc
        raise NotAFile(f"{_shown(path)}: cannot read ({exc.strerror})") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotAFile(f"{path}: not a regular file")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _holding_root(real: Path, roots: Sequence[Path]) -> Path:
    """The innermost of ``roots`` (resolved) that holds ``real``."""
    holding = [r for r in (Path(r).resolve() for r in roots) if real.is_relative_to(r)]
    if not holding:
        raise OutsideRoots(f"{real} is outside the allowed roots")
    return max(holding, key=lambda r: len(r.parts))


def _open_below(root: Path, real: Path) -> int:
    """``real`` opened from ``root`` down, a part at a time (see :func:`open_confined`)."""
    parts = real.relative_to(root).parts
    if not parts:
        return os.open(real, _OPEN_FLAGS)
    at = os.open(root, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            below = os.open(part, _DIR_FLAGS, dir_fd=at)
            os.close(at)
            at = below
        return os.open(parts[-1], _OPEN_FLAGS, dir_fd=at)
    finally:
        os.close(at)
