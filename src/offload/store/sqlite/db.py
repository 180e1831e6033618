"""Opening the SQLite database, its write transactions and running its migrations.

The migrations themselves are in store/sqlite/migrations.py; they are recorded in
``_migrations`` and each runs inside one transaction, so a crash mid-migration leaves the
previous schema.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from offload.errors import StoreBusy, StoreError
from offload.store import schema
from offload.store.backend import Sql
from offload.store.sqlite.migrations import MIGRATIONS

if TYPE_CHECKING:
    from offload.store.backend import Conn

T = TypeVar("T")
C = TypeVar("C", bound="Conn")  # a sqlite3 connection, or pgconn.PgConn

# a write transaction's statements (PostgreSQL's connection runs them as its own: a BEGIN
# takes the store's write lock there, see PgConn)
BEGIN = Sql("BEGIN IMMEDIATE", "BEGIN")
COMMIT = Sql("COMMIT")
ROLLBACK = Sql("ROLLBACK")


# what SQLite raises about the database file itself (a damaged page, a file that is not a
# database, a failed disk), past the busy and full-disk errors the store turns into its own
DATABASE_ERRORS: tuple[type[Exception], ...] = (sqlite3.DatabaseError,)
DAMAGE_WORDS = ("not a database", "malformed", "corrupt")


def database_failure(path: Path, exc: Exception) -> StoreError:
    """One line for an error of :data:`DATABASE_ERRORS` on the store at ``path``: what it
    is and, for a damaged file, what to do (offload cannot read it back)."""
    text = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
    if any(word in text.lower() for word in DAMAGE_WORDS):
        return StoreError(
            f"the store file {path} is damaged ({text}); move it aside (offload then starts "
            "an empty store there) and load your last `offload export` with `offload import FILE`"
        )
    return StoreError(f"the store at {path} failed: {text}")


def connect(path: Path, *, busy_timeout_s: float, synchronous: str) -> sqlite3.Connection:
    """Open a connection with offload's pragmas (WAL, busy timeout, foreign keys)."""
    if synchronous.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
        raise StoreError(f"unknown synchronous mode {synchronous!r}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            str(path), timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
        )
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"cannot open store at {path}: {exc}") from exc
    conn.row_factory = sqlite3.Row
    # SQLite 3.41's unhex (older ones lack it): hashes are stored as bytes (store/schema.py)
    conn.create_function("unhex", 1, unhex, deterministic=True)
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")

    def set_up() -> str:
        # must precede the first table: lets close() hand pages freed by index merges back
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])

    # A fresh file is still in rollback mode while another process creates it: these
    # pragmas can then meet its lock (even without the busy handler being asked).
    try:
        mode = retry_busy(set_up, busy_timeout_s)
    except DATABASE_ERRORS as exc:  # the file is not a database (or a damaged one)
        conn.close()
        raise database_failure(path, exc) from None
    if str(mode).lower() != "wal":
        raise StoreError(f"store at {path} could not switch to WAL (got {mode})")
    conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


_HEX_DIGITS = re.compile(r"[0-9a-fA-F]*")


def unhex(text: object) -> bytes | None:
    """SQL ``unhex(x)``: the bytes a string of hex digits spells, NULL for anything else
    (as SQLite's own, which a connection's function of the same name replaces)."""
    # bytes.fromhex also skips whitespace ("ab cd", a line end): not a hex digit, so NULL
    if not isinstance(text, str) or _HEX_DIGITS.fullmatch(text) is None:
        return None
    try:
        return bytes.fromhex(text)
    except ValueError:  # an odd count of digits
        return None


@contextmanager
def busy_guard() -> Iterator[None]:
    """Turn SQLite's locked/busy/full errors into offload errors."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        text = str(exc)
        if "locked" in text or "busy" in text:
            raise StoreBusy(f"store is busy ({text}); another process holds a write lock") from exc
        if "full" in text or "disk I/O" in text:
            raise StoreError(f"store write failed: {text}; nothing was saved") from exc
        raise


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def retry_busy(fn: Callable[[], T], timeout_s: float) -> T:
    """``fn()``, tried again while SQLite answers busy/locked, for up to ``timeout_s``;
    then :class:`StoreBusy`. SQLite gives up at once rather than wait when waiting could
    deadlock (two connections upgrading their locks), so its busy timeout alone is not
    enough for work that may meet another process's first migration."""
    deadline = time.monotonic() + timeout_s
    pause = 0.005
    while True:
        try:
            with busy_guard():
                return fn()
        except StoreBusy:
            if time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)  # back off, then try again
        pause = min(pause * 2, 0.25)


