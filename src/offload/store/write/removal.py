"""Removing an entry inside a write transaction: its tombstone, its rows, its index rows,
and its blocks once no entry uses them.

What forget, expiry and doctor's repairs run (life/lifecycle.py, life/maintenance.py), and
what a put runs when the entry it repeats has expired (write/writes.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from offload.errors import IntegrityError, InvalidInput
from offload.store.backend import Conn, Sql
from offload.store.schema import hexed
from offload.store.write import blocks, index, meta, rows, tombstones


class Clocked(Protocol):
    """What removing uses of the store: its clock (the tombstone's time)."""

    clock: Callable[[], float]


def delete(store: Clocked, conn: Conn, entry_id: int, reason: str) -> None:
    """Tombstone and remove one entry, then its blocks once unused (in the caller's transaction)."""
    row = conn.execute(Sql("SELECT * FROM entries WHERE id = ?"), (entry_id,)).fetchone()
    if row is None:
        return
    labels = rows.labels(conn, entry_id)
    tombstones.bury(conn, row, labels, reason, store.clock())
    conn.execute(Sql("DELETE FROM labels WHERE entry_id = ?"), (entry_id,))
    meta.remove_meta(conn, entry_id)
    conn.execute(Sql("DELETE FROM entries WHERE id = ?"), (entry_id,))
    for digest in {hexed(row["block_hash"]), hexed(row["content_hash"])}:
        drop_block_if_unused(conn, digest)


def drop_block_if_unused(conn: Conn, digest: str) -> None:
    """Remove a block and its index rows when no entry refers to it (caller's transaction)."""
    used = conn.execute(
        Sql(
            "SELECT 1 FROM entries WHERE content_hash = unhex(?) "
            "OR (block_hash = unhex(?) AND block_hash != content_hash) LIMIT 1",
            "SELECT 1 FROM entries WHERE block_hash = %s OR content_hash = %s LIMIT 1",
        ),
        (digest, digest),
    ).fetchone()
    if used:
        return
    row = conn.execute(
        Sql(
            "SELECT id, codec, CAST(data AS BLOB) AS data FROM blocks WHERE hash = unhex(?)",
            "SELECT id, codec, data AS data FROM blocks WHERE hash = %s",
        ),
        (digest,),
    ).fetchone()
    if row is None:
        return
    try:
        text: str | None = blocks.unpack(digest, row["codec"], bytes(row["data"]))
    except (InvalidInput, IntegrityError):
        text = None  # a corrupt block cannot be un-indexed exactly; doctor rebuilds
    _unindex_block(conn, int(row["id"]), text)
    conn.execute(Sql("DELETE FROM blocks WHERE id = ?"), (row["id"],))


def _unindex_block(conn: Conn, block_id: int, text: str | None) -> None:
    index.remove_block(conn, block_id, text)
