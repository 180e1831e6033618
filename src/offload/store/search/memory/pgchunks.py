"""PostgreSQL's chunk rows as a stream (store/search/memory/chunkrows.py's seam): a transaction-id watermark.

On SQLite writers are serialised, so chunk ids commit in increasing order and the largest
id read is a watermark. On PostgreSQL puts commit side by side on any machine: a put that
drew chunk id 10 may commit after one that drew 11 was read, and a reader past 11 would
never see 10. So every chunk row carries the transaction that wrote it (``chunks.changed``,
``xid8``, default ``pg_current_xact_id()``, migration ``pg_chunk_changes``), and the
watermark is a transaction id instead of a row id:

- Each read is one statement, so one snapshot; with its rows it returns
  ``pg_snapshot_xmin(pg_current_snapshot())``: every transaction below it had ended (committed
  or rolled back) when the rows were read. Any row that becomes visible later was written by
  a transaction at or above it. The next read asks for ``changed >= xmin``: nothing is lost,
  whatever order ids were drawn and committed in, on however many machines.
- Rows of transactions at or above the watermark that were visible already are read again
  next time: their ids are kept in the token (``position[1:]``) and not handed out twice.
  They are few (the writes that committed while an older transaction was still running).
- A deleted or rewritten chunk (forget, gc, reindex, a repair) bumps ``chunk_generation``
  (statement triggers, only when rows changed): the reader rebuilds, never ranks a stale row.
  Deletions leave no log to prune; a long-running transaction only holds the watermark back
  (more rows re-read, none lost).

Chunks written before the migration have ``changed`` NULL: a full read takes them, and no
later read needs them (they can only change by a deletion or rewrite, which bumps the
generation). The full read goes in pages of :data:`PAGE` ids (each its own statement): its
token is the first page's, so a row committed between pages is either read by a later page
or by the next read (and, read twice, handed out once).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from offload.store.backend import Conn, Sql
from offload.store.search.memory import chunkrows
from offload.store.write.index import LENGTH_FIRST

# rows a full read asks for per statement (a result is held whole by the client)
PAGE = 50_000
# the generation and the watermark of this statement's snapshot, with the rows asked for
# (LEFT JOIN: one row even when there are none); two statements, so each has its plan: the
# rows after an id (a full read's page, by primary key) or the rows written at or after a
# transaction (by chunks_changed)
_HEAD = (
    "SELECT g.value AS generation, pg_snapshot_xmin(pg_current_snapshot())::text AS xmin, "
    "c.id, c.term_counts, coalesce(c.changed::text, '0') AS changed "
    "FROM chunk_generation g LEFT JOIN LATERAL ({rows}) c ON true WHERE g.id = 0"
)
_PAGE = Sql.postgres_only(
    _HEAD.format(
        rows="SELECT id, term_counts, changed FROM chunks WHERE id > %s ORDER BY id LIMIT %s"
    )
)
_SINCE = Sql.postgres_only(
    _HEAD.format(
        rows="SELECT id, term_counts, changed FROM chunks WHERE changed >= %s::xid8 ORDER BY id"
    )
)


def since_read(since: int) -> tuple[Sql, tuple[str]]:
    """The statement reading the rows of transactions at or after ``since`` (the
    watermark), with its parameters."""
    return _SINCE, (str(since),)


def read_rows(
    conn: Conn, since: int | None, seen: Sequence[int] = ()
) -> tuple[int, int, list[tuple[int, str]], list[int]]:
    """(generation, watermark, rows, ids to keep): every chunk row (``since`` None) or the
    rows of transactions at or after ``since``, less the ids in ``seen`` (handed out
    already); the ids to keep are those read at or above the new watermark (ascending)."""
    skip = set(seen)
    rows: list[tuple[int, str]] = []
    keep: list[int] = []
    generation = watermark = -1
    after = 0
    while True:
        if since is None:
            got: list[Any] = conn.execute(_PAGE, (after, PAGE)).fetchall()
        else:
            got = conn.execute(*since_read(since)).fetchall()
        if generation < 0:  # the first statement's snapshot is the token's
            generation, watermark = int(got[0][0]), int(got[0][1])
        for r in got:
            if r[2] is None:
                continue
            cid = int(r[2])
            if int(r[4]) >= watermark:
                keep.append(cid)
            if cid not in skip:
                rows.append((cid, r[3]))
        if since is not None or len(got) < PAGE or got[-1][2] is None:
            return generation, watermark, rows, sorted(keep)
        after = int(got[-1][2])


class PgChunks:
    """:class:`~offload.store.search.memory.chunkrows.ChunkSource` of a PostgreSQL store: the token's
    position is the watermark, then the ids read at or above it (handed out already).

    PostgreSQL keeps no totals of its own index (FTS5's row count and tokens): a full
    read gives its rows' own, which the in-process index's memory bound is checked
    against; a later read gives none (nothing to compare with)."""

    def read_all(self, conn: Conn) -> chunkrows.Batch:
        """Every chunk row, with the token of the first page's snapshot."""
        generation, watermark, rows, keep = read_rows(conn, None)
        return chunkrows.Batch(
            chunkrows.Token(generation, (watermark, *keep)), rows, (len(rows), _tokens(rows))
        )

    def next_read(self, token: chunkrows.Token) -> tuple[str, tuple[str]]:
        """The statement :meth:`read_since` runs for ``token``, with its parameters (a
        search runs it ahead with others: ``PgConn.read_ahead``)."""
        return since_read(token.position[0])

    def read_since(self, conn: Conn, token: chunkrows.Token) -> chunkrows.Batch | None:
        """The rows written at or after the token's watermark and not handed out yet; None
        when a chunk was deleted or rewritten since (the generation moved)."""
        since, seen = token.position[0], token.position[1:]
        generation, watermark, rows, keep = read_rows(conn, since, seen)
        if generation != token.generation:
            return None
        return chunkrows.Batch(chunkrows.Token(generation, (watermark, *keep)), rows, None)


def _tokens(rows: Sequence[tuple[int, str | None]]) -> int:
    """The chunks' lengths summed, read from each object's leading ``""`` key (a row
    without it counts 0: the index refuses such rows anyway)."""
    total = 0
    head = len(LENGTH_FIRST)
    for _cid, text in rows:
        if text is None or not text.startswith(LENGTH_FIRST):
            continue
        end = head
        while end < len(text) and text[end].isdigit():
            end += 1
        total += int(text[head:end] or 0)
    return total
