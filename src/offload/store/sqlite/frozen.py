"""What SQLite's migrations (store/sqlite/db.py) run, frozen as they ran it.

A migration must keep its meaning when the live code changes: an old store migrated by a
newer offload runs the same statements the migration ran when it was written, on the
schema of that moment (a later migration then upgrades what this one wrote). So nothing
here is imported from the rest of the store: the block codec's read, the chunk map's
triggers, the index's rebuild and the cached counts' packing are copies of the code as it
stood, changed only if a migration's own meaning was wrong. The text analysis
(``offload.core.text.analysis``) is the one live part: the index migrations exist to rebuild
the index with the running analysis, and record its version (``ANALYSIS_VERSION``).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections import Counter

import zstandard

from offload.core.hashing import decode, sha256_hex
from offload.core.text import analysis
from offload.core.text.chunking import chunk_text
from offload.errors import OffloadError

# the defaults of [store] chunk_lines and chunk_chars when the lossy originals were indexed
CHUNK_LINES = 60
CHUNK_CHARS = 4000
# how much of a body its vocabulary words are read from
VOCABULARY_SCAN_CHARS = 256 * 1024
# the cached counts of at least this many bytes are kept compressed (level 3, checksummed):
# first those of bulky tool outputs, then those of chat turns too
MIN_PACKED = 1024
MIN_PACKED_SMALL = 128
_PACK_LEVEL = 3
_BUILT_WITH = ("search.index", "analysis_version")  # state row: what built the index


def block_text(digest: str, codec: str, stored: bytes) -> str | None:
    """A block's text, verified against its hash; None when it cannot be read (doctor
    names a corrupt block)."""
    try:
        data = stored if codec == "raw" else zstandard.ZstdDecompressor().decompress(stored)
    except zstandard.ZstdError:
        return None
    if sha256_hex(data) != digest:
        return None
    try:
        return decode(data)
    except OffloadError:
        return None


def term_counts(terms: str) -> str:
    """A chunk's cached term counts: JSON of each term's count, its length first (key "")."""
    counts = Counter(terms.split())
    whole = {"": sum(counts.values()), **counts}
    return json.dumps(whole, ensure_ascii=False, separators=(",", ":"))


def count_columns(
    counts_json: str, min_packed: int = MIN_PACKED
) -> tuple[str | None, bytes | None]:
    """A chunk's (``term_counts``, ``packed_counts``): those of ``min_packed`` bytes or
    more compressed."""
    data = counts_json.encode()
    if len(data) < min_packed:
        return counts_json, None
    packer = zstandard.ZstdCompressor(level=_PACK_LEVEL, write_checksum=True)
    return None, packer.compress(data)


def rewrite_counts(
    conn: sqlite3.Connection, counts: list[tuple[int, str]], min_packed: int = MIN_PACKED
) -> None:
    """Store chunks' cached term counts again in the two columns for them."""
    conn.executemany(
        "UPDATE chunks SET term_counts = ?, packed_counts = ? WHERE id = ?",
        [(*count_columns(cached, min_packed), cid) for cid, cached in counts],
    )


def chunk_columns(conn: sqlite3.Connection) -> set[str]:
    """The chunks table's columns (the cached counts' columns came with later migrations)."""
    return {str(r[1]) for r in conn.execute("PRAGMA table_info(chunks)")}


def built_with_current_analysis(conn: sqlite3.Connection) -> bool:
    """Whether search_body was last rebuilt by the running ``analysis.ANALYSIS_VERSION``."""
    row = conn.execute(
        "SELECT value FROM state WHERE namespace = ? AND key = ?", _BUILT_WITH
    ).fetchone()
    return row is not None and row[0] == str(analysis.ANALYSIS_VERSION)


