"""Row-level operations on entries, labels and blocks: functions over a connection.

Moved out of ``Store`` (they were its private methods) so that lifecycle, maintenance and
archive use them without reaching into the store; ``Store`` composes them. Each runs inside
the caller's transaction where it writes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from offload.config import StoreSettings
from offload.core.hashing import sha256_hex
from offload.core.text.chunking import count_lines
from offload.errors import InvalidInput, NotFound, StoreError
from offload.store.backend import Conn, Sql
from offload.store.models import Entry
from offload.store.schema import sqlite_entry_columns, sqlite_entry_values
from offload.store.write import blocks, index, meta

ENTRY_SELECT = (
    "SELECT e.*, b.size AS size, b.lines AS lines FROM entries e "
    "JOIN blocks b ON b.hash = e.block_hash"
)


def labelled(tail: str, pg_tail: str | None = None) -> Sql:
    """The entries ``ENTRY_SELECT + tail`` picks, with their labels, in one statement (one
    round trip): a row per label, or one with entry_label NULL for an entry without any
    (folded by :func:`with_labels`), by id. The entries are picked first (MATERIALIZED):
    joined with labels directly, SQLite gave up its index on an OR of two hash ranges and
    scanned every entry. ``pg_tail``: the tail's PostgreSQL form, where it differs (a hash
    parameter, ``unhex(?)`` in SQLite's)."""
    rest = "SELECT m.*, lb.label AS entry_label FROM m LEFT JOIN labels lb ON lb.entry_id = m.id "
    sqlite = f"WITH m AS MATERIALIZED ({ENTRY_SELECT} {tail}) {rest}ORDER BY m.id"
    if pg_tail is None:
        return Sql(sqlite)
    pg = f"WITH m AS MATERIALIZED ({ENTRY_SELECT} {pg_tail}) {rest}ORDER BY m.id"
    return Sql(sqlite, pg)


def with_labels(found: Iterable[Any]) -> list[tuple[Any, tuple[str, ...]]]:
    """Rows of :func:`labelled` as one (row, sorted labels) per entry, in the
    order the entries first appear."""
    first: dict[int, Any] = {}
    held: dict[int, list[str]] = {}
    for r in found:
        i = int(r["id"])
        first.setdefault(i, r)
        names = held.setdefault(i, [])
        if r["entry_label"] is not None:
            names.append(r["entry_label"])
    return [(r, tuple(sorted(held[i]))) for i, r in first.items()]


@dataclass(frozen=True)
class PreparedBlock:
    """A block ready to insert: hash, sizes, codec and stored bytes, its index terms."""

    digest: str
    size: int
    lines: int
    codec: str
    stored: bytes
    index: index.PreparedIndex | None  # None: kept, not indexed (a lossy put's original)
    # a big body's stored bytes in a temporary file instead of ``stored`` (SQLite; written
    # into the row a piece at a time, :func:`insert_block`, then closed)
    spool: IO[bytes] | None = field(default=None, compare=False, repr=False)


def prepare_block(
    data: bytes,
    *,
    indexed: bool,
    chunk_lines: int,
    chunk_chars: int,
    from_line: int = 1,
    analyse_chars: int | None = None,
    joined: bool = True,
    text: str | None = None,
    digest: str | None = None,
) -> PreparedBlock:
    """Compress, hash and (when ``indexed``) analyse one block's bytes (from ``from_line``;
    ``analyse_chars``, ``joined``: see :func:`offload.store.write.index.prepare`). ``text`` and
    ``digest``: the bytes decoded and hashed, when the caller has them already."""
    if text is None:
        text = data.decode("utf-8")
    codec, stored = blocks.pack(data)
    prepared = (
        index.prepare(text, chunk_lines, chunk_chars, from_line, analyse_chars, joined)
        if indexed
        else None
    )
    digest = sha256_hex(data) if digest is None else digest
    return PreparedBlock(digest, len(data), count_lines(text), codec, stored, prepared)


def labels(conn: Conn, entry_id: int) -> tuple[str, ...]:
    """An entry's labels, sorted."""
    rows = conn.execute(
        Sql("SELECT label FROM labels WHERE entry_id = ? ORDER BY label"), (entry_id,)
    ).fetchall()
    return tuple(r[0] for r in rows)


