"""Durable counters and small JSON state (proxy sessions, snapshots, gateway runs).

Every saved value carries a version, raised by one in the statement that writes it: a
process that caches a value (the proxy's sessions) checks that the store still holds the
version it read or wrote, and reloads it when another process (another machine on a team
store) wrote since. A value computed from the one read is saved with :func:`replace` (compare
and swap on the version), so a writer that read a superseded value never overwrites the
newer one. A key never written has version 0.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from offload.store import db
from offload.store.backend import Conn


def next_number(conn: Conn, name: str) -> int:
    """The next value of a durable counter, never reused, also across restarts."""
    with db.write_tx(conn):
        row = conn.execute(
            "INSERT INTO counters (name, value) VALUES (?, 1) "
            "ON CONFLICT(name) DO UPDATE SET value = value + 1 RETURNING value",
            (name,),
        ).fetchone()
        return int(row[0])


def get(conn: Conn, namespace: str, key: str) -> Any:
    """A saved JSON value, or None."""
    row = conn.execute(
        "SELECT value FROM state WHERE namespace = ? AND key = ?", (namespace, key)
    ).fetchone()
    return None if row is None else json.loads(row[0])


def get_versioned(conn: Conn, namespace: str, key: str) -> tuple[Any, int]:
    """A saved JSON value and its version; (None, 0) when none is saved."""
    row = conn.execute(
        "SELECT value, version FROM state WHERE namespace = ? AND key = ?", (namespace, key)
    ).fetchone()
    return (None, 0) if row is None else (json.loads(row[0]), int(row[1]))


def version(conn: Conn, namespace: str, key: str) -> int:
    """The version of a saved value (0: none is saved); one indexed read, nothing parsed."""
    row = conn.execute(
        "SELECT version FROM state WHERE namespace = ? AND key = ?", (namespace, key)
    ).fetchone()
    return 0 if row is None else int(row[0])


_UPSERT = (
    "INSERT INTO state (namespace, key, value, updated, version) VALUES (?, ?, ?, ?, 1) "
    "ON CONFLICT(namespace, key) DO UPDATE SET value = excluded.value, "
    "updated = excluded.updated, version = state.version + 1 RETURNING version"
)


def put(conn: Conn, namespace: str, key: str, value: Any, now: float) -> int:
    """Save a JSON-serialisable value, replacing any old one; the version it now has."""
    return put_many(conn, namespace, [(key, value)], now)[0]


def put_many(
    conn: Conn, namespace: str, values: Sequence[tuple[str, Any]], now: float
) -> list[int]:
    """:func:`put` of each (key, value) in one write transaction (one commit for all);
    the versions they now have, in order."""
    with db.write_tx(conn):
        return [
            int(conn.execute(_UPSERT, (namespace, key, _text(value), now)).fetchone()[0])
            for key, value in values
        ]


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def replace(conn: Conn, namespace: str, key: str, value: Any, now: float, expected: int) -> int:
    """Save ``value`` only if the store still holds version ``expected`` of (namespace, key)
    (0: nothing saved yet); the version it now has, or 0 when another writer got there
    first (nothing changed then: the caller reads the newer value and decides again).

    One conditional statement, so of two writers that read one version exactly one wins on
    either backend (PostgreSQL re-checks the condition on the row another transaction
    committed): a read-modify-write cannot lose the other's update.
    """
    text = _text(value)
    with db.write_tx(conn):
        if expected == 0:
            row = conn.execute(
                "INSERT INTO state (namespace, key, value, updated, version) "
                "VALUES (?, ?, ?, ?, 1) ON CONFLICT(namespace, key) DO NOTHING RETURNING version",
                (namespace, key, text, now),
            ).fetchone()
        else:
            row = conn.execute(
                "UPDATE state SET value = ?, updated = ?, version = version + 1 "
                "WHERE namespace = ? AND key = ? AND version = ? RETURNING version",
                (text, now, namespace, key, expected),
            ).fetchone()
        return 0 if row is None else int(row[0])


def items(conn: Conn, namespace: str) -> Iterator[tuple[str, Any]]:
    """Every (key, value) saved in ``namespace``, by key."""
    rows = conn.execute(
        "SELECT key, value FROM state WHERE namespace = ? ORDER BY key", (namespace,)
    ).fetchall()
    for row in rows:
        yield row[0], json.loads(row[1])


def delete(conn: Conn, namespace: str, key: str) -> bool:
    """Remove one saved value; True when it existed."""
    with db.write_tx(conn):
        cur = conn.execute("DELETE FROM state WHERE namespace = ? AND key = ?", (namespace, key))
        return cur.rowcount > 0
