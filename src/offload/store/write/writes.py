"""A put's two halves: its preparation and the write transaction that inserts it.

The preparation (hashing, compression, chunking, analysis, token counting, embedding) is
pure CPU work; the transaction only inserts. On SQLite the work runs before the write lock
is taken. On PostgreSQL one put holds only its own locks (other puts run beside it): its
BEGIN also asks whether the content, or its body indexed for another scope, is stored
already, and new content is prepared inside the transaction, a big body's later chunks
each analysed while the server writes the batch before. With an embedding model the work
runs before the transaction there too (an embedding should not hold a pooled connection).
A batch (``put_many``, ``put_each``) holds the store-wide lock.

``Store.put``, ``put_many`` and ``put_each`` compose :func:`prepare_put` and
:func:`commit_puts`; what passes between them is store/write/puts.py's.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol

from offload.core.hashing import encode, identity_of, sha256_hex
from offload.core.text import analysis
from offload.core.text.chunking import count_lines
from offload.core.tokens import TokenCounter
from offload.errors import InvalidInput, RowRefused, StoreBusy
from offload.store.backend import Conn, Sql
from offload.store.handle import StoreHandle
from offload.store.models import Entry, PutResult
from offload.store.postgres import pgscopes
from offload.store.sqlite import db
from offload.store.write import blocks, index, meta, pgbulk, removal, rows, vectors
from offload.store.write.puts import (
    NeedsStoreLock,
    PendingPut,
    PutOptions,
    check_kind,
    check_label,
    check_tags,
    check_text,
    clean_tags,
    insert_vocabulary,
    put_keys,
    take_vocabulary,
)


class PutStore(StoreHandle, Protocol):
    """What a put uses of the store beyond the operation modules' handle."""

    @property
    def backend(self) -> str: ...

    @property
    def counter(self) -> TokenCounter: ...

    def vector_of(self, topic: str, summary: str, tags: str, body: str) -> bytes | None: ...

    def vectors_of(self, texts: Sequence[str]) -> list[bytes | None]: ...


def _big(store: PutStore, text: str) -> bool:
    """A body analysed, hashed and packed in bounded memory (SQLite; index.FREEZE_CHARS)."""
    return store.backend != "postgresql" and len(text) > index.FREEZE_CHARS


def prepare_put(
    store: PutStore, content: str, o: PutOptions, *, bulk: bool = False, batch: bool = False
) -> PendingPut:
    """Validate and do the CPU work of a put, outside any transaction (``bulk``: without
    the look-ups that spare a repeat its work, for a batch that checks them at once;
    ``batch``: its vector and which of its words are new are left to the batch,
    :func:`prepare_many` and :func:`commit_puts`).
    A single put on PostgreSQL without an embedding model is only validated and hashed
    here: its look-up and its work are done in the transaction (:func:`_commit_one_pg`)."""
    check_text(content, "content")
    if not 0.0 <= float(o.salience) <= 1.0:
        raise InvalidInput(f"salience must be within [0, 1], got {o.salience}")
    if o.label is not None:
        check_label(o.label)
    if o.body is not None:
        check_text(o.body, "body")
    if not isinstance(o.index_from_line, int) or o.index_from_line < 1:
        raise InvalidInput(f"index_from_line must be a line number >= 1, got {o.index_from_line!r}")
    kind = check_kind(o.kind)
    tag_text = " ".join(clean_tags(check_tags(o.tags)))
    if _big(store, content):  # hashed and packed a window at a time (_prepare_block)
        data, (content_hash, _) = b"", identity_of(content)
    else:
        data = encode(content)
        content_hash = sha256_hex(data)
    pending = PendingPut(o, kind, tag_text, content, data, content_hash)
    body = content_hash if o.body is None else sha256_hex(encode(o.body))
    kept = (content_hash,) if o.body is not None and o.keep_original else ()
    pending.digests = (body, *kept)  # what _prepare_blocks will make
    if store.backend == "postgresql" and not bulk and store.embedder is None:
        return pending  # looked up with the BEGIN, prepared after (_commit_one_pg)
    if bulk or rows.live_entry(store.conn, content_hash, o.scope) is None:
        # a repeat needs none of it
        _prepare_blocks(store, pending, known_words=not (bulk or batch), embed=not batch)
        if not data:  # a big body: its write needs only what is prepared; its text goes
            pending.content = ""
            release_freed_heap()
    return pending