def entry_by_id(conn: Conn, entry_id: int) -> Entry:
    """The entry with this row id, with its labels (NotFound when there is none)."""
    found = with_labels(conn.execute(labelled("WHERE e.id = ?"), (entry_id,)))
    if not found:
        raise NotFound(f"#{entry_id}")
    return Entry.from_row(*found[0])


LIVE_ENTRY = Sql(
    "SELECT id, expires FROM entries WHERE content_hash = unhex(?) AND scope = ?",
    "SELECT id, expires FROM entries WHERE content_hash = %s AND scope = %s",
)


def live_entry(conn: Conn, content_hash: str, scope: str) -> Any:
    """The (id, expires) row of the entry holding this content in ``scope``, or None."""
    return conn.execute(LIVE_ENTRY, (content_hash, scope)).fetchone()


def insert_block(conn: Conn, b: PreparedBlock, now: float) -> str:
    """Store a prepared block (once: blocks are content-addressed); returns its hash."""
    fused = getattr(conn, "insert_indexed_block", None) is not None
    if fused and b.index is not None and b.index.has_chunks:
        _send_indexed(conn, b, b.index, now)
        return b.digest
    if b.spool is not None:
        return _insert_spooled(conn, b, b.spool, now)
    # one statement (a round trip on PostgreSQL) for a new block, the common case; none
    # comes back for one stored before
    added = conn.execute(
        Sql(
            "INSERT INTO blocks (hash, size, lines, codec, data, created) "
            "VALUES (unhex(?), ?, ?, ?, ?, ?) ON CONFLICT (hash) DO NOTHING RETURNING id",
            "INSERT INTO blocks (hash, size, lines, codec, data, created) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (hash) DO NOTHING RETURNING id",
        ),
        (b.digest, b.size, b.lines, b.codec, b.stored, now),
    ).fetchone()
    if added is not None:
        if b.index is not None:
            index.insert_block(conn, int(added[0]), b.index)
        return b.digest
    return _stored_block(conn, b)


_INSERT_ZEROED = Sql.sqlite_only(
    "INSERT INTO blocks (hash, size, lines, codec, data, created) "
    "VALUES (unhex(?), ?, ?, ?, zeroblob(?), ?) ON CONFLICT (hash) DO NOTHING RETURNING id"
)
# a spooled body goes into its row this many bytes at a time
BLOB_PIECE = 1 << 20


def _insert_spooled(conn: Conn, b: PreparedBlock, spool: IO[bytes], now: float) -> str:
    """A new block whose stored bytes are in ``spool`` (SQLite): its row made with a
    zeroed blob of their length, which SQLite's incremental blob I/O then fills a piece at
    a time. Binding the bytes whole held them twice more while SQLite built the row (~2x
    the compressed body, measured with memray on a 50 MB add)."""
    if not isinstance(conn, sqlite3.Connection):
        raise StoreError("a spooled block is written through SQLite's incremental blob I/O")
    with spool:
        length = spool.seek(0, 2)
        added = conn.execute(
            _INSERT_ZEROED, (b.digest, b.size, b.lines, b.codec, length, now)
        ).fetchone()
        if added is None:
            return _stored_block(conn, b)
        spool.seek(0)
        with conn.blobopen("blocks", "data", int(added[0])) as blob:
            while piece := spool.read(BLOB_PIECE):
                blob.write(piece)
    if b.index is not None:
        index.insert_block(conn, int(added[0]), b.index)
    return b.digest


def _stored_block(conn: Conn, b: PreparedBlock) -> str:
    """A block stored before, maybe only as an un-indexed original: index it now."""
    if b.index is None or not b.size:
        return b.digest
    held = block_id(conn, b.digest)
    if not index.is_indexed(conn, held):
        index.insert_block(conn, held, b.index)
    return b.digest


