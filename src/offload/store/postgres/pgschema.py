"""The PostgreSQL schema and its migrations (recorded in ``_migrations``, as SQLite's are).

Migrations are registered in order with :func:`migration`; all pending ones run in one
transaction under the store's write lock, so several machines opening a fresh store at
once migrate it once, and a crash mid-migration leaves the previous schema (PostgreSQL's
DDL is transactional). The concepts are SQLite's (store/sqlite/db.py): content-addressed blocks,
entries, labels, tombstones, chunks and their search rows, counters, state, per-scope sums
and entry vectors. Ids come from sequences, so no id, run number or label row is ever
reused, whichever machine wrote it. Text that is compared or sorted uses the "C"
collation, so order and hash-prefix ranges are byte-wise, as in SQLite.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from offload.errors import StoreError
from offload.store import legacy_tallies, legacy_vectors, schema
from offload.store.postgres.pgconn import WRITE_LOCK

Migration = Callable[[Any], None]
MIGRATIONS: list[tuple[str, Migration]] = []


def migration(fn: Migration) -> Migration:
    """Register a schema migration; they run in the order they are defined."""
    MIGRATIONS.append((fn.__name__, fn))
    return fn


def migrate(raw: Any) -> list[str]:
    """Apply every pending migration on a psycopg connection; the names applied.

    A store whose schema is current is only read (no DDL, no lock), so the machines' role
    needs no privilege beyond its rows (docs/team-store.md, least privilege). A role that
    may not apply a pending migration gets a StoreError saying so.
    """
    import psycopg

    if not pending(raw):
        return []
    try:
        return _apply(raw)
    except psycopg.errors.InsufficientPrivilege as exc:
        names = ", ".join(pending(raw)) or "none"
        raise StoreError(
            f"the store's schema needs migrating ({names}) and this role may not "
            f"({_first_line(exc)}): open it once as the schema's owner"
        ) from None


def pending(raw: Any) -> list[str]:
    """The migrations not recorded yet (all of them on an empty database); reads only."""
    row = raw.execute("SELECT to_regclass('_migrations')").fetchone()
    if row is None or row[0] is None:
        return [name for name, _ in MIGRATIONS]
    done = {r[0] for r in raw.execute("SELECT name FROM _migrations").fetchall()}
    newer = schema.newer_schema("the PostgreSQL server", done, [name for name, _ in MIGRATIONS])
    if newer is not None:
        raise StoreError(newer)
    return [name for name, _ in MIGRATIONS if name not in done]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _apply(raw: Any) -> list[str]:
    applied: list[str] = []
    with raw.transaction():
        raw.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
        raw.execute(
            "CREATE TABLE IF NOT EXISTS _migrations "
            '(name text COLLATE "C" PRIMARY KEY, applied double precision NOT NULL)'
        )
        done = {r[0] for r in raw.execute("SELECT name FROM _migrations").fetchall()}
        newer = schema.newer_schema("the PostgreSQL server", done, [n for n, _ in MIGRATIONS])
        if newer is not None:
            raise StoreError(newer)
        for name, fn in MIGRATIONS:
            if name in done:
                continue
            fn(raw)
            raw.execute("INSERT INTO _migrations VALUES (%s, %s)", (name, time.time()))
            applied.append(name)
    return applied


# The first release's schema, as it ran then: later changes are migrations of their own.
INITIAL_SCHEMA = """
        CREATE TABLE blocks (
            id bigserial PRIMARY KEY,
            hash text COLLATE "C" NOT NULL UNIQUE,
            size integer NOT NULL,
            lines integer NOT NULL,
            codec text NOT NULL,
            data bytea NOT NULL,
            created double precision NOT NULL
        );
        CREATE TABLE entries (
            id bigserial PRIMARY KEY,
            kind text COLLATE "C" NOT NULL,
            topic text NOT NULL DEFAULT '',
            tags text NOT NULL DEFAULT '',
            summary text NOT NULL DEFAULT '',
            salience double precision NOT NULL DEFAULT 0.5 CHECK (salience BETWEEN 0 AND 1),
            status text NOT NULL DEFAULT 'cold' CHECK (status IN ('cold', 'hot')),
            pinned integer NOT NULL DEFAULT 0,
            tokens integer NOT NULL,
            content_hash text COLLATE "C" NOT NULL,
            block_hash text COLLATE "C" NOT NULL REFERENCES blocks(hash),
            source text COLLATE "C" NOT NULL DEFAULT '',
            scope text COLLATE "C" NOT NULL DEFAULT '',
            created double precision NOT NULL,
            accessed double precision NOT NULL,
            access_count integer NOT NULL DEFAULT 0,
            expires double precision,
            regenerate text NOT NULL DEFAULT '',
            nonce text,
            owner_pid integer,
            owner_host text,
            checked_out double precision,
            checked_in double precision
        );
        CREATE UNIQUE INDEX entries_dedup ON entries(content_hash, scope);
        CREATE INDEX entries_block ON entries(block_hash);
        CREATE INDEX entries_rank ON entries(pinned DESC, salience DESC, accessed DESC, id DESC);
        CREATE INDEX entries_scope_rank
            ON entries(scope, pinned DESC, salience DESC, accessed DESC, id DESC);
        CREATE INDEX entries_scope_stats ON entries(scope, kind, status, pinned, tokens, expires);
        CREATE INDEX entries_source ON entries(source);
        CREATE INDEX entries_expires ON entries(expires) WHERE expires IS NOT NULL;
        CREATE INDEX entries_hot ON entries(status) WHERE status = 'hot';
        CREATE INDEX entries_sequence ON entries(scope, kind, id);

        CREATE TABLE labels (
            label text COLLATE "C" PRIMARY KEY,
            entry_id bigint NOT NULL REFERENCES entries(id) ON DELETE CASCADE
        );
        CREATE INDEX labels_entry ON labels(entry_id);

        CREATE TABLE tombstones (
            id bigserial PRIMARY KEY,
            entry_id bigint,
            content_hash text COLLATE "C" NOT NULL,
            labels text NOT NULL DEFAULT '',
            topic text NOT NULL DEFAULT '',
            source text NOT NULL DEFAULT '',
            scope text NOT NULL DEFAULT '',
            reason text NOT NULL,
            gone double precision NOT NULL,
            regenerate text NOT NULL DEFAULT ''
        );
        CREATE INDEX tombstones_entry ON tombstones(entry_id);
        CREATE INDEX tombstones_hash ON tombstones(content_hash);
        CREATE TABLE tombstone_labels (
            label text COLLATE "C" PRIMARY KEY,
            tombstone_id bigint NOT NULL REFERENCES tombstones(id) ON DELETE CASCADE
        );

        CREATE TABLE chunks (
            id bigserial PRIMARY KEY,
            block_id bigint NOT NULL,
            start_line integer NOT NULL,
            end_line integer NOT NULL,
            start integer NOT NULL,
            "end" integer NOT NULL
        );
        CREATE INDEX chunks_block ON chunks(block_id);
        -- the analysed terms of each chunk (offload.core.text.analysis), one lexeme per term
        CREATE TABLE search_body (rowid bigint PRIMARY KEY, terms tsvector NOT NULL);
        CREATE INDEX search_body_terms ON search_body USING gin (terms);
        CREATE TABLE search_meta (
            rowid bigint PRIMARY KEY,
            topic text NOT NULL, summary text NOT NULL, tags text NOT NULL,
            labels text NOT NULL, source text NOT NULL,
            tsv tsvector NOT NULL  -- the columns' terms, weighted (pgsql.META_LETTERS)
        );
        CREATE INDEX search_meta_tsv ON search_meta USING gin (tsv);
        CREATE TABLE terms (term text COLLATE "C" PRIMARY KEY);

        CREATE TABLE counters (name text COLLATE "C" PRIMARY KEY, value bigint NOT NULL);
        CREATE TABLE state (
            namespace text COLLATE "C" NOT NULL,
            key text COLLATE "C" NOT NULL,
            value text NOT NULL,
            updated double precision NOT NULL,
            PRIMARY KEY (namespace, key)
        );

        CREATE TABLE entry_vectors (
            id bigserial PRIMARY KEY,
            entry_id bigint NOT NULL UNIQUE REFERENCES entries(id) ON DELETE CASCADE,
            model text NOT NULL,
            data bytea NOT NULL
        );

        -- a list of ids passed as one JSON array (SQLite's json_each(?))
        CREATE FUNCTION offload_ids(ids text) RETURNS TABLE (value bigint)
            LANGUAGE sql IMMUTABLE STRICT
            AS $$ SELECT x::bigint FROM json_array_elements_text(ids::json) AS x $$;
"""


@migration
def pg001_initial(raw: Any) -> None:
    raw.execute(INITIAL_SCHEMA)
    _scope_stats(raw)


def _scope_stats(raw: Any) -> None:
    # peek reads these per-(scope, kind) sums; the trigger keeps them exact in the same
    # transaction as the change (SQLite's m004_scope_stats)
    raw.execute(
        """
        CREATE TABLE scope_stats (
            scope text COLLATE "C" NOT NULL,
            kind text COLLATE "C" NOT NULL,
            entries integer NOT NULL DEFAULT 0,
            tokens bigint NOT NULL DEFAULT 0,
            hot integer NOT NULL DEFAULT 0,
            pinned integer NOT NULL DEFAULT 0,
            PRIMARY KEY (scope, kind)
        );
        CREATE FUNCTION offload_scope_stats() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP IN ('DELETE', 'UPDATE') THEN
                UPDATE scope_stats SET entries = entries - 1, tokens = tokens - OLD.tokens,
                    hot = hot - (OLD.status = 'hot')::int, pinned = pinned - OLD.pinned
                WHERE scope = OLD.scope AND kind = OLD.kind;
            END IF;
            IF TG_OP IN ('INSERT', 'UPDATE') THEN
                INSERT INTO scope_stats AS s (scope, kind, entries, tokens, hot, pinned)
                    VALUES (NEW.scope, NEW.kind, 1, NEW.tokens, (NEW.status = 'hot')::int,
                            NEW.pinned)
                ON CONFLICT (scope, kind) DO UPDATE SET
                    entries = s.entries + 1, tokens = s.tokens + excluded.tokens,
                    hot = s.hot + excluded.hot, pinned = s.pinned + excluded.pinned;
            END IF;
            RETURN NULL;
        END $$;
        CREATE TRIGGER scope_stats_change AFTER INSERT OR DELETE OR UPDATE OF
            scope, kind, tokens, status, pinned ON entries
            FOR EACH ROW EXECUTE FUNCTION offload_scope_stats();
        """
    )


@migration
def pg_state_version(raw: Any) -> None:
    # a saved value's version, raised by every write of it (store/state.py; SQLite's
    # m_state_version): the proxy's sessions cached by one machine see another's writes
    raw.execute("ALTER TABLE state ADD COLUMN version bigint NOT NULL DEFAULT 1")


# the rows per (scope, kind) of scope_stats on PostgreSQL (pg_scope_stats_slots)
SCOPE_STATS_SLOTS = 16


@migration
def pg_scope_stats_slots(raw: Any) -> None:
    # Puts run beside each other on PostgreSQL (pgconn.PgConn.begin_keyed), but a single
    # scope_stats row per (scope, kind) made every put into one scope wait for the one
    # before it to commit (the trigger's row lock). Each transaction now adds its changes
    # to one of SCOPE_STATS_SLOTS rows (by its transaction id); peek sums them. A removal
    # is a negative change: a slot alone may go below zero, the sum is exact.
    raw.execute(
        f"""
        ALTER TABLE scope_stats ADD COLUMN slot integer NOT NULL DEFAULT 0;
        ALTER TABLE scope_stats DROP CONSTRAINT scope_stats_pkey;
        ALTER TABLE scope_stats ADD PRIMARY KEY (scope, kind, slot);
        CREATE OR REPLACE FUNCTION offload_scope_stats() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            n integer := (txid_current() % {SCOPE_STATS_SLOTS})::integer;
        BEGIN
            IF TG_OP IN ('DELETE', 'UPDATE') THEN
                INSERT INTO scope_stats AS s (scope, kind, slot, entries, tokens, hot, pinned)
                    VALUES (OLD.scope, OLD.kind, n, -1, -OLD.tokens,
                            -(OLD.status = 'hot')::int, -OLD.pinned)
                ON CONFLICT (scope, kind, slot) DO UPDATE SET
                    entries = s.entries + excluded.entries, tokens = s.tokens + excluded.tokens,
                    hot = s.hot + excluded.hot, pinned = s.pinned + excluded.pinned;
            END IF;
            IF TG_OP IN ('INSERT', 'UPDATE') THEN
                INSERT INTO scope_stats AS s (scope, kind, slot, entries, tokens, hot, pinned)
                    VALUES (NEW.scope, NEW.kind, n, 1, NEW.tokens, (NEW.status = 'hot')::int,
                            NEW.pinned)
                ON CONFLICT (scope, kind, slot) DO UPDATE SET
                    entries = s.entries + excluded.entries, tokens = s.tokens + excluded.tokens,
                    hot = s.hot + excluded.hot, pinned = s.pinned + excluded.pinned;
            END IF;
            RETURN NULL;
        END $$;
        """
    )


@migration
def pg_additive_tallies(raw: Any) -> None:
    # counters every write adds to (store/tallies.py; SQLite's m_additive_tallies): two
    # machines' gateways and proxies no longer overwrite each other's counts; the totals
    # saved as JSON in state so far move there
    raw.execute(
        """
        CREATE TABLE tallies (
            namespace text COLLATE "C" NOT NULL,
            key text COLLATE "C" NOT NULL,
            name text COLLATE "C" NOT NULL,
            value bigint NOT NULL,
            PRIMARY KEY (namespace, key, name)
        )
        """
    )
    found = raw.execute(
        "SELECT namespace, key, value FROM state WHERE namespace = ANY(%s)",
        (list(legacy_tallies.LEGACY_NAMESPACES),),
    ).fetchall()
    legacy_tallies.move_legacy(raw.execute, found, "%s")


@migration
def pg_offload_ids_rows(raw: Any) -> None:
    # offload_ids(ids) is a list of ids a statement joins on (the best chunks' entries, a
    # page of hits): a few hundred at most. Left at a set-returning function's default
    # estimate of 1,000 rows, the planner hashed the whole chunks table to join 200 ids
    # (0.17 s at 100,000 chunks, growing with the store) instead of probing its key.
    raw.execute("ALTER FUNCTION offload_ids(text) ROWS 100")


@migration
def pg_entry_chunks_map(raw: Any) -> None:
    # each chunk's entries stored and kept by triggers (store/write/chunkmap.py; SQLite's
    # m_entry_chunks_map), then filled from the tables; frozen here with the migration
    raw.execute(CHUNK_MAP_SCHEMA)
    raw.execute(
        "INSERT INTO entry_chunks (entry_id, chunk_id, own) "
        "SELECT e.id, c.id, CASE WHEN b.hash = e.block_hash THEN 1 ELSE 0 END FROM entries e "
        "JOIN blocks b ON b.hash IN (e.block_hash, e.content_hash) "
        "JOIN chunks c ON c.block_id = b.id ON CONFLICT DO NOTHING"
    )


# the chunk map's table, index and statement triggers as pg_entry_chunks_map made them
CHUNK_MAP_SCHEMA = """
CREATE TABLE entry_chunks (
    entry_id bigint NOT NULL,
    chunk_id bigint NOT NULL,
    own integer NOT NULL,
    PRIMARY KEY (entry_id, chunk_id)
);
CREATE INDEX entry_chunks_chunk ON entry_chunks(chunk_id, own, entry_id);
CREATE FUNCTION offload_entry_chunks_entry() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        DELETE FROM entry_chunks WHERE entry_id = OLD.id;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO entry_chunks (entry_id, chunk_id, own)
            SELECT NEW.id, c.id, (b.hash = NEW.block_hash)::int FROM blocks b
            JOIN chunks c ON c.block_id = b.id
            WHERE b.hash IN (NEW.block_hash, NEW.content_hash)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER entry_chunks_entry AFTER INSERT OR DELETE OR UPDATE OF id, block_hash, content_hash
    ON entries FOR EACH ROW EXECUTE FUNCTION offload_entry_chunks_entry();
CREATE FUNCTION offload_entry_chunks_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO entry_chunks (entry_id, chunk_id, own)
        SELECT e.id, n.id, 1 FROM new_chunks n JOIN blocks b ON b.id = n.block_id
        JOIN entries e ON e.block_hash = b.hash
    ON CONFLICT DO NOTHING;
    INSERT INTO entry_chunks (entry_id, chunk_id, own)
        SELECT e.id, n.id, 0 FROM new_chunks n JOIN blocks b ON b.id = n.block_id
        JOIN entries e ON e.content_hash = b.hash WHERE e.block_hash <> b.hash
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER entry_chunks_chunk_added AFTER INSERT ON chunks
    REFERENCING NEW TABLE AS new_chunks
    FOR EACH STATEMENT EXECUTE FUNCTION offload_entry_chunks_added();
CREATE FUNCTION offload_entry_chunks_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM entry_chunks m USING old_chunks o WHERE m.chunk_id = o.id;
    RETURN NULL;
END $$;
CREATE TRIGGER entry_chunks_chunk_gone AFTER DELETE ON chunks
    REFERENCING OLD TABLE AS old_chunks
    FOR EACH STATEMENT EXECUTE FUNCTION offload_entry_chunks_gone();
CREATE FUNCTION offload_entry_chunks_chunk_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM entry_chunks WHERE chunk_id = OLD.id;
    INSERT INTO entry_chunks (entry_id, chunk_id, own)
        SELECT e.id, NEW.id, (e.block_hash = b.hash)::int FROM blocks b
        JOIN entries e ON e.block_hash = b.hash OR e.content_hash = b.hash
        WHERE b.id = NEW.block_id
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER entry_chunks_chunk_moved AFTER UPDATE OF id, block_id ON chunks
    FOR EACH ROW EXECUTE FUNCTION offload_entry_chunks_chunk_moved();
"""


@migration
def pg_chunk_term_counts(raw: Any) -> None:
    # SQLite's m_chunk_term_counts: each chunk's analysed term counts (index.term_counts),
    # NULL for a chunk written before (its text is analysed instead)
    raw.execute("ALTER TABLE chunks ADD COLUMN term_counts text")


@migration
def pg_impact_postings(raw: Any) -> None:
    # Withdrawn the day it landed: impact-ordered postings kept by triggers on search_body
    # tripled a 100 KB put's cost and worsened the search tail (docs/benchmarks/team-store.md, "PostgreSQL
    # search by impact-ordered postings"). The name stays registered so a store that has not
    # run it never builds them; pg_drop_impact_postings removes them where it did.
    del raw


@migration
def pg_drop_impact_postings(raw: Any) -> None:
    # a store opened by the withdrawn migration: its triggers would keep charging every write
    for event in ("add", "drop", "change", "truncate"):
        raw.execute(f"DROP TRIGGER IF EXISTS search_body_impacts_{event} ON search_body")
        raw.execute(f"DROP FUNCTION IF EXISTS offload_impacts_{event}()")
    raw.execute("DROP TABLE IF EXISTS impacts, impact_reference")


@migration
def pg_state_retired(raw: Any) -> None:
    # SQLite's m_state_retired: a deleted state key's last version (store/state.py)
    raw.execute(
        'CREATE TABLE state_retired (namespace text COLLATE "C" NOT NULL, '
        'key text COLLATE "C" NOT NULL, version bigint NOT NULL, PRIMARY KEY (namespace, key))'
    )


@migration
def pg_chunk_term_counts_length(raw: Any) -> None:
    # SQLite's m_chunk_term_counts_length: each cached term-count object leads with the
    # chunk's length (key "", index.term_counts), as puts write them now; an in-process
    # index of the chunks (store/search/memory/resident.py) reads the length from there. Computed in SQL,
    # the same sum of the counts (the object's own text follows unchanged).
    raw.execute(
        """
        UPDATE chunks SET term_counts = '{"":' ||
            (SELECT coalesce(sum(value::bigint), 0) FROM json_each_text(term_counts::json))
            || CASE WHEN term_counts = '{}' THEN '}' ELSE ',' || substr(term_counts, 2) END
        WHERE term_counts IS NOT NULL AND left(term_counts, 4) <> '{"":'
        """
    )


def _watermarked(table: str, generation: str, gone: str) -> str:
    """``table.changed``: each row's writing transaction (NULL for the rows already there,
    no rewrite), indexed; and a one-row ``generation`` counter bumped by any statement that
    deletes or updates rows of ``table`` (``gone``: its transition table), and by a truncate."""
    bump = f"UPDATE {generation} SET value = value + 1 WHERE id = 0;"
    fn = f"offload_{generation}"
    return f"""
        ALTER TABLE {table} ADD COLUMN changed xid8;
        ALTER TABLE {table} ALTER COLUMN changed SET DEFAULT pg_current_xact_id();
        CREATE INDEX {table}_changed ON {table} (changed);
        CREATE TABLE {generation} (
            id integer PRIMARY KEY CHECK (id = 0),
            value bigint NOT NULL
        );
        INSERT INTO {generation} (id, value) VALUES (0, 0);
        CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            -- a TRUNCATE trigger has no transition table: its test must not name one
            IF TG_OP = 'TRUNCATE' THEN
                {bump}
            ELSIF EXISTS (SELECT 1 FROM {gone}) THEN
                {bump}
            END IF;
            RETURN NULL;
        END $$;
        CREATE TRIGGER {generation}_delete AFTER DELETE ON {table}
            REFERENCING OLD TABLE AS {gone}
            FOR EACH STATEMENT EXECUTE FUNCTION {fn}();
        CREATE TRIGGER {generation}_update AFTER UPDATE ON {table}
            REFERENCING OLD TABLE AS {gone}
            FOR EACH STATEMENT EXECUTE FUNCTION {fn}();
        CREATE TRIGGER {generation}_truncate AFTER TRUNCATE ON {table}
            FOR EACH STATEMENT EXECUTE FUNCTION {fn}();
        """


@migration
def pg_chunk_changes(raw: Any) -> None:
    # An in-process index of the chunks (store/search/memory/resident.py) reads, before each search, only
    # the rows written since its last read (store/search/memory/pgchunks.py). Ids commit out of order on
    # PostgreSQL, so the watermark is the writing transaction: `changed` (NULL for the rows
    # already stored: a full read takes them). The column and its default cost no rewrite
    # of the table; the btree grows at its right edge, as the transaction ids do. A deleted
    # or rewritten chunk bumps chunk_generation (SQLite's m_chunk_generation) only when a
    # statement changed rows; the deleting writers hold the store lock exclusively already,
    # so the one row serialises nothing more.
    raw.execute(_watermarked("chunks", "chunk_generation", "gone_chunks"))


@migration
def pg_chunk_map_added_by_block(raw: Any) -> None:
    # The map's statement trigger on chunks (pg_entry_chunks_map) joined the new chunks to
    # blocks without knowing how many there were: the planner hashed a sequential scan of
    # every block, ~1 ms per 100 KB put at 2,000 entries and growing with the store, to
    # find no entry (a put's block is new, its entry inserted after it). The blocks are
    # looked up by their ids first, and the inserts run only when an entry stores or keeps
    # one of them (a reindex, an original indexed later); their rows are the same.
    raw.execute(
        """
        CREATE OR REPLACE FUNCTION offload_entry_chunks_added() RETURNS trigger
        LANGUAGE plpgsql AS $$
        DECLARE
            ids bigint[];
            held text[];
        BEGIN
            -- each probe by an index: the blocks by id, the entries by either hash (an OR
            -- of the two was planned as a scan of every entry)
            ids := ARRAY(SELECT DISTINCT block_id FROM new_chunks);
            held := ARRAY(
                SELECT b.hash FROM blocks b WHERE b.id = ANY(ids)
                    AND EXISTS (SELECT 1 FROM entries e WHERE e.block_hash = b.hash)
                UNION
                SELECT b.hash FROM blocks b WHERE b.id = ANY(ids)
                    AND EXISTS (SELECT 1 FROM entries e WHERE e.content_hash = b.hash));
            IF cardinality(held) = 0 THEN
                RETURN NULL;
            END IF;
            INSERT INTO entry_chunks (entry_id, chunk_id, own)
                SELECT e.id, n.id, 1 FROM new_chunks n JOIN blocks b ON b.id = n.block_id
                JOIN entries e ON e.block_hash = b.hash WHERE b.hash = ANY(held)
            ON CONFLICT DO NOTHING;
            INSERT INTO entry_chunks (entry_id, chunk_id, own)
                SELECT e.id, n.id, 0 FROM new_chunks n JOIN blocks b ON b.id = n.block_id
                JOIN entries e ON e.content_hash = b.hash
                WHERE b.hash = ANY(held) AND e.block_hash <> b.hash
            ON CONFLICT DO NOTHING;
            RETURN NULL;
        END $$;
        """
    )


@migration
def pg_chunk_map_added_by_loop(raw: Any) -> None:
    # pg_chunk_map_added_by_block's one query over the new chunks' blocks (a UNION of two
    # semi-joins on an array of ids) ran in ~0.05 ms but cost ~0.8 ms of server CPU per
    # chunk statement, paid by every put and finding nothing for a put's new block (about
    # a quarter of a 4 KB put's server CPU, measured with perf on the server). The same check
    # as a loop over the distinct blocks, each an index probe by id and two by hash, costs
    # ~0.05 ms; the inserts and their rows are the same.
    raw.execute(
        """
        CREATE OR REPLACE FUNCTION offload_entry_chunks_added() RETURNS trigger
        LANGUAGE plpgsql AS $$
        DECLARE
            bid bigint;
            h text;
            held text[] := '{}';
        BEGIN
            -- the blocks an entry stores (block_hash) or keeps (content_hash): each probe
            -- by an index (an OR of the two was planned as a scan of every entry)
            FOR bid IN SELECT DISTINCT block_id FROM new_chunks LOOP
                SELECT b.hash INTO h FROM blocks b WHERE b.id = bid;
                IF EXISTS (SELECT 1 FROM entries e WHERE e.block_hash = h)
                        OR EXISTS (SELECT 1 FROM entries e WHERE e.content_hash = h) THEN
                    held := held || h;
                END IF;
            END LOOP;
            IF cardinality(held) = 0 THEN
                RETURN NULL;
            END IF;
            INSERT INTO entry_chunks (entry_id, chunk_id, own)
                SELECT e.id, n.id, 1 FROM new_chunks n JOIN blocks b ON b.id = n.block_id
                JOIN entries e ON e.block_hash = b.hash WHERE b.hash = ANY(held)
            ON CONFLICT DO NOTHING;
            INSERT INTO entry_chunks (entry_id, chunk_id, own)
                SELECT e.id, n.id, 0 FROM new_chunks n JOIN blocks b ON b.id = n.block_id
                JOIN entries e ON e.content_hash = b.hash
                WHERE b.hash = ANY(held) AND e.block_hash <> b.hash
            ON CONFLICT DO NOTHING;
            RETURN NULL;
        END $$;
        """
    )


@migration
def pg_entry_changes(raw: Any) -> None:
    # An in-process copy of every entry's filter and ranking columns (store/search/memory/entrykeys.py)
    # reads, before each search, only the rows written since its last read: pg_chunk_changes'
    # watermark, on entries. Entries are updated too (touch, pin, expiry, annotate,
    # check-out), so a row trigger stamps every inserted or updated row with its writing
    # transaction, whatever the statement sets (an import copying columns cannot carry an
    # old stamp in). A deleted entry, or one whose id changed, bumps entry_generation (the
    # copy is rebuilt): statement triggers, only when rows changed. The column costs no
    # rewrite of the table (NULL for the rows already stored: a full read takes them).
    raw.execute(
        """
        ALTER TABLE entries ADD COLUMN changed xid8;
        CREATE INDEX entries_changed ON entries (changed);
        CREATE TABLE entry_generation (
            id integer PRIMARY KEY CHECK (id = 0),
            value bigint NOT NULL
        );
        INSERT INTO entry_generation (id, value) VALUES (0, 0);
        CREATE FUNCTION offload_entry_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.changed := pg_current_xact_id();
            IF TG_OP = 'UPDATE' AND NEW.id IS DISTINCT FROM OLD.id THEN
                UPDATE entry_generation SET value = value + 1 WHERE id = 0;
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER entries_stamp BEFORE INSERT OR UPDATE ON entries
            FOR EACH ROW EXECUTE FUNCTION offload_entry_stamp();
        CREATE FUNCTION offload_entry_generation() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            -- a TRUNCATE trigger has no transition table: its test must not name one
            IF TG_OP = 'TRUNCATE' THEN
                UPDATE entry_generation SET value = value + 1 WHERE id = 0;
            ELSIF EXISTS (SELECT 1 FROM gone_entries) THEN
                UPDATE entry_generation SET value = value + 1 WHERE id = 0;
            END IF;
            RETURN NULL;
        END $$;
        CREATE TRIGGER entry_generation_delete AFTER DELETE ON entries
            REFERENCING OLD TABLE AS gone_entries
            FOR EACH STATEMENT EXECUTE FUNCTION offload_entry_generation();
        CREATE TRIGGER entry_generation_truncate AFTER TRUNCATE ON entries
            FOR EACH STATEMENT EXECUTE FUNCTION offload_entry_generation();
        """
    )
    # the column's statistics now (NULL everywhere): before autovacuum's first look the
    # planner guessed a third of the table for `changed >= ?` and walked every entry by
    # its primary key (0.74 s a search at 1M entries) instead of the new index. Not on an
    # empty table: that records it as empty (reltuples 0), and the plans the first puts
    # cache in plpgsql (the chunk map trigger's probes of entries) stayed the ones for an
    # empty table: ~1 ms of backend CPU more a 4 KB put
    if raw.execute("SELECT EXISTS (SELECT 1 FROM entries)").fetchone()[0]:
        raw.execute("ANALYZE entries (changed)")


@migration
def pg_entry_map_changes(raw: Any) -> None:
    # The chunk -> entry map held in memory (store/search/memory/entrymap.py) reads, before each search,
    # only the map's rows written since its last read: pg_chunk_changes' watermark, on
    # entry_chunks (NULL for the rows already stored: a full read takes them; no rewrite).
    # The map's rows are only ever inserted by triggers and deleted (an entry or chunk gone
    # or moved, doctor's refill): a deletion, an update or a truncate bumps
    # entry_map_generation, only when a statement changed rows (a refill bumps it itself,
    # chunkmap.rebuild), and the copy is rebuilt.
    raw.execute(_watermarked("entry_chunks", "entry_map_generation", "gone_rows"))
    # the column's statistics now, as pg_entry_changes does (not on an empty table)
    if raw.execute("SELECT EXISTS (SELECT 1 FROM entry_chunks)").fetchone()[0]:
        raw.execute("ANALYZE entry_chunks (changed)")


@migration
def pg_toast_lz4(raw: Any) -> None:
    # A 100 KB put's ~33 chunk rows each hold a few KB of cached counts and as much
    # tsvector: over TOAST's 2 KB, so the server compressed every one with pglz, a fifth
    # of its CPU for such a put (measured with perf on the server). lz4
    # compresses them about as well at a fraction of the cost (-1.7 to -4.8 ms of the
    # server's CPU a put). Only new values change; a server built without lz4 (or older
    # than 14) keeps pglz. A block's bytes are zstd already (store/write/blocks.py): compressing
    # them again only spends the server's time, so they are kept out of line as they are.
    raw.execute("ALTER TABLE blocks ALTER COLUMN data SET STORAGE EXTERNAL")
    if not _offers_lz4(raw):
        return
    for table, column in (("chunks", "term_counts"), ("search_body", "terms")):
        raw.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET COMPRESSION lz4")


def _offers_lz4(raw: Any) -> bool:
    """Whether the server can compress TOASTed values with lz4 (PostgreSQL 14 or later,
    built with it): lz4 is then one of ``default_toast_compression``'s values."""
    row = raw.execute(
        "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
    ).fetchone()
    return bool(row is not None and row[0])


