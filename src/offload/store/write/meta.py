"""An entry's row in the metadata index (search_meta): its topic, summary, tags, labels
and source analysed as the body is, written with the entry, re-derived when its labels or
fields change, and rebuilt whole by ``doctor``."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from offload.core.text import analysis
from offload.core.text.metatext import novel
from offload.store.backend import Conn, Sql
from offload.store.postgres import pgsql
from offload.store.schema import hexed
from offload.store.write import blocks

# an entry's metadata row (PostgreSQL computes its tsvector from the same fields)
INSERT_META = Sql(
    "INSERT INTO search_meta (rowid, topic, summary, tags, labels, source) "
    "VALUES (?, ?, ?, ?, ?, ?)",
    (
        "INSERT INTO search_meta (rowid, topic, summary, tags, labels, source, tsv) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s::tsvector)"
    ),
    params=pgsql.meta_params,
)


def meta_row(
    topic: str,
    summary: str,
    tags: str,
    labels: Sequence[str],
    source: str,
    body: str | None = None,
) -> tuple[str, str, str, str, str]:
    """The analysed columns of an entry's search_meta row. With the entry's ``body``, a
    topic or summary counts only for what the body does not already hold word for word
    (``core.text.metatext.novel``: a first line or an extractive gist is not new evidence)."""
    if body is not None:
        topic, summary = novel(topic, body), novel(summary, body)
    return (
        analysis.index_text(topic),
        analysis.index_text(summary),
        analysis.index_text(tags),
        analysis.index_text(" ".join(labels)),
        analysis.index_text(source),
    )


def put_meta(
    conn: Conn, entry_id: int, row: tuple[str, str, str, str, str], *, fresh: bool = False
) -> None:
    """Write (or replace) an entry's metadata row; an entry without any has none (BM25's
    statistics are then those of the entries that do carry metadata). ``fresh``: the
    entry was inserted in this transaction (ids are never reused), so there is no row to
    replace: one statement (a round trip on PostgreSQL) less."""
    if not fresh:
        conn.execute(Sql("DELETE FROM search_meta WHERE rowid = ?"), (entry_id,))
    if not any(row):
        return
    conn.execute(
        INSERT_META,
        (entry_id, *row),
    )


def refresh_meta(conn: Conn, entry_id: int) -> None:
    """Re-derive an entry's metadata row from its current fields and labels."""
    lock_entry(conn, entry_id)
    e = conn.execute(
        Sql("SELECT topic, summary, tags, source, block_hash FROM entries WHERE id = ?"),
        (entry_id,),
    ).fetchone()
    if e is None:
        remove_meta(conn, entry_id)
        return
    labels = [
        r[0] for r in conn.execute(Sql("SELECT label FROM labels WHERE entry_id = ?"), (entry_id,))
    ]
    body = block_text(conn, hexed(e["block_hash"]))
    meta = meta_row(e["topic"], e["summary"], e["tags"], labels, e["source"], body)
    put_meta(conn, entry_id, meta)


def block_text(conn: Conn, digest: str) -> str | None:
    """A block's verified plaintext read inside the caller's transaction (None if absent)."""
    row = conn.execute(
        Sql(
            "SELECT codec, CAST(data AS BLOB) AS data FROM blocks WHERE hash = unhex(?)",
            "SELECT codec, data AS data FROM blocks WHERE hash = %s",
        ),
        (digest,),
    ).fetchone()
    return None if row is None else blocks.unpack(digest, row["codec"], bytes(row["data"]))


def lock_entry(conn: Conn, entry_id: int) -> None:
    """On PostgreSQL, hold the entry's row until commit before reading its labels: puts
    moving different labels off one entry run at once there (each holds only its label's
    lock), and the later one then reads the labels after the earlier one's change is
    committed. SQLite serialises its writers: nothing to lock."""
    if not isinstance(conn, sqlite3.Connection):
        conn.execute(
            Sql.postgres_only("SELECT id FROM entries WHERE id = %s FOR UPDATE"), (entry_id,)
        )


def remove_meta(conn: Conn, entry_id: int) -> None:
    """Forget an entry's metadata row."""
    conn.execute(Sql("DELETE FROM search_meta WHERE rowid = ?"), (entry_id,))


def rebuild_meta(conn: Conn) -> None:
    """Re-derive every entry's metadata row."""
    conn.execute(Sql("DELETE FROM search_meta"))
    labels: dict[int, list[str]] = {}
    for r in conn.execute(Sql("SELECT entry_id, label FROM labels ORDER BY label")):
        labels.setdefault(int(r[0]), []).append(r[1])
    rows = conn.execute(
        Sql("SELECT id, topic, summary, tags, source, block_hash FROM entries")
    ).fetchall()
    conn.executemany(
        INSERT_META,
        [
            (
                int(e["id"]),
                *meta_row(
                    e["topic"],
                    e["summary"],
                    e["tags"],
                    labels.get(int(e["id"]), []),
                    e["source"],
                    block_text(conn, hexed(e["block_hash"]))
                    if e["topic"] or e["summary"]
                    else None,
                ),
            )
            for e in rows
        ],
    )