def _record_built(conn: sqlite3.Connection) -> None:
    # the state table's versions came with m_state_version: older schemas have none
    versioned = any(r[1] == "version" for r in conn.execute("PRAGMA table_info(state)"))
    conn.execute(
        "INSERT INTO state (namespace, key, value, updated) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(namespace, key) DO UPDATE SET value = excluded.value, "
        "updated = excluded.updated" + (", version = state.version + 1" if versioned else ""),
        (*_BUILT_WITH, str(analysis.ANALYSIS_VERSION), time.time()),
    )


def _insert_vocabulary(conn: sqlite3.Connection, text: str) -> None:
    words = sorted(analysis.surface_words(text[:VOCABULARY_SCAN_CHARS]))
    conn.executemany("INSERT OR IGNORE INTO terms (term) VALUES (?)", [(t,) for t in words])


def reindex_chunks(conn: sqlite3.Connection) -> None:
    """Fill search_body and the vocabulary from the chunks already recorded (their offsets
    stay; their terms, and their cached counts where the schema has them, are re-derived),
    and record the analysis version that did it. Unreadable blocks are skipped."""
    columns = chunk_columns(conn)
    cached, packed = "term_counts" in columns, "packed_counts" in columns
    ids = [int(r[0]) for r in conn.execute("SELECT DISTINCT block_id FROM chunks ORDER BY 1")]
    for block_id in ids:
        row = conn.execute(
            "SELECT hash, codec, CAST(data AS BLOB) AS data FROM blocks WHERE id = ?", (block_id,)
        ).fetchone()
        text = None if row is None else block_text(row[0], row[1], bytes(row[2]))
        if text is None:
            continue
        chunks = conn.execute(
            "SELECT id, start, end FROM chunks WHERE block_id = ?", (block_id,)
        ).fetchall()
        terms = [(int(c[0]), analysis.index_text(text[c[1] : c[2]])) for c in chunks]
        conn.executemany("INSERT INTO search_body (rowid, terms) VALUES (?, ?)", terms)
        if packed:
            rewrite_counts(conn, [(cid, term_counts(t)) for cid, t in terms])
        elif cached:
            conn.executemany(
                "UPDATE chunks SET term_counts = ? WHERE id = ?",
                [(term_counts(t), cid) for cid, t in terms],
            )
        _insert_vocabulary(conn, text)
    _record_built(conn)


def rebuild_meta(conn: sqlite3.Connection) -> None:
    """Re-derive every entry's search_meta row (topic, summary, tags, labels, source)."""
    conn.execute("DELETE FROM search_meta")
    labels: dict[int, list[str]] = {}
    for r in conn.execute("SELECT entry_id, label FROM labels ORDER BY label"):
        labels.setdefault(int(r[0]), []).append(r[1])
    rows = conn.execute("SELECT id, topic, summary, tags, source FROM entries").fetchall()
    conn.executemany(
        "INSERT INTO search_meta (rowid, topic, summary, tags, labels, source) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [
            (
                int(e[0]),
                *(
                    analysis.index_text(v)
                    for v in (e[1], e[2], e[3], " ".join(labels.get(int(e[0]), [])), e[4])
                ),
            )
            for e in rows
        ],
    )


def index_block(conn: sqlite3.Connection, block_id: int, text: str) -> None:
    """Index one block's chunks (the default chunk sizes) and vocabulary."""
    _insert_vocabulary(conn, text)
    cached = "term_counts" in chunk_columns(conn)
    for c in chunk_text(text, CHUNK_LINES, CHUNK_CHARS):
        terms = analysis.index_text(text[c.start : c.end])
        place = (block_id, c.start_line, c.end_line, c.start, c.end)
        if cached:
            cur = conn.execute(
                "INSERT INTO chunks (block_id, start_line, end_line, start, end, term_counts, "
                "packed_counts) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (*place, *count_columns(term_counts(terms))),
            )
        else:
            cur = conn.execute(
                "INSERT INTO chunks (block_id, start_line, end_line, start, end) "
                "VALUES (?, ?, ?, ?, ?)",
                place,
            )
        conn.execute("INSERT INTO search_body (rowid, terms) VALUES (?, ?)", (cur.lastrowid, terms))