# a subquery, not a join: PostgreSQL plans it in a third of the time (~0.035 against 0.12 ms,
# and a query sent with the BEGIN is planned at every put)
INDEXED_BLOCK = Sql(
    "SELECT EXISTS (SELECT 1 FROM chunks WHERE block_id = "
    "(SELECT id FROM blocks WHERE hash = unhex(?)))",
    "SELECT EXISTS (SELECT 1 FROM chunks WHERE block_id = (SELECT id FROM blocks WHERE hash = %s))",
)


def block_indexed(conn: Conn, digest: str) -> bool:
    """Whether the block with this hash is stored and indexed (has chunks)."""
    return bool(conn.execute(INDEXED_BLOCK, (digest,)).fetchone()[0])


ENTRY_FIELDS = (
    "kind", "topic", "tags", "summary", "salience", "pinned", "tokens", "content_hash",
    "block_hash", "source", "scope", "created", "accessed", "expires", "regenerate",
    "event_time",
)  # fmt: skip
# SQLite: the row carries its change stamp (the counter's next value) as it is inserted,
# so the stamp trigger only moves the counter and never rewrites the row it stamps
# (migration m_entry_indexes_trimmed; an insert without it is stamped as before)
_INSERT_ENTRY = Sql(
    f"INSERT INTO entries ({', '.join(sqlite_entry_columns(ENTRY_FIELDS))}, changed) "
    f"VALUES ({', '.join(sqlite_entry_values(ENTRY_FIELDS))}, "
    "(SELECT value + 1 FROM entry_stamp WHERE id = 0))",
    f"INSERT INTO entries ({', '.join(ENTRY_FIELDS)}) "
    f"VALUES ({', '.join('%s' for _ in ENTRY_FIELDS)}) RETURNING id",
    returns_id=True,
)


def insert_entry(
    conn: Conn, fields: dict[str, Any], block: PreparedBlock, labels: tuple[str, ...]
) -> Entry:
    """Insert a new entry (``fields``: every one of :data:`ENTRY_FIELDS`) whose body is
    ``block``, and return it as a read would (:func:`_entry_of`), without that read (a
    round trip on PostgreSQL)."""
    cur = conn.execute(*_entry_statement(fields))
    return _entry_of(fields, int(cur.lastrowid or 0), block, labels)


def _entry_of(
    fields: dict[str, Any], entry_id: int, block: PreparedBlock, labels: tuple[str, ...]
) -> Entry:
    """A new entry as a read would give it: the rest of its row is the schema's defaults,
    the size and lines are the block's (content-addressed: the stored block has the same)."""
    row: Any = {
        **fields,
        "id": entry_id,
        "status": "cold",
        "access_count": 0,
        "size": block.size,
        "lines": block.lines,
    }
    return Entry.from_row(row, tuple(sorted(labels)))


def insert_with_entry(
    conn: Conn,
    blocks: Sequence[PreparedBlock],
    fields: dict[str, Any],
    labels: tuple[str, ...],
    now: float,
) -> Entry:
    """Store a new entry's blocks (its body first) and insert the entry (``fields``:
    every one of :data:`ENTRY_FIELDS`, ``block_hash`` the body's).

    On PostgreSQL an indexed body has its entry sent right after the block's statement, in
    the same pipeline (one round trip for the vocabulary, the block, the entry and the
    chunks): a big body's later batches' chunks are then mapped to it as they land, while
    the client analyses the next (the map's rows for a 100 KB body were ~2 ms of the
    server's work after the last batch). Elsewhere: the blocks, then the entry.
    """
    body, *rest = blocks
    entry_id = _streamed_with_entry(conn, body, fields, now)
    if entry_id is None:
        for b in blocks:
            insert_block(conn, b, now)
        return insert_entry(conn, fields, body, labels)
    for b in rest:
        insert_block(conn, b, now)
    return _entry_of(fields, entry_id, body, labels)


def _streamed_with_entry(
    conn: Conn, b: PreparedBlock, fields: dict[str, Any], now: float
) -> int | None:
    """The entry's id when ``b`` went with the entry in one pipeline (None: it did not go,
    nothing was written)."""
    fused = getattr(conn, "insert_indexed_block", None) is not None
    if not fused or b.index is None or not b.index.has_chunks or not conn.in_transaction:
        return None
    return int(_send_indexed(conn, b, b.index, now, _entry_statement(fields)) or 0)