def release_freed_heap() -> None:
    """Hand the heap the C allocator keeps free back to the system (glibc's
    ``malloc_trim``; elsewhere nothing): a big body's analysis frees tens of MB that glibc
    would otherwise keep, under the peak its write then adds (50 MB of random words:
    297 -> 285 MiB peak RSS)."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


# texts embedded in one call of the model by a batch: one call a text costs the tokenizer's
# set-up each time (two thirds of a bulk put's embedding); the bound keeps memory small
EMBED_BATCH = 512


def prepare_many(
    store: PutStore, puts: Iterable[tuple[str, PutOptions]], *, bulk: bool = False
) -> list[PendingPut]:
    """:func:`prepare_put` of each, their vectors made a batch of texts at a time."""
    pending = [prepare_put(store, c, o, bulk=bulk, batch=True) for c, o in puts]
    waiting = [p for p in pending if p.vector_text is not None]
    for i in range(0, len(waiting), EMBED_BATCH):
        part = waiting[i : i + EMBED_BATCH]
        made = store.vectors_of([p.vector_text or "" for p in part])
        for p, vector in zip(part, made, strict=True):
            p.vector, p.vector_text = vector, None
    return pending


def commit_puts(store: PutStore, pending: list[PendingPut]) -> list[PutResult]:
    """Commit prepared puts in one write transaction (:func:`_commit_puts`). A PostgreSQL
    role held to its scopes that writes outside them is told so in one line naming the
    role, the scope refused and the scopes it is held to (row-level security refused
    the row; store/postgres/pgscopes.py)."""
    try:
        return _commit_puts(store, pending)
    except RowRefused as exc:
        scopes = [p.options.scope for p in pending]
        raise pgscopes.refusal(store.conn, exc, scopes) from None


def _commit_puts(store: PutStore, pending: list[PendingPut]) -> list[PutResult]:
    """Commit prepared puts in one write transaction.

    One put on PostgreSQL first runs beside other puts, locking only its own keys
    (:func:`put_keys`, :func:`_commit_one_pg`); when it meets something those do not
    cover (an expired entry to archive) or a lock cycle with another put, it is rolled
    back and done again under the store-wide lock, as every put was. A batch holds the
    store-wide lock (on PostgreSQL its new contents go in a few COPY statements).
    """
    if store.backend == "postgresql" and len(pending) == 1:
        return [_commit_one_pg(store, pending[0])]
    words = take_vocabulary(pending)
    if store.backend == "postgresql":
        # a batch: its new contents in a few COPY statements (store/write/pgbulk.py)
        model = store.embedder.model_id if store.embedder is not None else None

        def commit(conn: Conn, p: PendingPut) -> PutResult:
            return _commit_put(store, conn, p)

        with db.write_tx(store.conn) as conn:
            pgbulk.insert_terms(conn, words)
            return pgbulk.commit_puts(conn, pending, commit, store.clock(), model)
    if len(pending) > 1:  # a batch's words, checked at once before the lock (prepare_many)
        words = index.unknown_words(store.conn, words)
    with db.write_tx(store.conn) as conn:
        insert_vocabulary(conn, words)
        return [_commit_put(store, conn, p) for p in pending]


def _commit_one_pg(store: PutStore, p: PendingPut) -> PutResult:
    """One put on PostgreSQL: the look-up for a repeat goes with the BEGIN, the same round
    trip, and content not prepared yet (no embedding model) is prepared inside the
    transaction, which already holds the locks of every block the put will write
    (:attr:`PendingPut.digests`). Its entry and vocabulary go with the block's statements
    (``rows.insert_with_entry``), the vocabulary last: every put takes the row locks of its
    entry's per-scope sums before those of new vocabulary words, so two never wait for each
    other in a cycle."""
    then: list[tuple[Sql, tuple[str, ...]]] = [(rows.LIVE_ENTRY, (p.content_hash, p.options.scope))]
    if not p.blocks:  # and whether its body is indexed already (another scope's entry)
        then.append((rows.INDEXED_BLOCK, (p.digests[0],)))
    try:
        with db.write_tx(store.conn, put_keys([p]), then) as conn:
            return _commit_put(store, conn, p, narrow=True)
    except (NeedsStoreLock, StoreBusy):
        pass  # rolled back: nothing of it was written (what it prepared is kept)
    with db.write_tx(store.conn) as conn:
        return _commit_put(store, conn, p)


def _prepare_blocks(
    store: PutStore,
    p: PendingPut,
    *,
    known_words: bool = True,
    index_body: bool = True,
    embed: bool = True,
) -> None:
    o = p.options
    first = o.index_from_line
    k = known_words
    content = _Text(p.content, p.data, p.content_hash)
    if o.body is not None:
        body = _Text(o.body, encode(o.body), p.digests[0])
        p.blocks.append(
            _prepare_block(store, body, indexed=index_body, from_line=first, known_words=k)
        )
        if o.keep_original:
            # index_original: a word only the original holds still finds the entry
            p.blocks.append(_prepare_block(store, content, indexed=o.index_original, known_words=k))
    else:
        p.blocks.append(
            _prepare_block(
                store,
                content,
                indexed=index_body,
                from_line=first,
                known_words=k,
                progress=o.progress,
            )
        )
    stored = p.content if o.body is None else o.body
    p.tokens = o.tokens if o.tokens is not None else store.counter.count(stored)
    labels = [o.label] if o.label is not None else []
    p.meta = meta.meta_row(o.topic, o.summary, p.tags, labels, o.source, stored)
    if embed:
        p.vector = store.vector_of(o.topic, o.summary, p.tags, stored)
    elif store.embedder is not None:
        p.vector_text = vectors.entry_text(o.topic, o.summary, p.tags, stored)


class _Text(NamedTuple):
    """A block's text, its UTF-8 bytes and their hash, each made once."""

    text: str
    data: bytes
    digest: str


