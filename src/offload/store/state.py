"""Durable counters and small JSON state (proxy sessions, snapshots, gateway runs).

Every saved value carries a version, raised by one in the statement that writes it: a
process that caches a value (the proxy's sessions) checks that the store still holds the
version it read or wrote, and reloads it when another process (another machine on a team
store) wrote since. A value computed from the one read is saved with :func:`replace` (compare
and swap on the version), so a writer that read a superseded value never overwrites the
newer one. A key never written has version 0.

A key's versions never repeat, deletion included: deleting a value is a write too (its
version, one above the value's, is kept in ``state_retired``), and a value saved again after
it starts above that. Were a recreated key to start at 1 again, a writer that read version 1
before the deletion could overwrite the new value (an ABA case).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from offload.errors import StoreError
from offload.store.backend import Conn, Sql
from offload.store.sqlite import db

#: A durable counter's bound: far past any count a store reaches, and still exact as a
#: float. A counter set past it (by hand, or by an archive before imports checked it) would
#: overflow SQLite's integers into a float that ``+ 1`` no longer moves: the same value
#: again, so a label made from it would name two things.
COUNTER_MAX = 2**53


def next_number(conn: Conn, name: str) -> int:
    """The next value of a durable counter, never reused, also across restarts;
    :class:`StoreError` once it would pass :data:`COUNTER_MAX` (nothing changes then)."""
    with db.write_tx(conn):
        row = conn.execute(
            Sql(
                "INSERT INTO counters (name, value) VALUES (?, 1) "
                "ON CONFLICT(name) DO UPDATE SET value = value + 1 RETURNING value",
                (
                    "INSERT INTO counters (name, value) VALUES (%s, 1) ON CONFLICT(name) DO "
                    "UPDATE SET value = counters.value + 1 RETURNING value"
                ),
            ),
            (name,),
        ).fetchone()
        value = row[0]
        if not isinstance(value, int) or value > COUNTER_MAX:
            raise StoreError(
                f"the store's counter {name!r} is at {value!r}, past what a counter counts "
                f"(up to {COUNTER_MAX}); it was set so outside offload, and nothing was numbered"
            )
        return value


def _value(text: str) -> Any:
    """A saved value's JSON; None when it is not JSON (a row damaged by hand or by another
    program): what is saved here is derived, so its readers start afresh and their next
    write replaces it, where a raise failed every request that read it."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def get(conn: Conn, namespace: str, key: str) -> Any:
    """A saved JSON value, or None."""
    row = conn.execute(
        Sql("SELECT value FROM state WHERE namespace = ? AND key = ?"), (namespace, key)
    ).fetchone()
    return None if row is None else _value(row[0])


def get_versioned(conn: Conn, namespace: str, key: str) -> tuple[Any, int]:
    """A saved JSON value and its version; (None, :func:`version`) when none is saved."""
    row = conn.execute(
        Sql("SELECT value, version FROM state WHERE namespace = ? AND key = ?"), (namespace, key)
    ).fetchone()
    if row is None:
        return None, _retired(conn, namespace, key)
    return _value(row[0]), int(row[1])


def version(conn: Conn, namespace: str, key: str) -> int:
    """The version of a saved value (0: none was ever saved; a deleted one's deletion);
    one indexed read, nothing parsed."""
    row = conn.execute(
        Sql("SELECT version FROM state WHERE namespace = ? AND key = ?"), (namespace, key)
    ).fetchone()
    return _retired(conn, namespace, key) if row is None else int(row[0])


def _retired(conn: Conn, namespace: str, key: str) -> int:
    """The version of a deleted key's deletion (0: never deleted)."""
    row = conn.execute(
        Sql("SELECT version FROM state_retired WHERE namespace = ? AND key = ?"), (namespace, key)
    ).fetchone()
    return 0 if row is None else int(row[0])


# the version a key saved again after a deletion starts at: above its deletion's
_FIRST = (
    "1 + COALESCE((SELECT r.version FROM state_retired r WHERE r.namespace = ? AND r.key = ?), 0)"
)

_UPSERT = Sql(
    f"INSERT INTO state (namespace, key, value, updated, version) VALUES (?, ?, ?, ?, {_FIRST}) "
    "ON CONFLICT(namespace, key) DO UPDATE SET value = excluded.value, "
    "updated = excluded.updated, version = state.version + 1 RETURNING version"
)


