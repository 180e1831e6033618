"""Which entries each chunk belongs to, stored (``entry_chunks``) and kept by triggers.

A chunk belongs to a block, and a block to every entry that stores it (the same content in
several scopes is one block) or keeps it as a lossy entry's original. A filtered search
reads the chunks of the entries it keeps, and maps the chunks it scored back to entries:
through ``entries.block_hash`` -> ``blocks.hash`` -> ``chunks.block_id`` that cost ~20 us
per entry at 100k entries (a text key looked up per entry). This table answers both
directions by integer keys: an entry's chunks by its primary key, a chunk's entries by
``entry_chunks_chunk``. ``own`` is 1 for the chunks of the entry's stored body, 0 for
those of a lossy entry's kept original.

Triggers on ``entries`` and ``chunks`` keep it exact inside the transaction of every
change, so no write path (put, put_many, forget, archive and expiry, reindex, doctor's
repairs, import, migrate) has to know about it. SQLite's are row triggers (made by its
migration, store/sqlite/frozen.py); PostgreSQL's chunk triggers are statement triggers over the
transition table (a block's chunks arrive in one statement, store/postgres/pgconn.py).
"""

from __future__ import annotations

from typing import Any

from offload.store.backend import Sql

# every row the map should hold, from the tables it maps (the backfill, and the rebuild)
_ALL_ROWS = (
    "SELECT e.id, c.id, CASE WHEN b.hash = e.block_hash THEN 1 ELSE 0 END FROM entries e "
    "JOIN blocks b ON b.hash IN (e.block_hash, e.content_hash) "
    "JOIN chunks c ON c.block_id = b.id"
)
FILL = Sql(
    f"INSERT OR IGNORE INTO entry_chunks (entry_id, chunk_id, own) {_ALL_ROWS}",
    f"INSERT INTO entry_chunks (entry_id, chunk_id, own) {_ALL_ROWS} ON CONFLICT DO NOTHING",
)


def _differences(expected: str) -> str:
    held = "SELECT entry_id, chunk_id, own FROM entry_chunks"
    return (
        f"SELECT (SELECT count(*) FROM ({expected} EXCEPT {held}) AS a) "
        f"+ (SELECT count(*) FROM ({held} EXCEPT {expected}) AS b)"
    )


# the rows that differ, both ways (PostgreSQL wants the subquery's columns named)
_STALE = Sql(
    _differences(f"SELECT * FROM ({_ALL_ROWS})"),
    _differences(f"SELECT * FROM ({_ALL_ROWS}) AS x(entry_id, chunk_id, own)"),
)


def missing_or_stale(conn: Any) -> int:
    """How many rows the map lacks or holds beyond what the tables say (0: exact)."""
    return int(conn.execute(_STALE).fetchone()[0])


def rebuild(conn: Any) -> None:
    """Refill the map from the tables (inside the caller's write transaction)."""
    conn.execute(Sql("DELETE FROM entry_chunks"))
    conn.execute(FILL)
    # an in-memory copy (store/search/memory/entrymap.py) reads only the rows written since: a refill
    # of an empty map deletes nothing, so its triggers would not tell it
    conn.execute(Sql("UPDATE entry_map_generation SET value = value + 1 WHERE id = 0"))
