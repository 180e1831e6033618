"""Many new entries into a PostgreSQL store in a few statements (``put_many``, migrations).

A put on its own costs about a dozen round trips (look-ups, the block, its chunks, the
entry, its metadata, reading it back); a bulk load of 100,000 entries was therefore bound
by the client's round trips, not by the server. :func:`insert_new` writes a batch of new
entries with ``COPY``: ids drawn from the tables' own sequences first (one statement per
table: never reused, whichever machine draws them), then the blocks, their chunks and
search rows, the entries and their metadata rows, each table one ``COPY``. The caller holds
the store-wide write lock (``db.write_tx`` without keys), so the look-ups done here
(which blocks exist, which contents are stored) see no writer in between, exactly as the
one-by-one path's do; everything commits or nothing does.

Only new rows go this way. What needs a decision per row (content already stored, a block
stored before only as an un-indexed original) is left to the caller's one-by-one path.

Why a batch takes the store-wide lock, although a single put runs beside others under its
own keys (``PgConn.begin_keyed``) and so waits for a whole bulk load (checked with two writer processes):

- the look-ups above decide which rows are new, then ``COPY`` writes them without a
  per-row conflict clause; a put beside it that stores one of the same blocks or contents
  would fail the batch (or itself) on the unique indexes ``blocks.hash`` and
  ``entries_dedup`` instead of finding the other's row: only locks taken before the
  look-ups prevent that;
- those locks are one advisory lock per key, about two per put: on a default server
  (PostgreSQL 15, ``max_locks_per_transaction`` 64, ``max_connections`` 100) one
  transaction took 10,000 advisory locks and failed at 20,000 with "out of shared memory",
  the lock table every session shares, so a batch of ~5,000 puts would exhaust it and make
  other sessions' lock requests fail meanwhile;
- the batch inserts its new vocabulary words (``terms``, unique) early: a put beside it
  with one of the same new words waits for the batch's commit on that index anyway.

Narrowing it needs a batch bounded in keys (split into transactions, which ``put_many``'s
one-transaction promise forbids today) or conflict-tolerant writes (``COPY`` into a staging
table, then ``INSERT ... ON CONFLICT DO NOTHING``, and the chunks of a block the batch lost
to another put dropped again), not a different lock.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from offload.store.backend import Conn, Sql
from offload.store.models import Entry, PutResult
from offload.store.postgres import pgsql
from offload.store.write import rows, vectors
from offload.store.write.puts import PendingPut
from offload.store.write.rows import PreparedBlock

# the entries' columns a bulk insert writes (the rest keep their defaults)
ENTRY_COLUMNS = (
    "kind", "topic", "tags", "summary", "salience", "status", "pinned", "tokens",
    "content_hash", "block_hash", "source", "scope", "created", "accessed",
    "access_count", "expires", "regenerate", "checked_out", "checked_in", "event_time",
)  # fmt: skip
# every statement here is PostgreSQL's only (a SQLite store never takes a bulk insert)
_NEXT_IDS = "SELECT nextval('{}_id_seq') AS id FROM generate_series(1, %s)"
# every stored block, whatever scope uses it (a function of the schema owner: row-level
# security may hide another scope's blocks from this role, store/postgres/pgscopes.py)
_KNOWN_BLOCKS = Sql.postgres_only("SELECT offload_known_blocks(%s)")
_INSERT_TERMS = Sql.postgres_only(
    "INSERT INTO terms (term) SELECT json_array_elements_text(%s::json) ORDER BY 1 "
    "ON CONFLICT DO NOTHING"
)
_STORED = Sql.postgres_only(
    "SELECT e.content_hash, e.scope FROM entries e "
    "JOIN (SELECT x->>0 AS h, x->>1 AS s FROM json_array_elements(%s::json) AS x) k "
    "ON e.content_hash = k.h AND e.scope = k.s"
)


@dataclass(frozen=True)
class NewEntry:
    """One entry to insert: its columns (:data:`ENTRY_COLUMNS`, in order), its blocks
    (the body first), and its analysed metadata row (all empty: none)."""

    columns: tuple[Any, ...]
    blocks: tuple[PreparedBlock, ...]
    meta: tuple[str, str, str, str, str]


def supported(conn: Conn) -> bool:
    """Whether ``conn`` can take a bulk insert (a PostgreSQL connection)."""
    return callable(getattr(conn, "copy_rows", None))


def stored_contents(conn: Conn, keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
    """Which of these (content_hash, scope) pairs an entry holds already: one statement."""
    if not keys:
        return set()
    rows = conn.execute(_STORED, (json.dumps([list(k) for k in keys]),)).fetchall()
    return {(str(r[0]), str(r[1])) for r in rows}


def known_blocks(conn: Conn, digests: Sequence[str]) -> set[str]:
    """Which of these block digests are stored already: one statement."""
    if not digests:
        return set()
    return {str(r[0]) for r in conn.execute(_KNOWN_BLOCKS, (json.dumps(list(digests)),))}


def next_ids(conn: Conn, table: str, n: int) -> list[int]:
    """``n`` fresh ids from ``table``'s sequence, in order (one statement)."""
    if n <= 0:
        return []
    rows = conn.execute(Sql.postgres_only(_NEXT_IDS.format(table)), (n,)).fetchall()
    return [int(r[0]) for r in rows]


