"""Stores as an older offload left them, for tests of the migrations that open them."""

from __future__ import annotations

import sqlite3

from offload.store.backend import Conn, Sql


def hashes_as_hex(conn: Conn) -> None:
    """Keep a SQLite store's hashes as the 64 hex characters offload wrote before
    migration ``m_hashes_as_bytes`` (which then runs again on the next open): a test that
    re-runs an older migration gives it the hashes that migration was written for."""
    assert isinstance(conn, sqlite3.Connection)
    block_hash_stored(conn)
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


def block_hash_stored(conn: Conn) -> None:
    """Keep every entry's block hash in its row, as offload did before migration
    ``m_entry_block_hash_lossy_only`` (which then runs again on the next open): for a test
    that re-runs an older migration on the entries' columns."""
    assert isinstance(conn, sqlite3.Connection)
    if "block_own" not in {r[1] for r in conn.execute(Sql("PRAGMA table_info(entries)"))}:
        return
    own = not conn.in_transaction
    if own:
        conn.execute(Sql("BEGIN"))
    named = conn.execute(
        Sql("SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' AND sql LIKE '%block_%'")
    ).fetchall()
    for name, _ in named:
        conn.execute(Sql(f'DROP TRIGGER "{name}"'))
    conn.execute(Sql("DROP INDEX IF EXISTS entries_block"))
    conn.execute(Sql("ALTER TABLE entries DROP COLUMN block_hash"))
    conn.execute(Sql("UPDATE entries SET block_own = coalesce(block_own, content_hash)"))
    conn.execute(Sql("ALTER TABLE entries RENAME COLUMN block_own TO block_hash"))
    declared = conn.execute(
        Sql("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'entries'")
    ).fetchone()[0]
    version = int(conn.execute(Sql("PRAGMA schema_version")).fetchone()[0])
    conn.execute(Sql("PRAGMA writable_schema = ON"))
    conn.execute(
        Sql("UPDATE sqlite_schema SET sql = ? WHERE type = 'table' AND name = 'entries'"),
        (str(declared).replace("block_hash TEXT,", "block_hash TEXT NOT NULL,", 1),),
    )
    conn.execute(Sql(f"PRAGMA schema_version = {version + 1}"))
    conn.execute(Sql("PRAGMA writable_schema = OFF"))
    conn.execute(
        Sql("CREATE INDEX entries_block ON entries(block_hash) WHERE block_hash != content_hash")
    )
    for _, sql in named:
        conn.execute(Sql(str(sql).replace("block_own", "block_hash")))
    conn.execute(Sql("DELETE FROM _migrations WHERE name = 'm_entry_block_hash_lossy_only'"))
    if own:
        conn.execute(Sql("COMMIT"))