@contextmanager
def write_tx(
    conn: C,
    keys: Iterable[str] | None = None,
    then: Sequence[tuple[Sql, Any]] = (),
    *,
    state: tuple[Sequence[str], Sequence[str] | None] | None = None,
) -> Iterator[C]:
    """One write transaction (BEGIN IMMEDIATE): all of it commits, or none of it.

    SQLite errors inside become offload errors (``busy_guard``). SQLite itself rolls
    back on some errors (a full disk during a large write): the ROLLBACK is then skipped,
    so the original error is the one reported.

    ``keys`` (puts only) name everything the transaction reads and then writes: on
    PostgreSQL it then runs beside other puts that share none of them
    (``PgConn.begin_keyed``); SQLite serialises every writer anyway. ``then``: the
    transaction's first statements, (sql, parameters) each, run right after the BEGIN;
    PostgreSQL sends them with it (and a put's locks) in one round trip and keeps the
    rows of each read to answer the same statement once, until another runs
    (``PgConn.begin_keyed``).

    ``state``: ([namespace], keys) of saved state the transaction writes and nothing else
    (store/state.py); on PostgreSQL it then waits only for writers of the same keys, not
    behind the store lock a bulk load holds (``PgConn.begin_state``; keys None: the whole
    of each namespace).
    """
    begin_keyed = getattr(conn, "begin_keyed", None) if keys is not None else None
    begin_state = getattr(conn, "begin_state", None) if state is not None else None
    with busy_guard():
        if begin_keyed is not None and keys is not None:
            begin_keyed(keys, then)
        elif begin_state is not None and state is not None:
            begin_state(*state)
            for sql, params in then:
                conn.execute(sql, params)
        else:
            conn.execute(BEGIN)
            for sql, params in then:
                conn.execute(sql, params)
    try:
        with busy_guard():
            yield conn
    except BaseException:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # the error being raised says more
                conn.execute(ROLLBACK)
        raise
    else:
        with busy_guard():
            conn.execute(COMMIT)


def pending(path: Path) -> list[str]:
    """The migrations an existing store at ``path`` has not recorded yet, read without a
    lock and without creating anything; [] for a file that is not there, not a store yet
    (a fresh one is made, not upgraded) or not readable."""
    try:  # a name too long, a directory not readable: the open itself then says why
        if not path.is_file():
            return []
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=1.0)
    except (OSError, ValueError, sqlite3.Error):
        return []
    try:
        done = {row[0] for row in conn.execute("SELECT name FROM _migrations")}
    except sqlite3.Error:  # no _migrations table: not a store yet (or not a database)
        return []
    finally:
        conn.close()
    return [name for name, _ in MIGRATIONS if name not in done] if done else []


def migrate(conn: sqlite3.Connection, busy_timeout_s: float = 15.0) -> list[str]:
    """Apply every pending migration; returns the names applied. Several processes may
    open a fresh store at once: a busy answer is retried (``retry_busy``)."""
    return retry_busy(lambda: _migrate(conn), busy_timeout_s)


def _migrate(conn: sqlite3.Connection) -> list[str]:
    applied: list[str] = []
    with write_tx(conn):
        conn.execute(
            "CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied REAL NOT NULL)"
        )
        done = {row[0] for row in conn.execute("SELECT name FROM _migrations")}
        newer = schema.newer_schema(_where(conn), done, [name for name, _ in MIGRATIONS])
        if newer is not None:
            raise StoreError(newer)
        for name, fn in MIGRATIONS:
            if name in done:
                continue
            fn(conn)
            conn.execute("INSERT INTO _migrations VALUES (?, ?)", (name, time.time()))
            applied.append(name)
    return applied


def _where(conn: sqlite3.Connection) -> str:
    """The file of the connection's main database (for a message)."""
    row = conn.execute("PRAGMA database_list").fetchone()
    return str(row[2]) if row is not None and row[2] else "(in memory)"