def insert_text(conn: Conn, namespace: str, key: str, text: str, updated: float) -> None:
    """Save ``text`` (a value's JSON) under a key not saved yet, inside the caller's write
    transaction (an archive's import); a key saved already keeps its value. A key deleted
    before starts above its deletion's version, as with :func:`put`."""
    conn.execute(
        Sql(
            "INSERT INTO state (namespace, key, value, updated, version) "
            f"VALUES (?, ?, ?, ?, {_FIRST}) ON CONFLICT(namespace, key) DO NOTHING"
        ),
        (namespace, key, text, updated, namespace, key),
    )


def put(conn: Conn, namespace: str, key: str, value: Any, now: float) -> int:
    """Save a JSON-serialisable value, replacing any old one; the version it now has."""
    return put_many(conn, namespace, [(key, value)], now)[0]


def put_many(
    conn: Conn, namespace: str, values: Sequence[tuple[str, Any]], now: float
) -> list[int]:
    """:func:`put` of each (key, value) in one write transaction (one commit for all);
    the versions they now have, in order."""
    with db.write_tx(conn, state=([namespace], [key for key, _ in values])):
        return [
            int(
                conn.execute(
                    _UPSERT, (namespace, key, _text(value), now, namespace, key)
                ).fetchone()[0]
            )
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
    with db.write_tx(conn, state=([namespace], [key])):
        row = None
        if expected > 0:
            row = conn.execute(
                Sql(
                    "UPDATE state SET value = ?, updated = ?, version = version + 1 "
                    "WHERE namespace = ? AND key = ? AND version = ? RETURNING version"
                ),
                (text, now, namespace, key, expected),
            ).fetchone()
        if row is None:  # absent at ``expected``: never saved (0) or deleted at it
            row = conn.execute(
                Sql(
                    "INSERT INTO state (namespace, key, value, updated, version) "
                    f"SELECT ?, ?, ?, ?, {_FIRST} WHERE {_FIRST} = ? + 1 "
                    "ON CONFLICT(namespace, key) DO NOTHING RETURNING version"
                ),
                (namespace, key, text, now, namespace, key, namespace, key, expected),
            ).fetchone()
        return 0 if row is None else int(row[0])


def items(conn: Conn, namespace: str) -> Iterator[tuple[str, Any]]:
    """Every (key, value) saved in ``namespace``, by key."""
    rows = conn.execute(
        Sql("SELECT key, value FROM state WHERE namespace = ? ORDER BY key"), (namespace,)
    ).fetchall()
    for row in rows:
        yield row[0], _value(row[1])


def delete(conn: Conn, namespace: str, key: str) -> bool:
    """Remove one saved value; True when it existed. The deletion takes the next version
    (kept in ``state_retired``), so a writer that read the value can no longer replace it."""
    with db.write_tx(conn, state=([namespace], [key])):
        return _delete(conn, namespace, key)


def _delete(conn: Conn, namespace: str, key: str) -> bool:
    row = conn.execute(
        Sql("DELETE FROM state WHERE namespace = ? AND key = ? RETURNING version"), (namespace, key)
    ).fetchone()
    if row is None:
        return False
    conn.execute(
        Sql(
            "INSERT INTO state_retired (namespace, key, version) VALUES (?, ?, ?) "
            "ON CONFLICT(namespace, key) DO UPDATE SET version = excluded.version"
        ),
        (namespace, key, int(row[0]) + 1),
    )
    return True


def prune(conn: Conn, namespace: str, users: str) -> int:
    """Delete every value of ``namespace`` whose key no value of ``users`` lists (under
    ``"keys"``); how many went. One write transaction: a user saved before it began keeps
    all its keys, so a writer that records its use first never loses what it uses."""
    with db.write_tx(conn, state=([namespace, users], None)):
        live: set[str] = set()
        for _, value in items(conn, users):
            keys = value.get("keys") if isinstance(value, dict) else None
            live.update(k for k in keys or () if isinstance(k, str))
        held = conn.execute(
            Sql("SELECT key FROM state WHERE namespace = ?"), (namespace,)
        ).fetchall()
        gone = [str(r[0]) for r in held if str(r[0]) not in live]
        for key in gone:
            _delete(conn, namespace, key)
        return len(gone)
