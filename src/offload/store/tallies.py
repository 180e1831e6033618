"""Additive counters: every write adds, so processes counting the same thing lose nothing.

The gateway's calls per upstream and the proxy's metrics are counted in memory and written
now and then. Writing the totals a process holds would let two processes (two ``offload
serve`` on one PostgreSQL store, or two processes on one SQLite file) overwrite each
other's counts; instead a process adds what it counted since its last write (:func:`add`,
one upsert per counter: ``value = tallies.value + excluded.value``) and reads the sums
back. Rows are ``(namespace, key, name) -> value``.
"""

from __future__ import annotations

from collections.abc import Mapping

from offload.store.backend import Conn, Sql

# the counters as they were saved before (state's JSON values), read by imports of older
# archives (and the migrations): frozen in their own module
from offload.store.legacy_tallies import Row as Row
from offload.store.legacy_tallies import legacy as legacy
from offload.store.sqlite import db

_ADD = Sql(
    "INSERT INTO tallies (namespace, key, name, value) VALUES (?, ?, ?, ?) "
    "ON CONFLICT(namespace, key, name) DO UPDATE SET value = tallies.value + excluded.value"
)
# an archive imported twice must not count twice: importing keeps the larger value
_KEEP_LARGER = Sql(
    "INSERT INTO tallies (namespace, key, name, value) VALUES (?, ?, ?, ?) "
    "ON CONFLICT(namespace, key, name) DO UPDATE SET value = CASE "
    "WHEN excluded.value > tallies.value THEN excluded.value ELSE tallies.value END"
)


def add(conn: Conn, namespace: str, key: str, amounts: Mapping[str, int]) -> dict[str, int]:
    """Add ``amounts`` (counter name -> how much; zeros skipped) to the counters of
    (``namespace``, ``key``) in one transaction; every counter of that key after it."""
    rows = [(namespace, key, name, int(n)) for name, n in sorted(amounts.items()) if n]
    with db.write_tx(conn):
        if rows:  # sorted: concurrent writers take the rows' locks in one order
            conn.executemany(_ADD, rows)
        found = conn.execute(
            Sql("SELECT name, value FROM tallies WHERE namespace = ? AND key = ?"), (namespace, key)
        ).fetchall()
    return {str(r[0]): int(r[1]) for r in found}


def read(conn: Conn, namespace: str) -> dict[str, dict[str, int]]:
    """Every counter of ``namespace``: key -> name -> value."""
    out: dict[str, dict[str, int]] = {}
    for r in conn.execute(
        Sql("SELECT key, name, value FROM tallies WHERE namespace = ? ORDER BY key, name"),
        (namespace,),
    ).fetchall():
        out.setdefault(str(r[0]), {})[str(r[1])] = int(r[2])
    return out


def delete(conn: Conn, namespace: str, key: str) -> bool:
    """Remove every counter of (``namespace``, ``key``); True when there was one."""
    with db.write_tx(conn):
        cur = conn.execute(
            Sql("DELETE FROM tallies WHERE namespace = ? AND key = ?"), (namespace, key)
        )
        return cur.rowcount > 0


def rows_all(conn: Conn) -> list[Row]:
    """Every counter as (namespace, key, name, value), in order (archives)."""
    found = conn.execute(
        Sql("SELECT namespace, key, name, value FROM tallies ORDER BY namespace, key, name")
    ).fetchall()
    return [(str(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in found]


def keep_larger(conn: Conn, rows: list[Row]) -> None:
    """Load counters (archives, inside the caller's transaction): a counter already there
    keeps the larger of the two values."""
    if rows:
        conn.executemany(_KEEP_LARGER, sorted(rows))