def insert_new(conn: Conn, entries: Sequence[NewEntry], now: float) -> list[int]:
    """Insert entries whose content is not stored in their scope (the caller checked,
    under the store-wide write lock); their ids, in order.

    A block shared by several of them is written once; one stored already is kept (and
    indexed now if it was stored only as an un-indexed original, one by one: rare)."""
    digests = sorted({b.digest for e in entries for b in e.blocks})
    known = known_blocks(conn, digests)
    fresh: dict[str, PreparedBlock] = {}
    for e in entries:
        for b in e.blocks:
            if b.digest not in known:
                fresh.setdefault(b.digest, b)
            elif b.index is not None and b.size:
                rows.insert_block(conn, b, now)  # indexes it when it is not yet
    _copy_blocks(conn, list(fresh.values()), now)
    ids = next_ids(conn, "entries", len(entries))
    pairs = list(zip(ids, entries, strict=True))
    _copy(conn, "entries", ("id", *ENTRY_COLUMNS), [(i, *e.columns) for i, e in pairs])
    metas = [(i, *e.meta, pgsql.meta_tsvector(e.meta)) for i, e in pairs if any(e.meta)]
    _copy(conn, "search_meta", ("rowid", *pgsql.META_COLUMNS, "tsv"), metas)
    return ids


def _copy(conn: Conn, table: str, columns: Sequence[str], values: list[tuple[Any, ...]]) -> None:
    copy_rows = getattr(conn, "copy_rows")  # noqa: B009 - a PgConn (supported())
    copy_rows(table, columns, values)


def _copy_blocks(conn: Conn, blocks: list[PreparedBlock], now: float) -> None:
    ids = next_ids(conn, "blocks", len(blocks))
    pairs = list(zip(ids, blocks, strict=True))
    _copy(
        conn,
        "blocks",
        ("id", "hash", "size", "lines", "codec", "data", "created"),
        [(i, b.digest, b.size, b.lines, b.codec, b.stored, now) for i, b in pairs],
    )
    chunks = [(i, c) for i, b in pairs if b.index is not None for c in b.index.chunks]
    chunk_ids = next_ids(conn, "chunks", len(chunks))
    placed = list(zip(chunk_ids, chunks, strict=True))
    _copy(
        conn,
        "chunks",
        ("id", "block_id", "start_line", "end_line", "start", "end", "term_counts"),
        [
            (cid, bid, c.start_line, c.end_line, c.start, c.end, c.term_counts)
            for cid, (bid, c) in placed
        ],
    )
    _copy(
        conn,
        "search_body",
        ("rowid", "terms"),
        [(cid, pgsql.tsvector_literal(c.terms)[0]) for cid, (_bid, c) in placed],
    )
    insert_terms(conn, sorted({w for b in blocks if b.index is not None for w in b.index.words()}))


def insert_terms(conn: Conn, words: Sequence[str]) -> None:
    """Add vocabulary words (those known already are kept) in one statement, in sorted
    order: two writers inserting overlapping words then never wait for each other in a
    cycle."""
    if words:
        conn.execute(_INSERT_TERMS, (json.dumps(sorted(words)),))


def commit_puts(
    conn: Conn,
    pending: Sequence[PendingPut],
    one_by_one: Callable[[Conn, PendingPut], PutResult],
    now: float,
    model: str | None,
) -> list[PutResult]:
    """Commit prepared puts (inside the caller's store-wide write transaction): the new
    contents in bulk (:func:`insert_new`), every other put through ``one_by_one`` (the
    store's own commit of one put): content stored already (first, in order), then a
    content the batch holds twice or a put with a label (after, in order: it then finds
    the entry the batch stored, or moves the label as a put would). Results in order."""
    stored = stored_contents(conn, [(p.content_hash, p.options.scope) for p in pending])
    results: list[PutResult | None] = [None] * len(pending)
    fresh: list[int] = []
    later: list[int] = []
    seen: set[tuple[str, str]] = set()
    for i, p in enumerate(pending):
        key = (p.content_hash, p.options.scope)
        if key in stored or not p.blocks:
            results[i] = one_by_one(conn, p)
        elif key in seen or p.options.label is not None:
            later.append(i)
        else:
            seen.add(key)
            fresh.append(i)
    ids = insert_new(conn, [_new_entry(pending[i], now) for i in fresh], now)
    for i, entry_id in zip(fresh, ids, strict=True):
        p = pending[i]
        if p.vector is not None and model is not None:
            vectors.insert(conn, entry_id, model, p.vector)
    by_id = _entries(conn, ids)
    for i, entry_id in zip(fresh, ids, strict=True):
        results[i] = PutResult(by_id[entry_id], created=True)
    for i in later:
        results[i] = one_by_one(conn, pending[i])
    return [r for r in results if r is not None]


def _new_entry(p: PendingPut, now: float) -> NewEntry:
    o = p.options
    columns = (
        p.kind, o.topic, p.tags, o.summary, 1.0 if o.pinned else float(o.salience), "cold",
        1 if o.pinned else 0, p.tokens, p.content_hash, p.blocks[0].digest, o.source, o.scope,
        now, now, 0, o.expires, o.regenerate, None, None, o.event_time,
    )  # fmt: skip
    return NewEntry(columns, tuple(p.blocks), p.meta)


def _entries(conn: Conn, ids: Sequence[int]) -> dict[int, Entry]:
    """The entries with these ids, read in one statement (new ones: no labels yet)."""
    if not ids:
        return {}
    found = conn.execute(
        Sql.postgres_only(f"{rows.ENTRY_SELECT} WHERE e.id IN (SELECT value FROM offload_ids(%s))"),
        (json.dumps(list(ids)),),
    ).fetchall()
    return {int(r["id"]): Entry.from_row(r) for r in found}
