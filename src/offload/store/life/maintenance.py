"""``doctor``: re-hash every block, check references and the index, repair what it can."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING

from offload.core.hashing import CTX_PREFIX
from offload.core.text import analysis
from offload.core.text.wording import counted
from offload.errors import IntegrityError, InvalidInput, NotFound
from offload.store.backend import Conn, Sql
from offload.store.life import lifecycle
from offload.store.models import DoctorReport, Reindexed
from offload.store.schema import hexed
from offload.store.sqlite import db
from offload.store.write import (
    chunkmap,
    count_dictionary,
    index,
    meta,
    removal,
    rows,
    tombstones,
)

if TYPE_CHECKING:
    from offload.store.handle import StoreHandle as Store

Progress = Callable[[int, int], None]


def doctor(store: Store, *, repair: bool = False, progress: Progress | None = None) -> DoctorReport:
    """Check the whole store; with ``repair``, fix what can be fixed without losing data.

    Repairs: orphan blocks are dropped, unindexed blocks indexed, chunks of missing blocks
    removed, entries left hot by dead processes reset, the FTS index rebuilt when its
    integrity check fails, the chunk -> entry map (store/write/chunkmap.py) refilled when it
    differs from what the entries and chunks say (filtered search reads it), an entry whose
    content hash names content the store does not hold renamed to its body's hash (the
    old hash answers with a tombstone saying why). Corrupt blocks cannot be repaired (their bytes are gone); the
    entries that use them are reported, and with ``repair`` tombstoned as "corrupted" so
    references answer why instead of failing on read.
    """
    report = DoctorReport()
    conn = store.conn
    _check_blocks(conn, report, progress)
    report.missing_blocks = [
        hexed(r[0])
        for r in conn.execute(
            Sql(
                "SELECT DISTINCT e.block_hash FROM entries e "
                "LEFT JOIN blocks b ON b.hash = e.block_hash WHERE b.hash IS NULL"
            )
        )
    ]
    report.orphan_blocks = [
        hexed(r[0])
        for r in conn.execute(
            Sql(
                "SELECT b.hash FROM blocks b WHERE NOT EXISTS "
                "(SELECT 1 FROM entries e WHERE e.content_hash = b.hash "
                "OR (e.block_hash = b.hash AND e.block_hash != e.content_hash))"
            )
        )
    ]
    # a block that is some entry's stored body must have chunks (originals are not indexed)
    report.unindexed_blocks = [
        hexed(r[0])
        for r in conn.execute(
            Sql(
                "SELECT DISTINCT e.block_hash FROM entries e JOIN blocks b ON b.hash = e.block_hash "
                "WHERE b.size > 0 AND NOT EXISTS (SELECT 1 FROM chunks c WHERE c.block_id = b.id)"
            )
        )
    ]
    report.stale_chunks = int(
        conn.execute(
            Sql(
                "SELECT count(*) FROM chunks c WHERE NOT EXISTS "
                "(SELECT 1 FROM blocks b WHERE b.id = c.block_id)"
            )
        ).fetchone()[0]
    )
    report.index_ok = _fts_ok(conn)
    report.stale_hot = _count_stale_hot(store)
    report.chunk_map_off = chunkmap.missing_or_stale(conn)
    report.unreadable_counts = index.unreadable_counts(conn)
    if isinstance(conn, sqlite3.Connection):  # PostgreSQL keeps counts as text
        report.bad_dictionaries = count_dictionary.problems(conn)
    report.unverified_content = [int(r[0]) for r in conn.execute(_UNVERIFIED)]
    report.letter_tags = letter_tags(conn)
    if repair:
        _repair(store, report)
    return report


_CHUNK_PLACE = Sql(
    "SELECT c.start AS start, c.end AS end, b.hash AS hash FROM chunks c "
    "JOIN blocks b ON b.id = c.block_id WHERE c.id = ?",
    (
        'SELECT c.start AS start, c."end" AS "end", b.hash AS hash FROM chunks c JOIN '
        "blocks b ON b.id = c.block_id WHERE c.id = %s"
    ),
)


# the first instant after the days whose `offload add --tags` split tags into letters
# (2026-12-06T00:00Z): an entry first stored since then was tagged as it was asked to be
_LETTER_TAGS_FIXED = 1796515200


def letter_tags(conn: Conn) -> list[int]:
    """The entries stored before the split was fixed whose tags are two or more single
    characters (DoctorReport.letter_tags)."""
    rows = conn.execute(
        Sql(
            "SELECT id, tags FROM entries WHERE tags LIKE '_ _%' "
            f"AND created < {_LETTER_TAGS_FIXED} ORDER BY id"
        )
    )
    return [
        int(r[0])
        for r in rows
        if all(len(tag) == 1 for tag in str(r[1]).split()) and len(str(r[1]).split()) > 1
    ]


# an entry given its body's hash as its content hash (SQLite then keeps no block hash of
# its own: store/schema.py)
_RENAMED_TO_BODY = Sql(
    "UPDATE entries SET content_hash = block_hash, block_own = NULL WHERE id = ?",
    "UPDATE entries SET content_hash = block_hash WHERE id = %s",
)
# an entry's content hash is verified with the block that holds the content: its body
# (content_hash = block_hash) or its kept original; with neither, it is a bare claim
_UNVERIFIED = Sql(
    "SELECT e.id FROM entries e WHERE e.content_hash != e.block_hash AND NOT EXISTS "
    "(SELECT 1 FROM blocks b WHERE b.hash = e.content_hash) ORDER BY e.id"
)


def _rekey_unverified(store: Store, conn: Conn, entry_ids: list[int]) -> list[str]:
    """Each entry whose content hash cannot be verified is named by its body's hash from
    now on, and its old hash answers with a tombstone saying why; where the scope holds
    that body as an entry already, the entry is forgotten instead (its body lives on
    there). Nothing is read back under a hash its bytes do not have."""
    done: list[str] = []
    for entry_id in entry_ids:
        row = conn.execute(Sql("SELECT * FROM entries WHERE id = ?"), (entry_id,)).fetchone()
        body = hexed(row["block_hash"])
        why = (
            "its content hash could not be verified (the store holds no content with that "
            f"hash); its body is {CTX_PREFIX}{body}"
        )
        twin = conn.execute(
            Sql(
                "SELECT id FROM entries WHERE scope = ? AND content_hash = unhex(?)",
                "SELECT id FROM entries WHERE scope = %s AND content_hash = %s",
            ),
            (row["scope"], body),
        ).fetchone()
        if twin is not None:
            removal.delete(store, conn, entry_id, f"{why} (#{int(twin[0])})")
            done.append(f"forgot #{entry_id}: unverified content hash, its body is #{twin[0]}")
            continue
        tombstones.bury(conn, row, (), why, store.clock())
        conn.execute(_RENAMED_TO_BODY, (entry_id,))
        done.append(
            f"renamed #{entry_id} to its body's hash {body[:12]} "
            f"(its content hash {hexed(row['content_hash'])[:12]} was unverified)"
        )
    return done


def _count_again(store: Store, conn: Conn, chunk_ids: list[int]) -> None:
    """Each chunk's cached term counts made again from its text (its block verified; a
    corrupt block makes doctor rebuild the whole index instead)."""
    counted: list[tuple[int, str]] = []
    for cid in chunk_ids:
        r = conn.execute(_CHUNK_PLACE, (cid,)).fetchone()
        if r is not None:
            text = store.block_text(hexed(r["hash"]))[int(r["start"]) : int(r["end"])]
            counted.append((cid, index.term_counts(analysis.index_text(text))))
    index.rewrite_counts(conn, counted)


def _fts_ok(conn: Conn) -> bool:
    return index.integrity_ok(conn)


def _count_stale_hot(store: Store) -> int:
    return len(lifecycle.stale_hot(store))


def _check_blocks(conn: Conn, report: DoctorReport, progress: Progress | None) -> None:
    """Decompress and hash every block again; those that do not match are corrupt."""
    hashes = [hexed(r[0]) for r in conn.execute(Sql("SELECT hash FROM blocks ORDER BY id"))]
    total = len(hashes)
    for i, digest in enumerate(hashes, 1):
        try:
            meta.block_text(conn, digest)
        except (IntegrityError, InvalidInput):
            report.corrupt_blocks.append(digest)
        report.blocks_checked += 1
        if progress is not None:
            progress(i, total)


def _repair(store: Store, report: DoctorReport) -> None:
    conn = store.conn
    if report.stale_hot:
        store.reset_stale_hot()
        report.repaired.append(
            f"reset {counted(report.stale_hot, 'entry')} left hot by dead processes"
        )
    with db.write_tx(conn):
        for digest in report.orphan_blocks:
            removal.drop_block_if_unused(conn, digest)
        if report.orphan_blocks:
            report.repaired.append(f"dropped {counted(len(report.orphan_blocks), 'orphan block')}")
        if report.stale_chunks:
            conn.execute(
                Sql(
                    "DELETE FROM chunks WHERE NOT EXISTS "
                    "(SELECT 1 FROM blocks b WHERE b.id = chunks.block_id)"
                )
            )
            report.repaired.append(
                f"removed {counted(report.stale_chunks, 'chunk')} of missing blocks"
            )
        _tombstone_unreadable(store, conn, report)
        if report.bad_dictionaries and isinstance(conn, sqlite3.Connection):
            # before counting again: what is counted again is compressed without them
            count_dictionary.drop(conn, [d for d, _why in report.bad_dictionaries])
            n = len(report.bad_dictionaries)
            report.repaired.append(f"deleted {counted(n, 'unusable count dictionary')}")
        _index_again(store, conn, report)
        report.repaired += _rekey_unverified(store, conn, report.unverified_content)
        if report.chunk_map_off:
            # last: the repairs above change chunks (the triggers map those), and the
            # refill is made from the tables as they now are
            chunkmap.rebuild(conn)
            report.repaired.append(f"rebuilt the chunk map ({report.chunk_map_off} rows were off)")


def _tombstone_unreadable(store: Store, conn: Conn, report: DoctorReport) -> None:
    """Tombstone the entries whose block failed verification or is missing."""
    for digest in report.corrupt_blocks + report.missing_blocks:
        ids = [
            int(r[0])
            for r in conn.execute(
                Sql(
                    "SELECT id FROM entries WHERE content_hash = unhex(?) "
                    "OR (block_hash = unhex(?) AND block_hash != content_hash)",
                    "SELECT id FROM entries WHERE block_hash = %s OR content_hash = %s",
                ),
                (digest, digest),
            )
        ]
        for entry_id in ids:
            removal.delete(
                store, conn, entry_id, "corrupted (its stored bytes failed verification)"
            )
        if ids:
            report.repaired.append(
                f"tombstoned {counted(len(ids), 'entry')} of block {digest[:12]}"
            )


def _index_again(store: Store, conn: Conn, report: DoctorReport) -> None:
    """Rebuild the full-text index when blocks went or it is off, else index what is
    missing and make unreadable term counts again."""
    if report.corrupt_blocks or report.missing_blocks or not report.index_ok:
        rebuilt = _rebuild_index(store, conn)
        left_out = (
            f" ({counted(len(rebuilt.skipped), 'unreadable block')} left out)"
            if rebuilt.skipped
            else ""
        )
        report.repaired.append("rebuilt the full-text index" + left_out)
    else:
        for digest in report.unindexed_blocks:
            text = store.block_text(digest)
            rows.index_block(conn, rows.block_id(conn, digest), text, store.settings)
        if report.unindexed_blocks:
            report.repaired.append(f"indexed {counted(len(report.unindexed_blocks), 'block')}")
        if report.unreadable_counts:
            _count_again(store, conn, report.unreadable_counts)
            n = len(report.unreadable_counts)
            report.repaired.append(f"made the cached term counts of {counted(n, 'chunk')} again")


def compact(store: Store) -> tuple[int, int]:
    """Merge the index segments and give free pages back to the filesystem.

    Returns (bytes before, bytes after). VACUUM rewrites the file, so it needs as much free
    disk as the store's size and briefly blocks writers from other processes.
    """
    before = _disk_bytes(store)
    conn = store.conn
    with db.write_tx(conn):
        index.optimize(conn)
    with db.busy_guard():
        conn.execute(Sql("VACUUM", "VACUUM FULL"))
        conn.execute(Sql("PRAGMA wal_checkpoint(TRUNCATE)", "SELECT 'ok'", noop=True))
    return before, _disk_bytes(store)


def _disk_bytes(store: Store) -> int:
    return store.disk_bytes()


def reindex(store: Store, *, progress: Progress | None = None) -> Reindexed:
    """Rebuild the full-text index and the vocabulary from the blocks (one transaction).

    A block that fails verification or is missing cannot be indexed: it is skipped and
    named in the result (``doctor --repair`` tombstones its entries)."""
    with db.write_tx(store.conn) as conn:
        return _rebuild_index(store, conn, progress)


def _rebuild_index(store: Store, conn: Conn, progress: Progress | None = None) -> Reindexed:
    # kept originals stay indexed if they were (put(index_original=True)), and only those
    originals = [hexed(r["hash"]) for r in conn.execute(_INDEXED_ORIGINALS)]
    # a body indexed from a later line on (put(index_from_line)) stays so
    starts = {hexed(r[0]): int(r[1]) for r in conn.execute(_FIRST_INDEXED_LINES)}
    index.clear(conn)
    digests = [hexed(r[0]) for r in conn.execute(Sql("SELECT DISTINCT block_hash FROM entries"))]
    digests += [d for d in originals if d not in set(digests)]
    skipped: list[str] = []
    for i, digest in enumerate(digests, 1):
        try:
            text = store.block_text(digest)
        except (IntegrityError, InvalidInput, NotFound):
            skipped.append(digest)
        else:
            rows.index_block(
                conn, rows.block_id(conn, digest), text, store.settings, starts.get(digest, 1)
            )
        if progress is not None:
            progress(i, len(digests))
    meta.rebuild_meta(conn)
    return Reindexed(len(digests) - len(skipped), tuple(skipped))


# lossy entries' kept originals that have chunks (chunks survive a damaged FTS table)
_INDEXED_ORIGINALS = (
    # b.id selected too: PostgreSQL orders a DISTINCT only by what it selects
    Sql(
        "SELECT DISTINCT b.id, b.hash FROM entries e JOIN blocks b ON b.hash = e.content_hash "
        "WHERE e.content_hash != e.block_hash AND EXISTS "
        "(SELECT 1 FROM chunks c WHERE c.block_id = b.id) ORDER BY b.id"
    )
)
# each indexed block's first indexed line (more than 1: indexed from a later line on)
_FIRST_INDEXED_LINES = Sql(
    "SELECT b.hash, min(c.start_line) FROM chunks c JOIN blocks b ON b.id = c.block_id "
    "GROUP BY b.hash HAVING min(c.start_line) > 1"
)
