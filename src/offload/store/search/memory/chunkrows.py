"""The body chunks' cached term counts as a stream: everything once, then what changed.

An in-process index over the chunks (store/search/memory/resident.py) reads every chunk's cached term
counts (``chunks.term_counts``, index.term_counts: a JSON object leading with the chunk's
length under key ``""``) once, then before each search only the rows written since. The
backend says what "since" means through a :class:`ChunkSource`:

- :meth:`ChunkSource.read_all`: every row, with the :class:`Token` of that moment, read
  in one snapshot (a read transaction), so token and rows agree.
- :meth:`ChunkSource.read_since`: the rows added after a token, with the new token; or
  None when rows the token covered were deleted or rewritten since (forget, gc, reindex, a
  reused rowid): the caller rebuilds from :meth:`read_all`, never serves a stale posting.

Each :class:`Batch` also carries the backend's own totals of the index (row count and
tokens) when it has them, read in the same snapshot: the caller checks its own sums
against them, so any drift (a row the index holds that the chunks table does not) turns
the in-process index off rather than ranking differently.

SQLite: writers are serialised, so chunk ids commit in increasing order and the largest id
read is a watermark. Deleting or rewriting a chunk bumps ``chunk_generation`` (triggers,
migration ``m_chunk_generation``): rowid reuse needs a deletion first, so it is caught
too. PostgreSQL: ids commit out of order under concurrent writers, so its source
(store/search/memory/pgchunks.py) keeps a transaction-id watermark instead. The reader picks the source
of its connection's backend (resident.chunk_source).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from offload.store.backend import Conn, Sql
from offload.store.search import selective
from offload.store.write import packed_counts

# (chunk id, cached term counts JSON or None: not cached); ascending ids within a batch
ChunkRow = tuple[int, str | None]


@dataclass(frozen=True)
class Token:
    """Where a reader stands: ``generation`` changes whenever a row it read may have
    changed; ``position`` is the source's own watermark (SQLite: the largest chunk id
    read; a PostgreSQL source may keep more, e.g. an xid snapshot and pending ids)."""

    generation: int
    position: tuple[int, ...]


@dataclass(frozen=True)
class Batch:
    """Rows read in one snapshot, the token after them, and the backend's totals of its
    own index at that snapshot (``(rows, tokens)``; None: the backend has none to
    compare with)."""

    token: Token
    rows: Sequence[ChunkRow]
    totals: tuple[int, int] | None


class ChunkSource(Protocol):
    """A backend's stream of chunk rows (see the module docstring)."""

    def read_all(self, conn: Conn) -> Batch:
        """Every chunk row with a token, in one snapshot."""
        ...

    def read_since(self, conn: Conn, token: Token) -> Batch | None:
        """The rows added after ``token``; None if a row it covered changed since."""
        ...


_GENERATION = Sql("SELECT value FROM chunk_generation WHERE id = 0")
# large counts are kept compressed in packed_counts, term_counts NULL (store/write/packed_counts.py)
_ALL = Sql("SELECT id, coalesce(term_counts, packed_counts) FROM chunks ORDER BY id")
_SINCE = Sql("SELECT id, coalesce(term_counts, packed_counts) FROM chunks WHERE id > ? ORDER BY id")


class SqliteChunks:
    """:class:`ChunkSource` of a SQLite store (rows of NULL counts are passed on: the
    caller decides what an unknown count means)."""

    def read_all(self, conn: Conn) -> Batch:
        """Every chunk row, the generation and FTS5's totals in one read transaction."""
        with ReadSnapshot(conn):
            gen = _generation(conn)
            rows = _unpacked(conn, conn.execute(_ALL).fetchall())
            totals = selective.read_totals(conn, "search_body")
        last = rows[-1][0] if rows else 0
        return Batch(Token(gen, (last,)), rows, totals)

    def read_since(self, conn: Conn, token: Token) -> Batch | None:
        """Rows above the token's largest id, or None when the generation moved."""
        with ReadSnapshot(conn):
            gen = _generation(conn)
            if gen != token.generation:
                return None
            rows = _unpacked(conn, conn.execute(_SINCE, token.position).fetchall())
            totals = selective.read_totals(conn, "search_body")
        last = rows[-1][0] if rows else token.position[0]
        return Batch(Token(gen, (last,)), rows, totals)


def _unpacked(conn: Conn, rows: Sequence[sqlite3.Row]) -> list[ChunkRow]:
    # SQLite keeps the counts compressed (store/write/packed_counts.py), some with the
    # store's dictionary (store/write/count_dictionary.py); the index reads JSON
    raw = conn if isinstance(conn, sqlite3.Connection) else None
    return [(int(r[0]), packed_counts.unpack(r[1], raw)) for r in rows]


def _generation(conn: Conn) -> int:
    row = conn.execute(_GENERATION).fetchone()
    return 0 if row is None else int(row[0])


class ReadSnapshot:
    """A read transaction around a few statements (or the caller's own, if one is open):
    SQLite's autocommit reads would each see a different moment."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.own = isinstance(conn, sqlite3.Connection) and not conn.in_transaction

    def __enter__(self) -> None:
        if self.own:
            self.conn.execute(Sql("BEGIN"))

    def __exit__(self, *exc: object) -> None:
        if self.own:
            self.conn.execute(Sql("COMMIT"))
