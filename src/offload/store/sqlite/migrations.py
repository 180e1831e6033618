"""The SQLite schema's migrations, registered in order with :func:`migration`.

Each runs inside the transaction store/sqlite/db.py opens for it, so a crash mid-migration
leaves the previous schema. A migration runs its own SQL, or the frozen code of
store/sqlite/frozen.py, never the live store modules: an old store migrated later gets the
same result as when the migration was new.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from offload.errors import StoreError
from offload.store import legacy_tallies, legacy_vectors
from offload.store.sqlite import frozen

Migration = Callable[[sqlite3.Connection], None]
MIGRATIONS: list[tuple[str, Migration]] = []


def migration(fn: Migration) -> Migration:
    """Register a schema migration; they run in the order they are defined."""
    MIGRATIONS.append((fn.__name__, fn))
    return fn


def run_script(conn: sqlite3.Connection, script: str) -> None:
    """Run several statements inside the current transaction.

    ``executescript`` would commit first, breaking a migration's atomicity.
    """
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            conn.execute(pending)
            pending = ""
    if pending.strip():
        raise StoreError("incomplete SQL statement in migration script")


# The first release's schema, as it ran then (its text is what sqlite_master keeps):
# later changes are migrations of their own.
INITIAL_SCHEMA = """
        CREATE TABLE blocks (
            id INTEGER PRIMARY KEY,
            hash TEXT NOT NULL UNIQUE,
            size INTEGER NOT NULL,          -- plaintext bytes
            lines INTEGER NOT NULL,
            codec TEXT NOT NULL,            -- 'zstd' or 'raw'
            data BLOB NOT NULL,
            created REAL NOT NULL
        );
        CREATE TABLE entries (
            id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: old ids answer as tombstones
            kind TEXT NOT NULL,
            topic TEXT NOT NULL DEFAULT '',
            tags TEXT NOT NULL DEFAULT '',         -- space-separated
            summary TEXT NOT NULL DEFAULT '',
            salience REAL NOT NULL DEFAULT 0.5 CHECK (salience BETWEEN 0 AND 1),
            status TEXT NOT NULL DEFAULT 'cold' CHECK (status IN ('cold', 'hot')),
            pinned INTEGER NOT NULL DEFAULT 0,
            tokens INTEGER NOT NULL,
            content_hash TEXT NOT NULL,            -- what the caller sent
            block_hash TEXT NOT NULL REFERENCES blocks(hash),  -- what is stored
            source TEXT NOT NULL DEFAULT '',
            scope TEXT NOT NULL DEFAULT '',
            created REAL NOT NULL,
            accessed REAL NOT NULL,
            access_count INTEGER NOT NULL DEFAULT 0,
            expires REAL,
            regenerate TEXT NOT NULL DEFAULT '',
            nonce TEXT,
            owner_pid INTEGER,
            checked_out REAL,
            checked_in REAL
        );
        -- content_hash first: the same index serves dedup and lookups by hash or prefix
        CREATE UNIQUE INDEX entries_dedup ON entries(content_hash, scope);
        CREATE INDEX entries_block ON entries(block_hash);
        CREATE INDEX entries_rank ON entries(pinned DESC, salience DESC);
        CREATE INDEX entries_source ON entries(source);
        CREATE INDEX entries_expires ON entries(expires) WHERE expires IS NOT NULL;
        CREATE INDEX entries_hot ON entries(status) WHERE status = 'hot';

        CREATE TABLE labels (
            label TEXT PRIMARY KEY,
            entry_id INTEGER NOT NULL REFERENCES entries(id) ON DELETE CASCADE
        );
        CREATE INDEX labels_entry ON labels(entry_id);

        CREATE TABLE tombstones (
            id INTEGER PRIMARY KEY,
            entry_id INTEGER,
            content_hash TEXT NOT NULL,
            labels TEXT NOT NULL DEFAULT '',       -- space-separated
            topic TEXT NOT NULL DEFAULT '',
            source TEXT NOT NULL DEFAULT '',
            scope TEXT NOT NULL DEFAULT '',
            reason TEXT NOT NULL,
            gone REAL NOT NULL,
            regenerate TEXT NOT NULL DEFAULT ''
        );
        CREATE INDEX tombstones_entry ON tombstones(entry_id);
        CREATE INDEX tombstones_hash ON tombstones(content_hash);
        CREATE TABLE tombstone_labels (
            label TEXT PRIMARY KEY,
            tombstone_id INTEGER NOT NULL REFERENCES tombstones(id) ON DELETE CASCADE
        );

        CREATE TABLE chunks (
            id INTEGER PRIMARY KEY,
            block_id INTEGER NOT NULL,             -- blocks.id (an integer keeps the index small)
            start_line INTEGER NOT NULL,
            end_line INTEGER NOT NULL,
            start INTEGER NOT NULL,                -- character offsets into the body
            end INTEGER NOT NULL
        );
        CREATE INDEX chunks_block ON chunks(block_id);
        -- contentless: the text lives once, compressed, in blocks
        CREATE VIRTUAL TABLE chunks_fts USING fts5(
            text, content='', detail=column, tokenize='unicode61 remove_diacritics 2'
        );
        -- every distinct term once: scanned for partial identifiers and typos when the
        -- index itself finds nothing (a trigram index over it cost 0.2x the raw text)
        CREATE TABLE terms (term TEXT PRIMARY KEY) WITHOUT ROWID;
        CREATE VIRTUAL TABLE meta_fts USING fts5(
            topic, summary, tags, source, tokenize='unicode61 remove_diacritics 2'
        );

        CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
        CREATE TABLE state (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,                   -- JSON
            updated REAL NOT NULL,
            PRIMARY KEY (namespace, key)
        );