def _prepare_block(
    store: PutStore,
    t: _Text,
    *,
    indexed: bool,
    from_line: int = 1,
    known_words: bool = True,
    progress: index.PutProgress | None = None,
) -> rows.PreparedBlock:
    s = store.settings
    pg = store.backend == "postgresql"
    single_pg = pg and known_words
    if not t.data and t.text:  # a big body (_big): bounded memory
        b = _prepare_big_block(store, t, indexed=indexed, from_line=from_line, progress=progress)
        if b.index is None or not known_words:
            return b
        return dataclasses.replace(b, index=index.without_known_vocabulary(store.conn, b.index))
    b = rows.prepare_block(
        t.data,
        indexed=indexed,
        chunk_lines=s.chunk_lines,
        chunk_chars=s.chunk_chars,
        from_line=from_line,
        # PostgreSQL, one put: a big body's later chunks are analysed while the server
        # writes its first ones (rows.insert_block); a batch analyses all of them now.
        # Its tsvectors are made from the counts: no joined terms (a batch's COPY
        # writes them as text)
        analyse_chars=index.BATCH_CHARS if single_pg else None,
        joined=not single_pg,
        text=t.text,
        digest=t.digest,
    )
    if b.index is None or not known_words or pg:
        # PostgreSQL: every word is inserted by the put's own statements (rows'
        # pipeline, last; pgbulk for a batch), known ones kept
        return b
    # which vocabulary words are new is read here, before the write lock
    return dataclasses.replace(b, index=index.without_known_vocabulary(store.conn, b.index))