@migration
def pg_known_blocks(raw: Any) -> None:
    # Which blocks a batch of puts finds stored (store/write/pgbulk.py) must see every block,
    # also one only another scope's entries use: a role held to its scopes by row-level
    # security (store/postgres/pgscopes.py) would otherwise write it again and fail on blocks.hash.
    # The function runs as the schema's owner and answers hashes only, never bodies.
    raw.execute(
        """
        CREATE OR REPLACE FUNCTION offload_known_blocks(digests text) RETURNS SETOF text
            LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT
            AS $$ SELECT hash FROM blocks
                  WHERE hash IN (SELECT json_array_elements_text(digests::json)) $$
        """
    )


@migration
def pg_entry_event_time(raw: Any) -> None:
    # when what an entry tells happened, apart from when it was stored (SQLite's
    # m_entry_event_time): NULL when the writer did not say
    raw.execute("ALTER TABLE entries ADD COLUMN event_time double precision")


@migration
def pg_entry_vectors_four_bits(raw: Any) -> None:
    # size: each vector in 4 bits a component instead of 8, as on SQLite
    # (m_entry_vectors_four_bits, the same frozen conversion), a page of ids at a time
    last = 0
    while True:
        rows = raw.execute(
            "SELECT id, data FROM entry_vectors WHERE id > %s ORDER BY id LIMIT 2000", (last,)
        ).fetchall()
        if not rows:
            return
        packed = [(legacy_vectors.vector_in_four_bits(bytes(r[1])), int(r[0])) for r in rows]
        changed = [p for p in packed if p[0] is not None]
        if changed:
            with raw.cursor() as cur:
                cur.executemany("UPDATE entry_vectors SET data = %s WHERE id = %s", changed)
        last = int(rows[-1][0])


