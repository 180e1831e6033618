"""The chunks one search reads for its best candidates, each read once.

A search reads chunk text three times over: the phrase check of the best 30, a lookup's
case check of their best few chunks each, then the page it shows. Read by each step on
its own that was a statement (and a block read) per step, and one per chunk for the case
check: on PostgreSQL a round trip each, ~40 for a lookup. Here a chunk's row (its lines,
offsets and block) and text are kept for the rest of the search once read, and the
chunks each step asks for are read together: one statement for those named by id, one for
the entries whose first chunk is meant, and their blocks in one more.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from offload.store.backend import Row, Sql

if TYPE_CHECKING:
    from offload.store.handle import StoreHandle as Store

# SQLite keeps a hash as its bytes, PostgreSQL as hex (store/schema.py)
_CHUNK_COLS = "c.id, c.start_line, c.end_line, c.start, c.end, lower(hex(b.hash)) AS block"
_PG_CHUNK_COLS = 'c.id, c.start_line, c.end_line, c.start, c."end", b.hash AS block'
_CHUNKS_BY_ID = Sql(
    f"SELECT {_CHUNK_COLS} FROM chunks c JOIN blocks b ON b.id = c.block_id "
    "WHERE c.id IN (SELECT value FROM json_each(?))",
    f"SELECT {_PG_CHUNK_COLS} FROM chunks c JOIN blocks b ON b.id = c.block_id "
    "WHERE c.id IN (SELECT value FROM offload_ids(%s))",
)
_CHUNKS_OF_ENTRIES = Sql(
    f"SELECT e.id AS eid, {_CHUNK_COLS} FROM entries e "
    "JOIN blocks b ON b.hash = e.block_hash JOIN chunks c ON c.block_id = b.id "
    "WHERE e.id IN (SELECT value FROM json_each(?)) ORDER BY e.id, c.id",
    f"SELECT e.id AS eid, {_PG_CHUNK_COLS} FROM entries e "
    "JOIN blocks b ON b.hash = e.block_hash JOIN chunks c ON c.block_id = b.id "
    "WHERE e.id IN (SELECT value FROM offload_ids(%s)) ORDER BY e.id, c.id",
)

# (entry id, chunk id): the chunk meant, or None for the entry's first chunk
Wanted = tuple[int, int | None]


class ShownChunks:
    """Chunk rows and texts of one search (not shared between searches: a chunk read is
    the one the search ranked, whatever a writer does meanwhile)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._rows: dict[int, Row] = {}  # chunk id -> its row (with its block's hash)
        self._texts: dict[int, str] = {}  # chunk id -> its text
        self._first: dict[int, int | None] = {}  # entry id -> its first chunk's id

    def read(self, wanted: Iterable[Wanted]) -> None:
        """Read the chunks of ``wanted`` not read yet: at most three statements."""
        conn = self._store.conn
        new: list[Row] = []
        ids = list(dict.fromkeys(c for _e, c in wanted if c is not None and c not in self._rows))
        if ids:
            new += conn.execute(_CHUNKS_BY_ID, (json.dumps(ids),)).fetchall()
        firsts = list(dict.fromkeys(e for e, c in wanted if c is None and e not in self._first))
        if firsts:
            for e in firsts:
                self._first[e] = None  # an entry without chunks stays without
            for r in conn.execute(_CHUNKS_OF_ENTRIES, (json.dumps(firsts),)).fetchall():
                if self._first.get(int(r["eid"])) is None:  # ordered by chunk id: the first
                    self._first[int(r["eid"])] = int(r["id"])
                    new.append(r)
        if not new:
            return
        bodies = self._store.block_texts(list(dict.fromkeys(r["block"] for r in new)))
        for r in new:
            cid = int(r["id"])
            self._rows[cid] = r
            self._texts[cid] = bodies[r["block"]][r["start"] : r["end"]]

    def _chunk(self, entry_id: int, chunk_id: int | None) -> int | None:
        return self._first.get(entry_id) if chunk_id is None else chunk_id

    def row(self, entry_id: int, chunk_id: int | None) -> Row | None:
        """The row of a chunk read (:meth:`read`), or None (it no longer exists)."""
        cid = self._chunk(entry_id, chunk_id)
        return None if cid is None else self._rows.get(cid)

    def text(self, entry_id: int, chunk_id: int | None) -> str | None:
        """The text of a chunk read (:meth:`read`), or None (it no longer exists)."""
        cid = self._chunk(entry_id, chunk_id)
        return None if cid is None else self._texts.get(cid)
