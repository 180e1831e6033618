"""Tombstones: what a forgotten or expired entry leaves behind, so its references say why."""

from __future__ import annotations

from offload.core.refs import ParsedRef
from offload.store.backend import Conn, Row, Sql
from offload.store.models import Tombstone
from offload.store.schema import hexed


def bury(conn: Conn, row: Row, labels: tuple[str, ...], reason: str, now: float) -> None:
    """Record why the entry in ``row`` is going (inside the caller's transaction)."""
    cur = conn.execute(
        Sql(
            "INSERT INTO tombstones (entry_id, content_hash, labels, topic, source, scope, "
            "reason, gone, regenerate) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                "INSERT INTO tombstones (entry_id, content_hash, labels, topic, source, "
                "scope, reason, gone, regenerate) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
                "RETURNING id"
            ),
            returns_id=True,
        ),
        (
            row["id"],
            hexed(row["content_hash"]),
            " ".join(labels),
            row["topic"],
            row["source"],
            row["scope"],
            reason,
            now,
            row["regenerate"],
        ),
    )
    conn.executemany(
        Sql(
            "INSERT INTO tombstone_labels (label, tombstone_id) VALUES (?, ?) "
            "ON CONFLICT(label) DO UPDATE SET tombstone_id = excluded.tombstone_id"
        ),
        [(label, cur.lastrowid) for label in labels],
    )


def lookup(conn: Conn, parsed: ParsedRef) -> Tombstone | None:
    """The latest tombstone matching a reference, if any."""
    if parsed.kind == "id":
        row = conn.execute(
            Sql("SELECT * FROM tombstones WHERE entry_id = ? ORDER BY gone DESC LIMIT 1"),
            (parsed.entry_id,),
        ).fetchone()
    elif parsed.kind in ("hash", "prefix"):
        row = conn.execute(
            Sql(
                "SELECT * FROM tombstones WHERE content_hash >= ? AND content_hash < ? "
                "ORDER BY gone DESC LIMIT 1"
            ),
            (parsed.value, parsed.value + "g"),  # 'g' sorts after every hex digit
        ).fetchone()
        if row is None and not parsed.raw.lower().startswith("ctx:"):
            row = _by_label(conn, parsed.raw)
    else:
        row = _by_label(conn, parsed.raw)
    if row is None:
        return None
    return Tombstone(
        entry_id=row["entry_id"],
        content_hash=row["content_hash"],
        labels=tuple(x for x in row["labels"].split(" ") if x),
        topic=row["topic"],
        source=row["source"],
        reason=row["reason"],
        gone=row["gone"],
        regenerate=row["regenerate"],
        scope=row["scope"],
    )


def _by_label(conn: Conn, label: str) -> Row | None:
    row: Row | None = conn.execute(
        Sql(
            "SELECT t.* FROM tombstones t JOIN tombstone_labels tl ON tl.tombstone_id = t.id "
            "WHERE tl.label = ?"
        ),
        (label,),
    ).fetchone()
    return row