@migration
def pg_entry_rank_indexes_ascending(raw: Any) -> None:
    # size: the listing indexes ascending, so new entries go in at the right end of the
    # B-tree instead of splitting its left end's pages half-empty (SQLite's
    # m_entry_rank_indexes_ascending); the listing scans them backwards for the same order
    raw.execute(
        """
        DROP INDEX IF EXISTS entries_rank;
        DROP INDEX IF EXISTS entries_scope_rank;
        CREATE INDEX entries_rank ON entries(pinned, salience, accessed, id);
        CREATE INDEX entries_scope_rank ON entries(scope, pinned, salience, accessed, id);
        """
    )


@migration
def pg_entry_indexes_trimmed(raw: Any) -> None:
    # size and build of a store of many small entries (SQLite's m_entry_indexes_trimmed;
    # docs/benchmarks/team-store.md): two of the entries' indexes no statement needs.
    # entries_scope_stats served the counts of a filter by scope, kind or status (peek
    # reads scope_stats); they are answered from entries_sequence alone now, which holds
    # expires for them (an index-only scan, as the ids of such a filter are too).
    # entries_source: the one statement naming a source (forget_where) names its scope,
    # sought on entries_sequence; a source-prefix filter is a substr() no index serves.
    raw.execute(
        """
        DROP INDEX IF EXISTS entries_scope_stats;
        DROP INDEX IF EXISTS entries_source;
        DROP INDEX IF EXISTS entries_sequence;
        CREATE INDEX entries_sequence ON entries(scope, kind, id) INCLUDE (expires);
        """
    )
