"""A project's identity across machines: its git remote URL, normalised.

Two clones of one repository (on two machines, at two paths) share a scope in a team store
only if their scope names agree, so the name cannot be a local path. The remote URL is the
one thing the clones share; the spellings git accepts for it differ (scp-like
``git@host:a/b.git``, ``ssh://git@host:22/a/b``, ``https://user:token@host/a/b/``), so each is
reduced to ``host/path``: no scheme, user, password or port, no trailing ``.git`` or slash,
the host lower-cased (paths keep their case: some servers tell them apart).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

# scp-like syntax: [user@]host:path, where the host has no slash before the colon
_SCP = re.compile(r"(?:[^@/:]+@)?(?P<host>[^@/:]+):(?P<path>[^/].*|/.*)")
PREFERRED_REMOTE = "origin"


def normalise_remote(url: str) -> str | None:
    """``host/path`` for a remote URL (None when it names no stable place: a relative path,
    an empty string). A local-path remote becomes ``file:/abs/path``."""
    url = url.strip()
    if not url or any(c.isspace() or not c.isprintable() for c in url):
        return None
    if url.startswith("file://") or url.startswith("/"):
        path = urlsplit(url).path if url.startswith("file://") else url
        return _local(unquote(path))
    if _has_scheme(url):
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        return _joined(host, unquote(parts.path))
    m = _SCP.fullmatch(url)
    if m is None:
        return None  # a relative path (../repo.git): not the same place on another machine
    return _joined(m["host"].lower(), m["path"])


def choose_remote(remotes: Mapping[str, str]) -> str | None:
    """The URL that names the project among a clone's remotes: ``origin``, else the first
    remote by name (deterministic); None without remotes."""
    if PREFERRED_REMOTE in remotes:
        return remotes[PREFERRED_REMOTE]
    for name in sorted(remotes):
        return remotes[name]
    return None


def _has_scheme(url: str) -> bool:
    scheme, sep, _ = url.partition("://")
    return bool(sep and scheme[:1].isalpha() and all(c.isalnum() or c in "+.-" for c in scheme))


def _trimmed(path: str) -> str:
    path = path.strip("/")
    if path.endswith(".git"):
        path = path[: -len(".git")]
    return path.rstrip("/")


def _joined(host: str, path: str) -> str | None:
    path = _trimmed(path)
    if not host or not path or ".." in path.split("/"):
        return None
    return f"{host}/{path}"


def _local(path: str) -> str | None:
    path = _trimmed(path)
    if not path or ".." in path.split("/"):
        return None
    return f"file:/{path}"
