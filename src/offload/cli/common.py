"""Helpers shared by CLI commands: opening the store, choosing a scope, printing."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import logging
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from offload.config import Settings
from offload.core.untrusted import printable
from offload.core.urls import redact_url
from offload.errors import AddressInUse, NotAFile
from offload.llm.embedding import load_embedder
from offload.store import Store
from offload.store.paths import default_scope
from offload.store.postgres.pgconn import is_postgres
from offload.store.sqlite import db


def open_store(settings: Settings, *, serving: bool = False, existing: bool = False) -> Store:
    """Open the store the settings name, resetting entries left hot by dead processes.

    Hybrid search by default: the embedding model is handed to the store (it loads on the
    first write or search); without it search is lexical, with a one-line notice.
    ``serving``: a long-running process, which keeps the search index in memory
    (search.resident_mb); a one-shot command would build it for a single search.
    ``existing``: a command that reads what is stored, which never creates a store: a
    SQLite store not there yet (a mistyped ``--home``) is NotAFile naming its path.
    """
    if existing:
        check_store_exists(settings)
    if not settings.store.url:
        steps = db.pending(settings.db_path)
        if steps:  # an upgrade: a large store takes a while, and the command says nothing
            print(
                f"offload: upgrading the store's schema ({len(steps)} "
                f"{'migration' if len(steps) == 1 else 'migrations'}, once; a large store "
                "takes a while)",
                file=sys.stderr,
                flush=True,
            )
    resident = settings.search.resident_mb if serving else 0
    store = Store.open(settings, embedder=load_embedder(settings.search), resident_mb=resident)
    store.reset_stale_hot()
    return store


def store_location(settings: Settings) -> str:
    """Where the settings' store is, safe to show: a PostgreSQL URL without its password,
    else the SQLite file (what ``Store.location`` says once it is open)."""
    url = settings.store.url
    return redact_url(url) if is_postgres(url) else str(settings.db_path)


def check_store_exists(settings: Settings) -> None:
    """Raise NotAFile when the settings name a SQLite store that does not exist yet."""
    try:
        if is_postgres(settings.store.url) or settings.db_path.exists():
            return
    except OSError:
        return  # a name the system refuses (too long): opening it says why
    where = printable(str(settings.db_path)[:200])
    raise NotAFile(
        f"no store at {where}: nothing has been stored there yet (`offload add` creates it; "
        "--home or OFFLOAD_HOME names another store directory)"
    )


def scope_name(text: str) -> str:
    """An argparse type: a ``--scope`` value, which must name a scope (not be blank)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "needs a scope's name (leave --scope out for the project's own scope)"
        )
    return text


def add_scope_args(parser: argparse.ArgumentParser, *, every: bool = True) -> None:
    """``--scope NAME`` / ``--all-scopes`` (default: the project the cwd is in), one or
    the other; ``every`` False: ``--scope`` only (a new entry goes into one scope)."""
    group = parser.add_mutually_exclusive_group() if every else parser
    group.add_argument(
        "--scope",
        type=scope_name,
        help="scope name (default: [mcp] scope, else the git root of the cwd)",
    )
    if every:
        group.add_argument("--all-scopes", action="store_true", help="every scope")


def add_root_arg(parser: argparse.ArgumentParser) -> None:
    """``--root DIR`` (repeatable): the directories the MCP tools may read."""
    parser.add_argument(
        "--root",
        action="append",
        default=[],
        metavar="DIR",
        help="a directory offload_path may read (repeatable; default: the project root)",
    )


def scope_of(
    args: argparse.Namespace, settings: Settings, *, for_write: bool = False
) -> str | None:
    """The scope a command acts on; None means every scope (reads only). The default is the
    MCP server's own (:func:`default_scope`: ``mcp.scope``, else the cwd's project)."""
    if getattr(args, "scope", None):
        return str(args.scope)
    if not for_write and getattr(args, "all_scopes", False):
        return None
    return default_scope(settings, Path.cwd())


def emit(args: argparse.Namespace, data: Any, render: Callable[[Any], str]) -> None:
    """Print ``data`` as JSON with ``--json``, else as ``render(data)`` with every control
    character but newline and tab shown escaped (topics and summaries come from stored
    bodies: no terminal escape sequence gets through)."""
    if getattr(args, "json", False):
        json.dump(data, sys.stdout, ensure_ascii=False, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        text = printable(render(data))
        if text:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _not_a_shutdown_cancel(record: logging.LogRecord) -> bool:
    """False for uvicorn's "Exception in ASGI application" about a request it cancelled
    itself when the shutdown grace ran out: a stop asked for, not a failure to show as a
    traceback (uvicorn says "Cancel N running task(s)" just before)."""
    exc = record.exc_info[1] if record.exc_info else None
    return not isinstance(exc, asyncio.CancelledError)


def quiet_shutdown_cancels() -> None:
    """Keep the traceback of each stream a server cancels on Ctrl-C out of its log."""
    uvicorn_error = logging.getLogger("uvicorn.error")
    if _not_a_shutdown_cancel not in uvicorn_error.filters:
        uvicorn_error.addFilter(_not_a_shutdown_cancel)


def server_logging(args: argparse.Namespace) -> str:
    """Log on stderr at ``--log-level`` (info by default) for a long-running server, and
    return the level. Below debug, httpx's line per request stays out: the proxy's
    upstream calls (``/props`` refreshed each minute, ``/tokenize``) would fill the log."""
    level = str(getattr(args, "log_level", "info")).upper()
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.NOTSET if level == "DEBUG" else logging.WARNING)
    quiet_shutdown_cancels()
    return level


def listen_on(host: str, port: int, setting: str) -> socket.socket | None:
    """Bind and listen on ``host:port`` now, before anything starts, and hand back the
    socket for the server to serve on; a port already taken is refused in one line (exit 7).
    Holding the socket from here on means no other process (a second ``offload serve``
    started at the same moment) can take the port while this one is still starting, which
    a probe that let go of it allowed: the loser then met uvicorn's own bind error and exit
    code 3. SO_REUSEADDR as uvicorn sets it, so a port left in TIME_WAIT by a previous run
    still counts as free. Port 0 (the system picks one) is left to the server: None."""
    if port == 0:
        return None
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise AddressInUse(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)  # uvicorn's backlog; listening is what keeps others off the port
    except OSError as exc:
        sock.close()
        held = " (another process holds it)" if exc.errno == errno.EADDRINUSE else ""
        raise AddressInUse(
            f"cannot listen on {host}:{port}: {exc.strerror}{held}; "
            f"choose another with --port or the setting {setting}"
        ) from exc
    return sock


@contextlib.contextmanager
def held_port(
    host: str, port: int, setting: str, *, hold: bool = True
) -> Iterator[socket.socket | None]:
    """:func:`listen_on` for the ``with`` block (nothing when not ``hold``: a server
    without a port), the socket closed on the way out."""
    sock = listen_on(host, port, setting) if hold else None
    try:
        yield sock
    finally:
        if sock is not None:
            sock.close()