# the rows of one entry (SQLite: ``new``/``old`` rows; both backends' insert side)
_ADD_ENTRY_SQLITE = (
    "INSERT OR IGNORE INTO entry_chunks (entry_id, chunk_id, own) "
    "SELECT new.id, c.id, b.hash = new.block_hash FROM blocks b "
    "JOIN chunks c ON c.block_id = b.id WHERE b.hash IN (new.block_hash, new.content_hash);"
)
_ADD_CHUNK_SQLITE = (
    "INSERT OR IGNORE INTO entry_chunks (entry_id, chunk_id, own) "
    "SELECT e.id, new.id, 1 FROM blocks b JOIN entries e ON e.block_hash = b.hash "
    "WHERE b.id = new.block_id; "
    "INSERT OR IGNORE INTO entry_chunks (entry_id, chunk_id, own) "
    "SELECT e.id, new.id, 0 FROM blocks b JOIN entries e ON e.content_hash = b.hash "
    "WHERE b.id = new.block_id AND e.block_hash != b.hash;"
)

# the chunk map (store/write/chunkmap.py): its table, index and triggers, then its rows
CHUNK_MAP_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS entry_chunks (
    entry_id INTEGER NOT NULL,
    chunk_id INTEGER NOT NULL,
    own INTEGER NOT NULL,
    PRIMARY KEY (entry_id, chunk_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entry_chunks_chunk ON entry_chunks(chunk_id, own);
CREATE TRIGGER IF NOT EXISTS entry_chunks_entry_added AFTER INSERT ON entries BEGIN
    {_ADD_ENTRY_SQLITE}
END;
CREATE TRIGGER IF NOT EXISTS entry_chunks_entry_gone AFTER DELETE ON entries BEGIN
    DELETE FROM entry_chunks WHERE entry_id = old.id;
END;
CREATE TRIGGER IF NOT EXISTS entry_chunks_entry_moved
AFTER UPDATE OF id, block_hash, content_hash ON entries BEGIN
    DELETE FROM entry_chunks WHERE entry_id = old.id;
    {_ADD_ENTRY_SQLITE}
END;
CREATE TRIGGER IF NOT EXISTS entry_chunks_chunk_added AFTER INSERT ON chunks BEGIN
    {_ADD_CHUNK_SQLITE}
END;
CREATE TRIGGER IF NOT EXISTS entry_chunks_chunk_gone AFTER DELETE ON chunks BEGIN
    DELETE FROM entry_chunks WHERE chunk_id = old.id;
END;
CREATE TRIGGER IF NOT EXISTS entry_chunks_chunk_moved AFTER UPDATE OF id, block_id ON chunks
BEGIN
    DELETE FROM entry_chunks WHERE chunk_id = old.id;
    {_ADD_CHUNK_SQLITE}
END;
"""
CHUNK_MAP_FILL = (
    "INSERT OR IGNORE INTO entry_chunks (entry_id, chunk_id, own) "
    "SELECT e.id, c.id, CASE WHEN b.hash = e.block_hash THEN 1 ELSE 0 END FROM entries e "
    "JOIN blocks b ON b.hash IN (e.block_hash, e.content_hash) "
    "JOIN chunks c ON c.block_id = b.id"
)


def compact_counts(counts_json: str) -> str | None:
    """Cached counts JSON as the compact text SQLite compresses since migration
    ``m_chunk_term_counts_compact`` (``{"":61,"tim":1,"said":2,"the":1}`` ->
    ``61,tim said:2,the:1``), or None when it would not read back as exactly the same JSON."""
    if not counts_json.startswith('{"":') or not counts_json.endswith("}"):
        return None
    head, sep, rest = counts_json[4:-1].partition(',"')
    short = head
    if sep:
        short += "," + rest.replace('":1,"', " ").replace('":', ":").replace(',"', ",")
    if not short[:1].isdigit():
        return None
    head, sep, rest = short.partition(",")
    back = '{"":' + head + "}"
    if sep:
        body = rest.replace(",", ',"').replace(":", '":').replace(" ", '":1,"')
        back = '{"":' + head + ',"' + body + "}"
    return short if back == counts_json else None


def compact_packed_counts(conn: sqlite3.Connection) -> None:
    """Compress each chunk's packed counts again as compact text (those that read back
    as the same JSON), a page of ids at a time."""
    unpacker = zstandard.ZstdDecompressor()
    packer = zstandard.ZstdCompressor(level=_PACK_LEVEL, write_checksum=True)
    last = 0
    while True:
        rows = conn.execute(
            "SELECT id, packed_counts FROM chunks WHERE id > ? AND packed_counts IS NOT NULL "
            "ORDER BY id LIMIT 2000",
            (last,),
        ).fetchall()
        if not rows:
            return
        changed = []
        for cid, packed in rows:
            data = _plain_frame(unpacker, bytes(packed))
            if data is None:
                continue  # a damaged cache stays as it is: it reads as none
            short = compact_counts(data.decode())
            if short is not None:
                changed.append((packer.compress(short.encode()), int(cid)))
        conn.executemany("UPDATE chunks SET packed_counts = ? WHERE id = ?", changed)
        last = int(rows[-1][0])


# the store's dictionary for its cached counts (m_chunk_term_counts_dictionary): trained
# on the counts of at most this many of the newest chunks, of this size, when at least
# this many of them are compressed
_DICTIONARY_SAMPLES = 4000
_DICTIONARY_SIZE = 112640
_DICTIONARY_MIN_SAMPLES = 200
# a chunk's compressed counts hold at most this many bytes (packed_counts.MAX_UNPACKED);
# a sample for the dictionary at most the second, and the samples at most the third
_MOST_UNPACKED = 64 * 1024 * 1024
_MOST_SAMPLE = 1024 * 1024
_MOST_SAMPLES = 64 * 1024 * 1024


def dictionary_packed_counts(conn: sqlite3.Connection) -> None:
    """Train the store's dictionary for its compressed counts from its newest chunks' and
    compress every chunk's compressed counts again with it, a page of ids at a time (a
    store of too few compressed counts gets none: its writes train one later)."""
    top = int(conn.execute("SELECT coalesce(max(id), 0) FROM chunks").fetchone()[0])
    unpacker = zstandard.ZstdDecompressor()
    samples: list[bytes | bytearray | memoryview] = []
    held = 0
    for (packed,) in conn.execute(
        "SELECT CAST(packed_counts AS BLOB) FROM chunks WHERE id > ? "
        "AND packed_counts IS NOT NULL ORDER BY id",
        (top - _DICTIONARY_SAMPLES,),
    ):
        text = _plain_frame(unpacker, bytes(packed), _MOST_SAMPLE)
        if text is not None:
            samples.append(text)
            held += len(text)
            if held > _MOST_SAMPLES:
                break
    if len(samples) < _DICTIONARY_MIN_SAMPLES:
        return
    try:
        made = zstandard.train_dictionary(_DICTIONARY_SIZE, samples, level=_PACK_LEVEL)
    except zstandard.ZstdError:
        return
    conn.execute(
        "INSERT OR IGNORE INTO count_dictionaries (id, data) VALUES (?, ?)",
        (int(made.dict_id()), made.as_bytes()),
    )
    packer = zstandard.ZstdCompressor(level=_PACK_LEVEL, dict_data=made, write_checksum=True)
    last = 0
    while True:
        rows = conn.execute(
            "SELECT id, CAST(packed_counts AS BLOB) FROM chunks WHERE id > ? "
            "AND packed_counts IS NOT NULL ORDER BY id LIMIT 2000",
            (last,),
        ).fetchall()
        if not rows:
            return
        changed = [
            (packer.compress(text), int(cid))
            for cid, packed in rows
            if (text := _plain_frame(unpacker, bytes(packed))) is not None
        ]
        conn.executemany("UPDATE chunks SET packed_counts = ? WHERE id = ?", changed)
        last = int(rows[-1][0])


def _plain_frame(
    unpacker: zstandard.ZstdDecompressor, packed: bytes, most: int = _MOST_UNPACKED
) -> bytes | None:
    """What a frame compressed without a dictionary holds; None for a damaged one (it
    stays as it is: it reads as no cache) and for one that says it holds more than
    ``most`` bytes (a damaged or hostile file: zstd would allocate what it says)."""
    try:
        if not 0 <= zstandard.frame_content_size(packed) <= most:
            return None
        data: bytes = unpacker.decompress(packed)
        data.decode()
    except (zstandard.ZstdError, UnicodeDecodeError):
        return None
    return data


# the column an entry's stored block hash moves to (m_entry_block_hash_lossy_only): NULL
# where it equals content_hash (every entry but a lossy put's); ``block_hash`` reads it
# back as a generated column
_BLOCK_HASH_READ = "coalesce(block_own, content_hash)"


def block_hash_lossy_only(conn: sqlite3.Connection) -> None:
    """Keep an entry's block hash only where it differs from ``content_hash``: the stored
    column becomes ``block_own`` (NULL: the same as ``content_hash``) and ``block_hash`` a
    virtual column reading it back, so every statement reading ``block_hash`` reads what
    it read before. The triggers and the index naming ``block_hash`` are made again on the
    new columns (a trigger fires on an update of a stored column, not of a generated one)."""
    named = conn.execute(
        "SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' AND sql LIKE '%block_hash%'"
    ).fetchall()
    for name, _ in named:
        conn.execute(f'DROP TRIGGER "{name}"')
    conn.execute("DROP INDEX IF EXISTS entries_block")
    conn.execute("ALTER TABLE entries RENAME COLUMN block_hash TO block_own")
    _drop_not_null(conn, "block_own")
    conn.execute(
        "ALTER TABLE entries ADD COLUMN block_hash BLOB "
        f"GENERATED ALWAYS AS ({_BLOCK_HASH_READ}) VIRTUAL"
    )
    conn.execute("UPDATE entries SET block_own = NULL WHERE block_own = content_hash")
    conn.execute(
        "CREATE INDEX entries_block ON entries(block_hash) WHERE block_hash != content_hash"
    )
    for _, sql in named:
        conn.execute(_on_stored_columns(str(sql)))


def _on_stored_columns(trigger: str) -> str:
    """A trigger's declaration with ``block_own`` where it must name a stored column: in
    its ``UPDATE OF`` list and in its type checks of the value written."""
    head, sep, body = trigger.partition(" ON ")
    if "UPDATE OF" in head:
        head = head.replace("block_hash", "block_own")
    return head + sep + body.replace("typeof(new.block_hash)", "typeof(new.block_own)")


def _drop_not_null(conn: sqlite3.Connection, column: str) -> None:
    """Remove ``NOT NULL`` from one column of ``entries`` by editing its declaration in
    place (the procedure SQLite documents: no stored byte changes)."""
    declared = str(
        conn.execute(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'entries'"
        ).fetchone()[0]
    )
    start = declared.find(f"{column} ")
    end = declared.find(",", start)
    if start < 0 or end < 0:
        raise OffloadError(f"entries.{column} is not declared as this migration expects")
    if "NOT NULL" not in declared[start:end]:
        return
    edited = declared[:start] + declared[start:end].replace(" NOT NULL", "", 1) + declared[end:]
    version = int(conn.execute("PRAGMA schema_version").fetchone()[0])
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(
        "UPDATE sqlite_schema SET sql = ? WHERE type = 'table' AND name = 'entries'", (edited,)
    )
    conn.execute(f"PRAGMA schema_version = {version + 1}")
    conn.execute("PRAGMA writable_schema = OFF")