"""


@migration
def m001_initial(conn: sqlite3.Connection) -> None:
    run_script(conn, INITIAL_SCHEMA)


@migration
def m002_listing_indexes(conn: sqlite3.Connection) -> None:
    # listing and counting read only these columns: covering indexes keep a 10k-entry
    # matrix page and peek in the low milliseconds
    run_script(
        conn,
        """
        DROP INDEX IF EXISTS entries_rank;
        CREATE INDEX entries_rank ON entries(pinned DESC, salience DESC, accessed DESC, id DESC);
        CREATE INDEX entries_scope_rank
            ON entries(scope, pinned DESC, salience DESC, accessed DESC, id DESC);
        CREATE INDEX entries_scope_stats ON entries(scope, kind, status, pinned, tokens, expires);
        """,
    )


@migration
def m003_tighter_index_merging(conn: sqlite3.Connection) -> None:
    # merge index segments two at a time (default 4): ~3% less disk, no slower writes here
    conn.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('automerge', 2)")


@migration
def m004_scope_stats(conn: sqlite3.Connection) -> None:
    # peek reads these per-(scope, kind) sums instead of scanning every entry; triggers keep
    # them exact inside the same transaction as the change
    run_script(
        conn,
        """
        CREATE TABLE scope_stats (
            scope TEXT NOT NULL,
            kind TEXT NOT NULL,
            entries INTEGER NOT NULL DEFAULT 0,
            tokens INTEGER NOT NULL DEFAULT 0,
            hot INTEGER NOT NULL DEFAULT 0,
            pinned INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (scope, kind)
        ) WITHOUT ROWID;
        INSERT INTO scope_stats (scope, kind, entries, tokens, hot, pinned)
            SELECT scope, kind, count(*), sum(tokens), sum(status = 'hot'), sum(pinned)
            FROM entries GROUP BY scope, kind;
        CREATE TRIGGER scope_stats_insert AFTER INSERT ON entries BEGIN
            INSERT INTO scope_stats (scope, kind, entries, tokens, hot, pinned)
                VALUES (new.scope, new.kind, 1, new.tokens, new.status = 'hot', new.pinned)
            ON CONFLICT (scope, kind) DO UPDATE SET
                entries = entries + 1, tokens = tokens + excluded.tokens,
                hot = hot + excluded.hot, pinned = pinned + excluded.pinned;
        END;
        CREATE TRIGGER scope_stats_delete AFTER DELETE ON entries BEGIN
            UPDATE scope_stats SET entries = entries - 1, tokens = tokens - old.tokens,
                hot = hot - (old.status = 'hot'), pinned = pinned - old.pinned
            WHERE scope = old.scope AND kind = old.kind;
        END;
        CREATE TRIGGER scope_stats_update AFTER UPDATE OF scope, kind, tokens, status, pinned
        ON entries BEGIN
            UPDATE scope_stats SET entries = entries - 1, tokens = tokens - old.tokens,
                hot = hot - (old.status = 'hot'), pinned = pinned - old.pinned
            WHERE scope = old.scope AND kind = old.kind;
            INSERT INTO scope_stats (scope, kind, entries, tokens, hot, pinned)
                VALUES (new.scope, new.kind, 1, new.tokens, new.status = 'hot', new.pinned)
            ON CONFLICT (scope, kind) DO UPDATE SET
                entries = entries + 1, tokens = tokens + excluded.tokens,
                hot = hot + excluded.hot, pinned = pinned + excluded.pinned;
        END;
        """,
    )


@migration
def m_search_analysed_index(conn: sqlite3.Connection) -> None:
    # The index holds terms analysed in Python (offload.core.text.analysis: stems,
    # identifiers split and whole, JSON escapes seen through), so queries match them
    # exactly. Existing stores are reindexed here, once: the chunk offsets stay, only their
    # terms are re-derived (measured in docs/benchmarks/search.md, "Search").
    run_script(
        conn,
        """
        DROP TABLE IF EXISTS chunks_fts;
        DROP TABLE IF EXISTS meta_fts;
        DELETE FROM terms;
        -- detail=full: a contentless table with detail=column gives bm25() = 0 for every
        -- row (the old chunks_fts ranked by recency alone); positions cost 0.42x the raw
        -- text against 0.30x
        CREATE VIRTUAL TABLE search_body USING fts5(
            terms, content='', tokenize="unicode61 remove_diacritics 0 categories 'L* N* Co M* P* S*'"
        );
        CREATE VIRTUAL TABLE search_meta USING fts5(
            topic, summary, tags, labels, source, detail=column, tokenize="unicode61 remove_diacritics 0 categories 'L* N* Co M* P* S*'"
        );
        INSERT INTO search_body (search_body, rank) VALUES ('automerge', 2);
        -- an entry's neighbours: the entries just before and after it in its scope and kind
        CREATE INDEX entries_sequence ON entries(scope, kind, id);
        """,
    )
    frozen.reindex_chunks(conn)
    frozen.rebuild_meta(conn)


@migration
def m_search_index_counted_runs(conn: sqlite3.Connection) -> None:
    # analysis.ANALYSIS_VERSION 2: a chunk's terms are grouped by run of text (index_text),
    # so rows written by version 1 could not be deleted exactly; rebuild them once. A store
    # that m_search_analysed_index rebuilt in this same run is already current (it was
    # rebuilt twice on first open: 17 s for 5,000 entries)
    if frozen.built_with_current_analysis(conn):
        return
    conn.execute("INSERT INTO search_body (search_body) VALUES ('delete-all')")
    conn.execute("DELETE FROM terms")
    frozen.reindex_chunks(conn)
    frozen.rebuild_meta(conn)


@migration
def m_entry_vectors(conn: sqlite3.Connection) -> None:
    # hybrid search: one embedding per entry (store/write/vectors.py); AUTOINCREMENT so a row id
    # is never reused and in-process matrices refresh by the largest id
    run_script(
        conn,
        """
        CREATE TABLE entry_vectors (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            entry_id INTEGER NOT NULL UNIQUE REFERENCES entries(id) ON DELETE CASCADE,
            model TEXT NOT NULL,            -- the embedding model's id
            data BLOB NOT NULL              -- float32 scale, then int8 components
        );
        """,
    )


@migration
def m_index_mcp_lossy_originals(conn: sqlite3.Connection) -> None:
    # An MCP offload with compress=true now indexes the original beside
    # the lossy body (put(index_original=True)). Originals stored before are indexed here,
    # once, with the default chunk sizes. Only the MCP surface stores lossy compressions;
    # the proxy's kept originals (exact JSON beside an indexed transcript) stay unindexed.
    rows = conn.execute(
        "SELECT DISTINCT b.id, b.hash, b.codec, CAST(b.data AS BLOB) AS data FROM entries e "
        "JOIN blocks b ON b.hash = e.content_hash WHERE e.source = 'mcp' "
        "AND e.content_hash != e.block_hash AND b.size > 0 "
        "AND NOT EXISTS (SELECT 1 FROM chunks c WHERE c.block_id = b.id) ORDER BY b.id"
    ).fetchall()
    for row in rows:
        text = frozen.block_text(row["hash"], row["codec"], bytes(row["data"]))
        if text is not None:  # else a corrupt block: doctor names it
            frozen.index_block(conn, int(row["id"]), text)


@migration
def m_entry_owner_host(conn: sqlite3.Connection) -> None:
    # which machine's process holds a checkout: a store shared by several machines resets
    # only its own machine's dead checkouts (lifecycle.stale_hot)
    conn.execute("ALTER TABLE entries ADD COLUMN owner_host TEXT")


@migration
def m_state_version(conn: sqlite3.Connection) -> None:
    # a saved value's version, raised by every write of it (store/state.py), so a
    # process caching one (the proxy's sessions) sees when another process wrote it. Rows
    # saved before start at 1; a key never written reads as 0.
    conn.execute("ALTER TABLE state ADD COLUMN version INTEGER NOT NULL DEFAULT 1")


@migration
def m_search_index_written_forms(conn: sqlite3.Connection) -> None:
    # analysis.ANALYSIS_VERSION 3: each word's written form is indexed beside its stem
    # ("expecting" beside "expect"), so a query's exact word outranks the stem's other
    # inflections. Stores built by an older analysis are rebuilt once; a store that an
    # earlier migration rebuilt in this same run is already current.
    if frozen.built_with_current_analysis(conn):
        return
    conn.execute("INSERT INTO search_body (search_body) VALUES ('delete-all')")
    frozen.reindex_chunks(conn)
    frozen.rebuild_meta(conn)


@migration
def m_additive_tallies(conn: sqlite3.Connection) -> None:
    # the gateway's calls and the proxy's metrics were saved as totals (JSON in
    # state), so two processes on one store overwrote each other's counts. They are now
    # counters every write adds to (store/tallies.py); the totals saved so far move there,
    # and what else a value held (a proxy session's title and turns) stays in state.
    conn.execute(
        "CREATE TABLE tallies (namespace TEXT NOT NULL, key TEXT NOT NULL, name TEXT NOT NULL, "
        "value INTEGER NOT NULL, PRIMARY KEY (namespace, key, name)) WITHOUT ROWID"
    )
    marks = ", ".join("?" * len(legacy_tallies.LEGACY_NAMESPACES))
    found = conn.execute(
        f"SELECT namespace, key, value FROM state WHERE namespace IN ({marks})",
        legacy_tallies.LEGACY_NAMESPACES,
    ).fetchall()
    legacy_tallies.move_legacy(conn.execute, found, "?")


@migration
def m_entry_chunks_map(conn: sqlite3.Connection) -> None:
    # each chunk's entries stored (store/write/chunkmap.py), kept by triggers, so a
    # filtered search reads a filter's chunks and maps scored chunks to entries by integer
    # keys instead of entry -> block by hash -> chunks (~20 us per entry at 100k entries)
    run_script(conn, frozen.CHUNK_MAP_SCHEMA)
    conn.execute(frozen.CHUNK_MAP_FILL)


@migration
def m_chunk_term_counts(conn: sqlite3.Connection) -> None:
    # speed at 100k entries: each chunk's analysed term counts (index.term_counts),
    # written with the chunk, so ranking by neighbourhood (store/search/context.py) reads ~900
    # small JSON objects a search instead of decompressing and re-analysing their text
    # (two thirds of a search's time). NULL until known: a chunk stored before is scored
    # from its text as before, and `offload doctor --reindex` fills every chunk in.
    conn.execute("ALTER TABLE chunks ADD COLUMN term_counts TEXT")


@migration
def m_chunk_term_counts_length(conn: sqlite3.Connection) -> None:
    # speed at 100k entries: each cached term-count object leads with its length (key
    # "", index.term_counts), so the neighbourhood scoring reads its query terms' counts
    # and the length by string search instead of parsing ~900 whole objects a search (a
    # third of its time). Computed here in SQL, the same sum the reader took in Python.
    conn.execute(
        "UPDATE chunks SET term_counts = '{\"\":' || "
        "(SELECT coalesce(sum(value), 0) FROM json_each(chunks.term_counts)) || "
        "CASE WHEN term_counts = '{}' THEN '}' ELSE ',' || substr(term_counts, 2) END "
        "WHERE term_counts IS NOT NULL AND substr(term_counts, 1, 4) != '{\"\":'"
    )


@migration
def m_state_retired(conn: sqlite3.Connection) -> None:
    # a deleted state key's last version (its deletion's), so that saving the key again
    # never reuses a version a stale compare-and-swap writer may hold (store/state.py)
    conn.execute(
        "CREATE TABLE state_retired (namespace TEXT NOT NULL, key TEXT NOT NULL, "
        "version INTEGER NOT NULL, PRIMARY KEY (namespace, key)) WITHOUT ROWID"
    )


@migration
def m_chunk_generation(conn: sqlite3.Connection) -> None:
    # speed at 100k entries: a search process keeps an index of the chunks in memory
    # (store/search/memory/resident.py) and reads only the chunks above the largest id it holds before
    # each search; a deleted or rewritten chunk (forget, gc, reindex, then a reused rowid)
    # bumps this generation so it rebuilds instead of ranking a stale row
    run_script(
        conn,
        """
        CREATE TABLE IF NOT EXISTS chunk_generation (
            id INTEGER PRIMARY KEY CHECK (id = 0),
            value INTEGER NOT NULL
        );
        INSERT OR IGNORE INTO chunk_generation (id, value) VALUES (0, 0);
        CREATE TRIGGER IF NOT EXISTS chunk_generation_delete AFTER DELETE ON chunks BEGIN
            UPDATE chunk_generation SET value = value + 1 WHERE id = 0;
        END;
        CREATE TRIGGER IF NOT EXISTS chunk_generation_update AFTER UPDATE ON chunks BEGIN
            UPDATE chunk_generation SET value = value + 1 WHERE id = 0;
        END;
        """,
    )


@migration
def m_entry_map_generation(conn: sqlite3.Connection) -> None:
    # a search process holds the chunk -> entry map in memory (store/search/memory/entrymap.py)
    # and reads only the rows of entries and chunks above the largest ids it read; any
    # other change to the map bumps this generation so it rebuilds (doctor's refill
    # bumps it itself, store/write/chunkmap.py)
    bump = "UPDATE entry_map_generation SET value = value + 1 WHERE id = 0;"
    run_script(
        conn,
        f"""
        CREATE TABLE IF NOT EXISTS entry_map_generation (
            id INTEGER PRIMARY KEY CHECK (id = 0),
            value INTEGER NOT NULL
        );
        INSERT OR IGNORE INTO entry_map_generation (id, value) VALUES (0, 0);
        CREATE TRIGGER IF NOT EXISTS entry_map_row_gone AFTER DELETE ON entry_chunks
        BEGIN {bump} END;
        CREATE TRIGGER IF NOT EXISTS entry_map_row_changed AFTER UPDATE ON entry_chunks
        BEGIN {bump} END;
        CREATE TRIGGER IF NOT EXISTS entry_map_entry_gone AFTER DELETE ON entries
        BEGIN {bump} END;
        CREATE TRIGGER IF NOT EXISTS entry_map_entry_moved
        AFTER UPDATE OF id, block_hash, content_hash ON entries BEGIN {bump} END;
        CREATE TRIGGER IF NOT EXISTS entry_map_entry_below AFTER INSERT ON entries
        WHEN new.id < (SELECT max(id) FROM entries) BEGIN {bump} END;
        CREATE TRIGGER IF NOT EXISTS entry_map_chunk_gone AFTER DELETE ON chunks
        BEGIN {bump} END;
        CREATE TRIGGER IF NOT EXISTS entry_map_chunk_moved
        AFTER UPDATE OF id, block_id ON chunks BEGIN {bump} END;
        CREATE TRIGGER IF NOT EXISTS entry_map_chunk_below AFTER INSERT ON chunks
        WHEN new.id < (SELECT max(id) FROM chunks) BEGIN {bump} END;
        """,
    )


@migration
def m_entry_changes(conn: sqlite3.Connection) -> None:
    # speed at 100k entries: a search process holds every entry's filter and ranking
    # columns in memory (store/search/memory/entrykeys.py) and reads, before each search, only the rows
    # stamped since its last read. Writers are serialised, so a counter bumped by every
    # insert and every update of a held column is a watermark; a deleted entry or a changed
    # id bumps entry_generation (the copy is rebuilt). NULL for the rows already stored: a
    # full read takes them, and any later change stamps them.
    stamp = (
        "UPDATE entry_stamp SET value = value + 1 WHERE id = 0; "
        "UPDATE entries SET changed = (SELECT value FROM entry_stamp WHERE id = 0) "
        "WHERE id = new.id;"
    )
    bump = "UPDATE entry_generation SET value = value + 1 WHERE id = 0;"
    held = "scope, kind, salience, accessed, access_count, expires, status, pinned, source, created"
    run_script(
        conn,
        f"""
        ALTER TABLE entries ADD COLUMN changed INTEGER;
        CREATE INDEX entries_changed ON entries(changed) WHERE changed IS NOT NULL;
        CREATE TABLE entry_stamp (id INTEGER PRIMARY KEY CHECK (id = 0), value INTEGER NOT NULL);
        INSERT INTO entry_stamp (id, value) VALUES (0, 0);
        CREATE TABLE entry_generation (
            id INTEGER PRIMARY KEY CHECK (id = 0),
            value INTEGER NOT NULL
        );
        INSERT INTO entry_generation (id, value) VALUES (0, 0);
        CREATE TRIGGER entry_changes_added AFTER INSERT ON entries BEGIN {stamp} END;
        CREATE TRIGGER entry_changes_updated AFTER UPDATE OF {held} ON entries
        BEGIN {stamp} END;
        CREATE TRIGGER entry_changes_gone AFTER DELETE ON entries BEGIN {bump} END;
        CREATE TRIGGER entry_changes_renumbered AFTER UPDATE OF id ON entries BEGIN {bump} END;
        """,
    )


@migration
def m_chunk_term_counts_packed(conn: sqlite3.Connection) -> None:
    # the larger cached term counts zstd-compressed in a column of their own
    # (store/write/packed_counts.py): as JSON text they were 0.80x the raw bytes of bulky tool
    # outputs, the largest part of a store on disk. term_counts is left NULL for them, so
    # an older offload reading the file scores those chunks from their text. Rewritten a
    # page of ids at a time, so memory stays bounded on a large store.
    conn.execute("ALTER TABLE chunks ADD COLUMN packed_counts BLOB")
    _pack_counts(conn, frozen.MIN_PACKED)


def _pack_counts(conn: sqlite3.Connection, min_packed: int) -> None:
    """Compress the cached counts kept as text of ``min_packed`` bytes or more, a page of
    ids at a time."""
    last = 0
    while True:
        rows = conn.execute(
            "SELECT id, term_counts FROM chunks WHERE id > ? "
            "AND length(CAST(term_counts AS BLOB)) >= ? ORDER BY id LIMIT 2000",
            (last, min_packed),
        ).fetchall()
        if not rows:
            return
        frozen.rewrite_counts(conn, [(int(r[0]), r[1]) for r in rows], min_packed)
        last = int(rows[-1][0])


@migration
def m_entry_event_time(conn: sqlite3.Connection) -> None:
    # when what an entry tells happened (a conversation's date, a message's timestamp),
    # apart from when it was stored (created): NULL when the writer did not say. A search
    # whose query names a date prefers entries near it (store/search/ranking.py).
    conn.execute("ALTER TABLE entries ADD COLUMN event_time REAL")


@migration
def m_chunk_term_counts_packed_small(conn: sqlite3.Connection) -> None:
    # size on disk: the cached counts of chat turns (~500 bytes of JSON each, below the
    # first bound) were 2.1x the raw text of a store of turns, the largest part of it;
    # compressed they take half. A search reads them from its in-memory index
    # (store/search/memory/resident.py), which decompresses each once when it is built.
    _pack_counts(conn, frozen.MIN_PACKED_SMALL)


@migration
def m_entry_vectors_four_bits(conn: sqlite3.Connection) -> None:
    # size on disk: each vector in 4 bits a component instead of 8 (store/write/vectors.py,
    # pack), half its bytes; LoCoMo recall moved by less than 0.005. Rewritten a page of
    # ids at a time; the row ids stay, so no in-process matrix reloads for it.
    last = 0
    while True:
        rows = conn.execute(
            "SELECT id, CAST(data AS BLOB) FROM entry_vectors WHERE id > ? ORDER BY id LIMIT 2000",
            (last,),
        ).fetchall()
        if not rows:
            return
        packed = [(legacy_vectors.vector_in_four_bits(bytes(r[1])), int(r[0])) for r in rows]
        conn.executemany(
            "UPDATE entry_vectors SET data = ? WHERE id = ?", [p for p in packed if p[0]]
        )
        last = int(rows[-1][0])


@migration
def m_chunk_term_counts_compact(conn: sqlite3.Connection) -> None:
    # size on disk: the compressed cached counts hold a compact text instead of JSON
    # (store/write/packed_counts.py, compact), 0.82x the bytes for a chat turn's counts
    frozen.compact_packed_counts(conn)


@migration
def m_entry_rank_indexes_ascending(conn: sqlite3.Connection) -> None:
    # size on disk: the listing indexes were declared newest-first (accessed DESC, id
    # DESC), so every new entry went in at the index's left end, where a full page splits
    # in two half-empty ones: they took twice their packed size (0.42x the raw text of 20k
    # chat turns against 0.22x). Declared ascending, new entries go in at the right end;
    # the listing reads them backwards for the same order (no sort step in the plan).
    run_script(
        conn,
        """
        DROP INDEX IF EXISTS entries_rank;
        DROP INDEX IF EXISTS entries_scope_rank;
        CREATE INDEX entries_rank ON entries(pinned, salience, accessed, id);
        CREATE INDEX entries_scope_rank ON entries(scope, pinned, salience, accessed, id);
        """,
    )


@migration
def m_hashes_as_bytes(conn: sqlite3.Connection) -> None:
    # size on disk: a sha256 kept as its 32 bytes instead of 64 hex characters, in the
    # blocks' and the entries' rows and the three indexes on them (blocks.hash,
    # entries_dedup, entries_block: 0.89x the raw text of 20k chat turns as hex). Callers
    # still see hex (store/schema.py). The blocks go first, so the chunk map's trigger on
    # the entries' hashes finds each entry's blocks under its new key; the foreign key from
    # entries.block_hash is checked at the commit, when both sides are bytes.
    conn.execute("PRAGMA defer_foreign_keys = ON")
    # (a value that is not 64 hex digits, which no offload wrote, stays as it was: doctor
    # names its block or entry)
    conn.execute(
        "UPDATE blocks SET hash = coalesce(unhex(hash), hash) "
        "WHERE typeof(hash) = 'text' AND length(hash) = 64"
    )
    conn.execute(
        "UPDATE entries SET content_hash = CASE WHEN typeof(content_hash) = 'text' "
        "AND length(content_hash) = 64 THEN coalesce(unhex(content_hash), content_hash) "
        "ELSE content_hash END, block_hash = CASE WHEN typeof(block_hash) = 'text' "
        "AND length(block_hash) = 64 THEN coalesce(unhex(block_hash), block_hash) "
        "ELSE block_hash END "
        "WHERE typeof(content_hash) = 'text' OR typeof(block_hash) = 'text'"
    )
    # An offload of the release before, still running, would write its hashes as hex: a
    # block stored again beside its twin, an entry its dedup misses, rows nothing here
    # finds by hash. It is refused instead, and told what to do (nothing of its write lands).
    refuse = (
        "SELECT RAISE(ABORT, 'this store keeps its hashes as bytes since it was opened by a "
        "newer offload: an older offload process is writing to it; restart that process "
        "with the newer release (nothing was written)');"
    )
    run_script(
        conn,
        f"""
        CREATE TRIGGER blocks_hash_bytes BEFORE INSERT ON blocks
        WHEN typeof(new.hash) = 'text' BEGIN {refuse} END;
        CREATE TRIGGER blocks_hash_bytes_changed BEFORE UPDATE OF hash ON blocks
        WHEN typeof(new.hash) = 'text' BEGIN {refuse} END;
        CREATE TRIGGER entries_hash_bytes BEFORE INSERT ON entries
        WHEN typeof(new.content_hash) = 'text' OR typeof(new.block_hash) = 'text'
        BEGIN {refuse} END;
        CREATE TRIGGER entries_hash_bytes_changed
        BEFORE UPDATE OF content_hash, block_hash ON entries
        WHEN typeof(new.content_hash) = 'text' OR typeof(new.block_hash) = 'text'
        BEGIN {refuse} END;
        """,
    )


@migration
def m_chunk_term_counts_dictionary(conn: sqlite3.Connection) -> None:
    # size on disk: the compressed cached counts of a store use a zstd dictionary trained
    # on its own counts (store/write/count_dictionary.py): a pair of chat turns' ~210
    # bytes take ~140. A store of fewer compressed counts than a dictionary needs trains
    # one later, when its writes have stored enough.
    conn.execute("CREATE TABLE count_dictionaries (id INTEGER PRIMARY KEY, data BLOB NOT NULL)")
    frozen.dictionary_packed_counts(conn)


@migration
def m_vector_model_ids(conn: sqlite3.Connection) -> None:
    # size on disk: each vector's model as the id of its name (its digits: the column is
    # text) instead of the name (25 bytes a row: 0.09x the raw text of 20k chat turns).
    # Rows are still written with the name (store/write/vectors.py, as PostgreSQL keeps
    # it, and as an older offload still running writes it): a trigger gives the name an id
    # and puts the id in its place, inside the statement that wrote it. Every model name
    # holds a letter (config.EMBEDDING_MODELS), an id none.
    named = (
        # (no conflict to resolve: the outer statement's INSERT OR REPLACE would replace
        # the name's row, and its id, instead of ignoring it)
        "INSERT INTO vector_models (name) SELECT new.model "
        "WHERE NOT EXISTS (SELECT 1 FROM vector_models WHERE name = new.model); "
        "UPDATE entry_vectors SET model = "
        "(SELECT CAST(id AS TEXT) FROM vector_models WHERE name = new.model) WHERE id = new.id;"
    )
    run_script(
        conn,
        f"""
        CREATE TABLE vector_models (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
        INSERT INTO vector_models (name)
            SELECT DISTINCT model FROM entry_vectors WHERE model GLOB '*[^0-9]*' ORDER BY model;
        UPDATE entry_vectors SET model =
            (SELECT CAST(id AS TEXT) FROM vector_models WHERE name = entry_vectors.model)
            WHERE model GLOB '*[^0-9]*';
        CREATE TRIGGER entry_vectors_model_named AFTER INSERT ON entry_vectors
        WHEN new.model GLOB '*[^0-9]*' BEGIN {named} END;
        CREATE TRIGGER entry_vectors_model_renamed AFTER UPDATE OF model ON entry_vectors
        WHEN new.model GLOB '*[^0-9]*' BEGIN {named} END;
        """,
    )


@migration
def m_entry_changes_event_time(conn: sqlite3.Connection) -> None:
    # the entries' columns held in memory include the event time (store/search/neighbours.py
    # reads it: the stretch a hit was told in): an update of it stamps the row, as an
    # update of any other held column does (m_entry_changes)
    stamp = (
        "UPDATE entry_stamp SET value = value + 1 WHERE id = 0; "
        "UPDATE entries SET changed = (SELECT value FROM entry_stamp WHERE id = 0) "
        "WHERE id = new.id;"
    )
    held = (
        "scope, kind, salience, accessed, access_count, expires, status, pinned, source, "
        "created, event_time"
    )
    run_script(
        conn,
        f"""
        DROP TRIGGER entry_changes_updated;
        CREATE TRIGGER entry_changes_updated AFTER UPDATE OF {held} ON entries
        BEGIN {stamp} END;
        """,
    )


@migration
def m_entry_indexes_trimmed(conn: sqlite3.Connection) -> None:
    # size and build of a store of many small entries (docs/benchmarks/search.md): two of
    # the entries' ten indexes no statement needs, and a row no longer written twice.
    # entries_scope_stats (scope, kind, status, pinned, tokens, expires) served peek's
    # counts before scope_stats (m004) kept them; what still read it, the counts and ids
    # of a filter by scope and kind (a search's filter, count()), reads entries_sequence
    # instead, which carries expires for them now (one byte a row: it is mostly NULL).
    # entries_source: no statement seeks by source alone (forget_where names a scope, and
    # SQLite plans it on entries_scope_rank), and a source-prefix filter is a substr() no
    # index serves. The insert's stamp: the writer's INSERT carries it
    # (store/write/rows.py), so the trigger moves the counter alone instead of updating
    # the row it just wrote; an insert without one (an older offload, an import) is
    # stamped by the trigger as before.
    stamp = (
        "UPDATE entry_stamp SET value = value + 1 WHERE id = 0; "
        "UPDATE entries SET changed = (SELECT value FROM entry_stamp WHERE id = 0) "
        "WHERE id = new.id;"
    )
    run_script(
        conn,
        f"""
        DROP INDEX IF EXISTS entries_scope_stats;
        DROP INDEX IF EXISTS entries_source;
        DROP INDEX IF EXISTS entries_sequence;
        CREATE INDEX entries_sequence ON entries(scope, kind, id, expires);
        DROP TRIGGER IF EXISTS entry_changes_added;
        CREATE TRIGGER entry_changes_added AFTER INSERT ON entries WHEN new.changed IS NULL
        BEGIN {stamp} END;
        CREATE TRIGGER entry_changes_stamped AFTER INSERT ON entries
        WHEN new.changed IS NOT NULL
        BEGIN UPDATE entry_stamp SET value = max(value, new.changed) WHERE id = 0; END;
        """,
    )


# the chunk map's rows for a new or moved chunk (frozen.CHUNK_MAP_SCHEMA's, each written
# so the partial entries_block serves it: an entry's own block, where block_hash is
# content_hash, is found on entries_dedup; a lossy entry's on entries_block)
_ADD_CHUNK_PARTIAL = (
    "INSERT OR IGNORE INTO entry_chunks (entry_id, chunk_id, own) "
    "SELECT e.id, new.id, 1 FROM blocks b JOIN entries e ON e.content_hash = b.hash "
    "WHERE b.id = new.block_id AND e.block_hash = b.hash; "
    "INSERT OR IGNORE INTO entry_chunks (entry_id, chunk_id, own) "
    "SELECT e.id, new.id, 1 FROM blocks b JOIN entries e ON e.block_hash = b.hash "
    "AND e.block_hash != e.content_hash WHERE b.id = new.block_id; "
    "INSERT OR IGNORE INTO entry_chunks (entry_id, chunk_id, own) "
    "SELECT e.id, new.id, 0 FROM blocks b JOIN entries e ON e.content_hash = b.hash "
    "WHERE b.id = new.block_id AND e.block_hash != b.hash;"
)


@migration
def m_entry_block_index_partial(conn: sqlite3.Connection) -> None:
    # size and build of a store of many small entries: entries_block held every entry's
    # block hash (0.16x the raw text of chat turns), though it differs from content_hash,
    # which entries_dedup holds already, only for a lossy put's entry. It now holds those
    # alone; a statement finding entries by a block's hash asks entries_dedup for the
    # others (``content_hash = ? OR (block_hash = ? AND block_hash != content_hash)``).
    # The foreign key from entries.block_hash to blocks.hash goes with it: SQLite checks
    # it on every block deleted by scanning for entries with that hash, which a partial
    # index cannot serve (a forget would read every entry). A block is deleted only when
    # no entry names it (store/write/removal.py), and doctor names an entry whose block
    # is missing. Dropping the clause changes no stored byte: the table's declaration is
    # edited in place, the procedure SQLite documents for removing a foreign key.
    declared = conn.execute(
        "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'entries'"
    ).fetchone()[0]
    clause = " REFERENCES blocks(hash)"
    if clause in declared:
        version = int(conn.execute("PRAGMA schema_version").fetchone()[0])
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute(
            "UPDATE sqlite_schema SET sql = ? WHERE type = 'table' AND name = 'entries'",
            (declared.replace(clause, "", 1),),
        )
        conn.execute(f"PRAGMA schema_version = {version + 1}")
        conn.execute("PRAGMA writable_schema = OFF")
    if conn.execute("PRAGMA foreign_key_list(entries)").fetchall():
        return  # a declaration this could not edit: the whole index stays, as it was
    run_script(
        conn,
        f"""
        DROP INDEX IF EXISTS entries_block;
        CREATE INDEX entries_block ON entries(block_hash) WHERE block_hash != content_hash;
        DROP TRIGGER IF EXISTS entry_chunks_chunk_added;
        DROP TRIGGER IF EXISTS entry_chunks_chunk_moved;
        CREATE TRIGGER entry_chunks_chunk_added AFTER INSERT ON chunks BEGIN
            {_ADD_CHUNK_PARTIAL}
        END;
        CREATE TRIGGER entry_chunks_chunk_moved AFTER UPDATE OF id, block_id ON chunks
        BEGIN
            DELETE FROM entry_chunks WHERE chunk_id = old.id;
            {_ADD_CHUNK_PARTIAL}
        END;
        """,
    )


@migration
def m_entry_block_hash_lossy_only(conn: sqlite3.Connection) -> None:
    # size of a store of many small entries: an entry's block hash equals its content_hash
    # but for a lossy put's, and kept anyway took 33 bytes of every row (0.11x the raw text
    # of chat turns). It is now stored only where it differs (frozen.block_hash_lossy_only).
    frozen.block_hash_lossy_only(conn)
