"""Additive counters: every write adds, so processes counting the same thing lose nothing.

The gateway's calls per upstream and the proxy's metrics are counted in memory and written
now and then. Writing the totals a process holds would let two processes (two ``offload
serve`` on one PostgreSQL store, or two processes on one SQLite file) overwrite each
other's counts; instead a process adds what it counted since its last write (:func:`add`,
one upsert per counter: ``value = tallies.value + excluded.value``) and reads the sums
back. Rows are ``(namespace, key, name) -> value``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from offload.store import db
from offload.store.backend import Conn

Row = tuple[str, str, str, int]  # namespace, key, name, value

_ADD = (
    "INSERT INTO tallies (namespace, key, name, value) VALUES (?, ?, ?, ?) "
    "ON CONFLICT(namespace, key, name) DO UPDATE SET value = tallies.value + excluded.value"
)
# an archive imported twice must not count twice: importing keeps the larger value
_KEEP_LARGER = (
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
            "SELECT name, value FROM tallies WHERE namespace = ? AND key = ?", (namespace, key)
        ).fetchall()
    return {str(r[0]): int(r[1]) for r in found}


def read(conn: Conn, namespace: str) -> dict[str, dict[str, int]]:
    """Every counter of ``namespace``: key -> name -> value."""
    out: dict[str, dict[str, int]] = {}
    for r in conn.execute(
        "SELECT key, name, value FROM tallies WHERE namespace = ? ORDER BY key, name",
        (namespace,),
    ).fetchall():
        out.setdefault(str(r[0]), {})[str(r[1])] = int(r[2])
    return out


def delete(conn: Conn, namespace: str, key: str) -> bool:
    """Remove every counter of (``namespace``, ``key``); True when there was one."""
    with db.write_tx(conn):
        cur = conn.execute("DELETE FROM tallies WHERE namespace = ? AND key = ?", (namespace, key))
        return cur.rowcount > 0


def rows_all(conn: Conn) -> list[Row]:
    """Every counter as (namespace, key, name, value), in order (archives)."""
    found = conn.execute(
        "SELECT namespace, key, name, value FROM tallies ORDER BY namespace, key, name"
    ).fetchall()
    return [(str(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in found]


def keep_larger(conn: Conn, rows: list[Row]) -> None:
    """Load counters (archives, inside the caller's transaction): a counter already there
    keeps the larger of the two values."""
    if rows:
        conn.executemany(_KEEP_LARGER, sorted(rows))


# -- the counters as they were saved before (JSON values of the state table) ---------------
# Frozen: the migrations (store/db.py m_additive_tallies, store/pgschema.py
# pg_additive_tallies) and imports of older archives read these shapes, whatever the
# surfaces write today.

LEGACY_NAMESPACES = ("gateway-usage", "proxy.metrics")


def legacy(namespace: str, key: str, text: str) -> tuple[list[Row], str | None] | None:
    """The counters a state value of the old shape held and what stays of the value (its
    JSON text, None when nothing does: the row goes); None for any other value.

    ``gateway-usage``/``calls`` was ``{upstream: calls}``; ``proxy.metrics`` values
    (``totals``, ``session:<id>``) held ``counters`` and ``breaks`` (by cause, counted as
    ``break:<cause>``) beside a session's other fields.
    """
    if namespace not in LEGACY_NAMESPACES:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    counts: dict[str, Any]
    rest: dict[str, Any] | None
    if namespace == "gateway-usage":
        counts, rest = value, None
    else:
        counts = dict(value.get("counters") or {})
        counts.update({f"break:{k}": v for k, v in (value.get("breaks") or {}).items()})
        rest = {k: v for k, v in value.items() if k not in ("counters", "breaks")}
        if key == "totals" or not rest:
            rest = None
    rows = [
        (namespace, key, str(name), int(n))
        for name, n in counts.items()
        if isinstance(n, int) and not isinstance(n, bool) and n
    ]
    kept = None if rest is None else json.dumps(rest, sort_keys=True, ensure_ascii=False)
    return rows, kept


def move_legacy(
    execute: Callable[[str, tuple[Any, ...]], object],
    found: Iterable[tuple[str, str, str]],
    mark: str,
) -> None:
    """Move the old-shape state values ``found`` (namespace, key, JSON text) into tallies,
    keeping in state what else they held: the migrations of both backends, whose
    parameter ``mark`` differs (``?`` on SQLite, ``%s`` on PostgreSQL)."""
    for namespace, key, text in found:
        moved = legacy(namespace, key, text)
        if moved is None:
            continue
        rows, kept = moved
        for row in rows:
            execute(f"INSERT INTO tallies VALUES ({mark}, {mark}, {mark}, {mark})", row)
        where = f"WHERE namespace = {mark} AND key = {mark}"
        if kept is None:
            execute(f"DELETE FROM state {where}", (namespace, key))
        else:
            execute(f"UPDATE state SET value = {mark} {where}", (kept, namespace, key))
