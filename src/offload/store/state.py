"""Durable counters and small JSON state (proxy sessions, snapshots, gateway runs)."""

from __future__ import annotations

import json
from collections.abc import Iterator
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


def put(conn: Conn, namespace: str, key: str, value: Any, now: float) -> None:
    """Save a JSON-serialisable value, replacing any old one."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    with db.write_tx(conn):
        conn.execute(
            "INSERT INTO state (namespace, key, value, updated) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(namespace, key) DO UPDATE SET value = excluded.value, "
            "updated = excluded.updated",
            (namespace, key, text, now),
        )


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
