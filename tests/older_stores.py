"""Stores as an older offload left them, for tests of the migrations that open them."""

from __future__ import annotations

import sqlite3

from offload.store.backend import Conn, Sql


def hashes_as_hex(conn: Conn) -> None:
    """Keep a SQLite store's hashes as the 64 hex characters offload wrote before
    migration ``m_hashes_as_bytes`` (which then runs again on the next open): a test that
    re-runs an older migration gives it the hashes that migration was written for."""
    assert isinstance(conn, sqlite3.Connection)
    own = not conn.in_transaction
    if own:
        conn.execute(Sql("BEGIN"))
    conn.execute(Sql("PRAGMA defer_foreign_keys = ON"))
    for trigger in ("blocks_hash_bytes", "blocks_hash_bytes_changed"):
        conn.execute(Sql(f"DROP TRIGGER IF EXISTS {trigger}"))
    for trigger in ("entries_hash_bytes", "entries_hash_bytes_changed"):
        conn.execute(Sql(f"DROP TRIGGER IF EXISTS {trigger}"))
    conn.execute(Sql("UPDATE blocks SET hash = lower(hex(hash)) WHERE typeof(hash) = 'blob'"))
    conn.execute(
        Sql(
            "UPDATE entries SET content_hash = lower(hex(content_hash)), "
            "block_hash = lower(hex(block_hash)) WHERE typeof(content_hash) = 'blob'"
        )
    )
    conn.execute(Sql("DELETE FROM _migrations WHERE name = 'm_hashes_as_bytes'"))
    if own:
        conn.execute(Sql("COMMIT"))