def _prepare_big_block(
    store: PutStore,
    t: _Text,
    *,
    indexed: bool,
    from_line: int,
    progress: index.PutProgress | None,
) -> rows.PreparedBlock:
    """A big body's block (SQLite): its bytes encoded and packed a window at a time into
    a temporary file (the write copies them into the row a piece at a time), its chunks
    analysed a batch at a time into compressed frames (index.freeze_text)."""
    s = store.settings
    digest, size = identity_of(t.text)
    spool = index.spill_file()
    try:
        codec = blocks.pack_text_into(t.text, size, spool)
    except OSError as exc:
        spool.close()
        raise index.spill_failed(exc) from exc
    frozen = (
        index.freeze_text(t.text, s.chunk_lines, s.chunk_chars, from_line, progress)
        if indexed
        else None
    )
    # a big body fills the analysis caches with its own runs (up to their bound, tens of
    # MB of text of distinct words), of little use to the next text: freed here, before
    # the token count and the embedding model load on top of them
    analysis.clear_caches()
    return rows.PreparedBlock(digest, size, count_lines(t.text), codec, b"", frozen, spool)


def _commit_put(store: PutStore, conn: Conn, p: PendingPut, *, narrow: bool = False) -> PutResult:
    """The inserts of a prepared put (inside the caller's write transaction; ``narrow``:
    one that holds only the put's own locks, NeedsStoreLock when it needs more)."""
    o = p.options
    row = rows.live_entry(conn, p.content_hash, o.scope)
    expired = row is not None and row["expires"] is not None and row["expires"] <= store.clock()
    if narrow and expired:
        raise NeedsStoreLock  # archiving: more than its own locks
    if expired:
        # expired but not archived yet: archive it, and store the content anew
        removal.delete(store, conn, int(row["id"]), "expired")
        row = None
    if row is not None:
        entry, moved = _repeated(conn, o, int(row["id"]), row["expires"])
        return PutResult(entry, created=False, label_moved_from=moved)
    if not p.blocks:  # not prepared yet, or forgotten between the first look and the lock
        # a body indexed already (the same content in another scope) is not analysed
        _prepare_blocks(store, p, index_body=not rows.block_indexed(conn, p.digests[0]))
    now = store.clock()
    entry = rows.insert_with_entry(
        conn,
        p.blocks,
        {
            "kind": p.kind,
            "topic": o.topic,
            "tags": p.tags,
            "summary": o.summary,
            "salience": 1.0 if o.pinned else float(o.salience),
            "pinned": 1 if o.pinned else 0,
            "tokens": p.tokens,
            "content_hash": p.content_hash,
            "block_hash": p.blocks[0].digest,
            "source": o.source,
            "scope": o.scope,
            "created": now,
            "accessed": now,
            "expires": o.expires,
            "regenerate": o.regenerate,
            "event_time": o.event_time,
        },
        (o.label,) if o.label is not None else (),
        now,
    )
    meta.put_meta(conn, entry.id, p.meta, fresh=True)
    if p.vector is not None and store.embedder is not None:
        vectors.insert(conn, entry.id, store.embedder.model_id, p.vector)
    moved = rows.set_label(conn, o.label, entry.id) if o.label is not None else None
    return PutResult(entry, created=True, label_moved_from=moved)


def _repeated(
    conn: Conn, o: PutOptions, entry_id: int, expires: float | None
) -> tuple[Entry, int | None]:
    """The entry a repeated put found, with what the put asks of it: a later expiry
    renewed (sliding), its label, pinned; and the entry its label moved from, if any."""
    if o.expires is not None and expires is not None and o.expires > expires:
        conn.execute(Sql("UPDATE entries SET expires = ? WHERE id = ?"), (o.expires, entry_id))
    moved = rows.set_label(conn, o.label, entry_id) if o.label is not None else None
    if o.event_time is not None:  # the first writer to say when keeps it
        conn.execute(
            Sql("UPDATE entries SET event_time = ? WHERE id = ? AND event_time IS NULL"),
            (o.event_time, entry_id),
        )
    if o.pinned:
        conn.execute(Sql("UPDATE entries SET pinned = 1, salience = 1.0 WHERE id = ?"), (entry_id,))
    return rows.entry_by_id(conn, entry_id), moved
