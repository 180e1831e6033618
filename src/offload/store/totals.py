"""The whole store's totals for its figures (``Store.stats``): blocks, their bytes before and
after compression, tombstones, and the size on disk.

Counting blocks and summing their bytes takes a pass over every block, which a dashboard
polling a large store would pay on every poll. :class:`Totals` reads them again only when
the entries' counts or the newest block changed since the last reading (every block stored
or removed comes with an entry's), or after :data:`STATS_TTL_S`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from offload.store.backend import Conn, Sql

# read again after this long even when nothing watched changed (an entry moved to a block
# already stored, its counts unchanged)
STATS_TTL_S = 30.0


class Totals:
    """The blocks' and tombstones' totals with what they were read at (one tuple, replaced
    whole, so threads may share it)."""

    def __init__(self) -> None:
        self._held: tuple[tuple[int, ...], float, dict[str, int]] | None = None

    def read(self, conn: Conn, peek: dict[str, Any]) -> dict[str, int]:
        """``blocks``, ``raw_bytes``, ``stored_bytes``, ``tombstones``; ``peek``: the
        store's entry counts now (``Store.peek``)."""
        top = conn.execute(Sql("SELECT coalesce(max(id), 0) FROM blocks")).fetchone()[0]
        key = (int(top), peek["entries"], peek["tokens"], peek["cold"], peek["pinned"])
        now = time.monotonic()
        held = self._held
        if held is None or held[0] != key or now - held[1] > STATS_TTL_S:
            held = self._held = (key, now, _scan(conn))
        return held[2]


def _scan(conn: Conn) -> dict[str, int]:
    b = conn.execute(
        Sql(
            "SELECT count(*) AS n, coalesce(sum(size), 0) AS raw, "
            "coalesce(sum(length(data)), 0) AS stored FROM blocks"
        )
    ).fetchone()
    t = conn.execute(Sql("SELECT count(*) FROM tombstones")).fetchone()[0]
    return {"blocks": b["n"], "raw_bytes": b["raw"], "stored_bytes": b["stored"], "tombstones": t}


def disk_bytes(conn: Conn, path: Path, url: str) -> int:
    """What the store occupies on disk: the file and its log (SQLite at ``path``), or the
    whole database (PostgreSQL at ``url``)."""
    if url:
        row = conn.execute(
            Sql.postgres_only("SELECT pg_database_size(current_database())")
        ).fetchone()
        return int(row[0])
    files = [path, Path(f"{path}-wal")]
    return sum(p.stat().st_size for p in files if p.exists())