def _send_indexed(
    conn: Any,
    b: PreparedBlock,
    prepared: index.PreparedIndex,
    now: float,
    then: tuple[str, tuple[Any, ...]] | None = None,
) -> int | None:
    """PostgreSQL: a new block, its chunks and their search rows in one statement (one
    round trip), a big body's later chunks in more, each analysed while the server writes
    the one before (``PgConn.insert_indexed_block``), then its vocabulary, in the same
    pipeline (a vocabulary left to the chunks' runs is made once the last batch is
    analysed, :meth:`index.PreparedIndex.words`). Last, after ``then`` (a put's entry):
    see ``writes._commit_one_pg`` on the order of row locks. A block stored before is
    indexed if it was not. Returns the id ``then`` gave (None without it)."""
    seen: list[index.PreparedChunk] = []

    def rows_of(batch: Sequence[index.PreparedChunk]) -> list[tuple[object, ...]]:
        seen.extend(batch)
        return index.chunk_rows(batch)

    def vocabulary() -> tuple[str, tuple[str]] | None:
        words = prepared.words(seen)
        return index.vocabulary_insert(words) if words else None

    block = (b.digest, b.size, b.lines, b.codec, b.stored, now)
    batches = map(rows_of, prepared.batches(index.BATCH_CHARS))
    later = batches if prepared.later else ()
    got = conn.insert_indexed_block(block, next(batches), later, then, vocabulary)
    if got.block_id is None:
        _stored_block(conn, b)
    return int(got.then_id) if got.then_id is not None else None


def _entry_statement(fields: dict[str, Any]) -> tuple[Sql, tuple[Any, ...]]:
    return _INSERT_ENTRY, tuple(fields[f] for f in ENTRY_FIELDS)


def set_label(conn: Conn, label: str, entry_id: int) -> int | None:
    """Point ``label`` at the entry (moving it from any other of its scope), and refresh
    the search rows; the id of the entry it moved from (None: it was nobody's, or this
    entry's). A label held by another scope's entry is refused (InvalidInput): a scope's
    entries are not renamed from another scope."""
    previous = conn.execute(
        Sql(
            "SELECT l.entry_id, e.scope <> n.scope AS elsewhere FROM labels l "
            "JOIN entries e ON e.id = l.entry_id JOIN entries n ON n.id = ? WHERE l.label = ?"
        ),
        (entry_id, label),
    ).fetchone()
    if previous is not None and previous["elsewhere"]:
        raise InvalidInput(f"label {label!r} names an entry of another scope; choose another label")
    conn.execute(
        Sql(
            "INSERT INTO labels (label, entry_id) VALUES (?, ?) "
            "ON CONFLICT(label) DO UPDATE SET entry_id = excluded.entry_id"
        ),
        (label, entry_id),
    )
    conn.execute(Sql("DELETE FROM tombstone_labels WHERE label = ?"), (label,))
    if previous is not None and int(previous[0]) == entry_id:
        return None
    meta.refresh_meta(conn, entry_id)  # labels are searchable
    if previous is None:
        return None
    meta.refresh_meta(conn, int(previous[0]))
    return int(previous[0])


BLOCK_ID = Sql(
    "SELECT id FROM blocks WHERE hash = unhex(?)", "SELECT id FROM blocks WHERE hash = %s"
)


def block_id(conn: Conn, digest: str) -> int:
    """The row id of a stored block."""
    return int(conn.execute(BLOCK_ID, (digest,)).fetchone()[0])


def index_block(conn: Conn, block_id: int, text: str, s: StoreSettings, from_line: int = 1) -> None:
    """Index a stored block's body (doctor and reindex), inside the caller's transaction."""
    index.insert_block(conn, block_id, index.prepare(text, s.chunk_lines, s.chunk_chars, from_line))


def put_block(
    conn: Conn, data: bytes, s: StoreSettings, now: float, *, indexed: bool = True
) -> str:
    """Store (and by default index) one block inside the caller's transaction; its hash."""
    prepared = prepare_block(
        data, indexed=indexed, chunk_lines=s.chunk_lines, chunk_chars=s.chunk_chars
    )
    return insert_block(conn, prepared, now)
