"""The store API: the one place every surface reads and writes offloaded content.

Many processes may share one store file: SQLite in WAL mode, every write one
``BEGIN IMMEDIATE`` transaction. Each call of the store borrows one connection from a
bounded pool (store/sqlite/pool.py) for its span. A store opened on a
``postgresql://`` URL (``[store] url``) runs the same statements on PostgreSQL
(store/postgres/pgconn.py): many machines then share one store.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from offload.config import SearchSettings, Settings, StoreSettings
from offload.core.refs import parse_ref
from offload.core.text import analysis
from offload.core.tokens import BoundedCounter, TokenCounter, default_counter
from offload.core.urls import redact_url
from offload.errors import (
    AmbiguousReference,
    InvalidInput,
    NotFound,
    OffloadError,
    OtherScope,
)
from offload.store import lookup, totals
from offload.store.backend import Conn, Sql
from offload.store.life import lifecycle
from offload.store.life.calls import LifecycleCalls
from offload.store.models import (
    NO_FILTERS,
    Entry,
    Filters,
    PutResult,
)
from offload.store.postgres import pgconn, pgpool
from offload.store.saved import SavedState
from offload.store.schema import hexed
from offload.store.search import query  # fmt: skip
from offload.store.search.memory.idle import SearchIdle
from offload.store.search.memory.resident import ResidentIndex
from offload.store.searching import SearchCalls
from offload.store.sqlite import db
from offload.store.sqlite.pool import ConnectionPool, lend_per_call
from offload.store.write import blocks, meta, rows, vectors, writes
from offload.store.write.index import PutProgress
from offload.store.write.puts import (
    PutOptions,
    check_event_time,
    check_label,
    check_meta,
    check_tags,
    clean_tags,
)

Progress = Callable[[int, int], None]

# connections a PostgreSQL store keeps open at most (a statement or a write holds one)
PG_POOL_SIZE = 8
_ENTRY_SELECT = rows.ENTRY_SELECT
_BLOCKS_BY_HASH = Sql(
    "SELECT lower(hex(hash)) AS hash, codec, CAST(data AS BLOB) AS data FROM blocks "
    "WHERE hash IN (SELECT unhex(value) FROM json_each(?))",
    (
        "SELECT hash, codec, data AS data FROM blocks WHERE hash IN (SELECT "
        "json_array_elements_text(%s::json))"
    ),
)


def _empty_matrix(embedder: vectors.Encoder) -> vectors.VectorMatrix:
    """The in-memory vector matrix for ``embedder``'s vectors, filled on first use."""
    return vectors.VectorMatrix(embedder.model_id, coarse=vectors.nested(embedder))


def _now() -> float:
    return time.time()


@lend_per_call(lambda store: store.connection_pool)
class Store(SavedState, LifecycleCalls, SearchCalls):
    """A content-addressed, searchable store in one SQLite file.

    Build one per process with :meth:`open`; it is safe to share across threads.
    """

    def __init__(
        self,
        path: Path | str,
        settings: StoreSettings | None = None,
        *,
        counter: TokenCounter | None = None,
        clock: Callable[[], float] = _now,
        embedder: vectors.Encoder | None = None,
        semantic_weight: float = SearchSettings().semantic_weight,
        resident_mb: int = 0,
        resident_idle_s: float = 0.0,
    ) -> None:
        # a postgresql:// URL, or the SQLite file (a Path would fold the URL's '//')
        self.url = str(path) if isinstance(path, str) and pgconn.is_postgres(path) else ""
        self.path = Path(path) if not self.url else Path()
        # hybrid search (store/write/vectors.py): the model is handed in, never loaded here
        self._embedder = embedder
        self.semantic_weight = semantic_weight
        self._matrix = None if embedder is None else _empty_matrix(embedder)
        self.settings = settings or StoreSettings()
        self._counter = counter
        self.clock = clock
        self._conns = ConnectionPool(
            self._connect_sqlite,
            _release_free_pages,
            size=self.settings.connections,
            wait_s=self.settings.busy_timeout_s,
        )
        self._bodies = blocks.BodyCache()
        self._totals = totals.Totals()
        self._pg: pgpool.ThreadConns | None = None
        # BM25 over the body chunks in memory (store/search/memory/resident.py; the chunk sources are
        # store/search/memory/chunkrows.py's and store/search/memory/pgchunks.py's); None: the SQL path only
        self.resident = (
            ResidentIndex(self._own_conn, max_bytes=resident_mb << 20) if resident_mb else None
        )
        # the in-memory copies are let go after this long without a search (0: kept)
        self.search_idle = SearchIdle(resident_idle_s)
        if self.url:
            self._open_postgres()
        else:
            try:
                with self._conns.lending():
                    db.migrate(self._sqlite_conn(), self.settings.busy_timeout_s)
            except db.DATABASE_ERRORS as exc:  # a damaged file, or not a database
                self._conns.close_all()
                raise db.database_failure(self.path, exc) from None
            except OffloadError:  # busy past the timeout, or migrated by a newer offload
                self._conns.close_all()
                raise

    def _open_postgres(self) -> None:
        from offload.store.postgres import pgschema

        timeout = self.settings.busy_timeout_s
        pool = pgpool.open_pool(self.url, max_size=PG_POOL_SIZE, timeout_s=timeout)
        self._pg = pgpool.ThreadConns(pool, self.url, timeout)
        try:
            with pgconn.errors(self.url), pool.connection(timeout=timeout) as raw:
                pgschema.migrate(raw)
        except OffloadError:
            self._pg.close()
            raise

    def restrict_role(self, role: str, scopes: Sequence[str]) -> None:
        """Hold a PostgreSQL role to ``scopes`` in the database itself (row-level security,
        store/postgres/pgscopes.py); run as the schema's owner."""
        from offload.store.postgres import pgscopes

        self._as_owner(lambda raw: pgscopes.restrict(raw, role, scopes))

    def unrestrict_role(self, role: str) -> int:
        """Lift a role's scope restriction; how many scopes it was held to."""
        from offload.store.postgres import pgscopes

        return int(self._as_owner(lambda raw: pgscopes.unrestrict(raw, role)))

    def restricted_roles(self) -> dict[str, list[str]]:
        """Every role held to scopes, with its scopes."""
        from offload.store.postgres import pgscopes

        found: dict[str, list[str]] = self._as_owner(pgscopes.grants)
        return found

    def _as_owner(self, work: Callable[[Any], Any]) -> Any:
        if self._pg is None:
            raise InvalidInput(
                "holding a role to its scopes needs a PostgreSQL store ([store] url); "
                "a SQLite file is one user's"
            )
        with pgconn.errors(self.url), self._pg.pool.connection(timeout=self._pg.timeout_s) as raw:
            return work(raw)

    @property
    def backend(self) -> str:
        """Which database holds this store: "sqlite" or "postgresql"."""
        return "postgresql" if self.url else "sqlite"

    @property
    def location(self) -> str:
        """Where the store is, safe to show (a URL without its password, or the file)."""
        return redact_url(self.url) if self.url else str(self.path)

    @property
    def counter(self) -> TokenCounter:
        """The token counter; the default BPE one loads on first use (keeps start-up fast)."""
        if self._counter is None:
            self._counter = BoundedCounter(default_counter())
        return self._counter

    @property
    def embedder(self) -> vectors.Encoder | None:
        """The embedding model for hybrid search (None: search is lexical)."""
        return self._embedder

    @property
    def body_cache(self) -> blocks.BodyCache:
        """The verified plaintexts this store read last (bounded in characters)."""
        return self._bodies

    @property
    def vector_matrix(self) -> vectors.VectorMatrix | None:
        """The in-process matrix of the stored vectors of the embedder's model."""
        return self._matrix

    def vector_of(self, topic: str, summary: str, tags: str, body: str) -> bytes | None:
        """An entry's packed vector, computed before its write transaction (None: no model).

        A model that fails to load turns hybrid search off for this process, with a notice:
        a write never fails for want of a vector (doctor --reindex fills it in later).
        """
        if self._embedder is None:
            return None
        try:
            text = vectors.entry_text(topic, summary, tags, body)
            return vectors.encode_one(self._embedder, text)
        except OffloadError as exc:
            logging.getLogger("offload.store").warning("semantic search is off: %s", exc)
            self._embedder = self._matrix = None
            return None

    def vectors_of(self, texts: Sequence[str]) -> list[bytes | None]:
        """The packed vectors of several entries' texts (:func:`vectors.entry_text`) in one
        call of the model; all None without one (or when it fails to load, as
        :meth:`vector_of`)."""
        if self._embedder is None or not texts:
            return [None] * len(texts)
        try:
            return list(vectors.encode_many(self._embedder, texts))
        except OffloadError as exc:
            logging.getLogger("offload.store").warning("semantic search is off: %s", exc)
            self._embedder = self._matrix = None
            return [None] * len(texts)

    @classmethod
    def open(cls, settings: Settings, **kwargs: Any) -> Store:
        """Open (creating if needed) the store that ``settings`` name.

        Pass ``embedder=`` (offload.llm.embedding.load_embedder) for hybrid search.
        """
        kwargs.setdefault("semantic_weight", settings.search.semantic_weight)
        kwargs.setdefault("resident_mb", settings.search.resident_mb)
        kwargs.setdefault("resident_idle_s", settings.search.resident_idle_s)
        url = settings.store.url
        return cls(url if pgconn.is_postgres(url) else settings.db_path, settings.store, **kwargs)

    # -- connections ----------------------------------------------------------------------

    @property
    def conn(self) -> Conn:
        """The connection this thread's call of the store borrowed (SQLite: from the pool,
        for the span of the outermost call; PostgreSQL: the thread's, a statement at a time)."""
        if self._pg is not None:
            return self._pg.get()
        return self._sqlite_conn()

    def _sqlite_conn(self) -> sqlite3.Connection:
        return self._conns.get()

    def _connect_sqlite(self) -> sqlite3.Connection:
        return db.connect(
            self.path,
            busy_timeout_s=self.settings.busy_timeout_s,
            synchronous=self.settings.synchronous,
        )

    @property
    def connection_pool(self) -> ConnectionPool:
        """The SQLite connections this store lends to its calls (unused on PostgreSQL)."""
        return self._conns

    @property
    def open_connections(self) -> int:
        """SQLite connections open now (at most ``store.connections``, lent or free; 0 on
        PostgreSQL, whose pool has its own bound)."""
        return 0 if self._pg is not None else self._conns.count

    def release_idle(self) -> int:
        """What a long-running process calls now and then: take back the connections of
        threads that have ended, and let go of the in-memory search copies (the resident
        index, its entry maps, the vector matrix) once no search has run for
        ``search.resident_idle_s`` (the next search rebuilds them, answered the SQL way
        meanwhile); how many connections came back."""
        if self.search_idle.quiet():
            self.release_memory()
        return 0 if self._pg is not None else self._conns.release_ended()

    def release_memory(self) -> None:
        """Let go of the in-memory search copies now (unless a search is running: they
        are then kept), with the caches of decoded bodies and of analysed words and the
        page caches of the SQLite connections not lent. A search
        after this answers the SQL way while they are rebuilt, with the same hits in the
        same order."""
        with self.search_idle.paused() as quiet:
            if not quiet:
                return
            if self.resident is not None:
                self.resident.release()
            if self._matrix is not None and self._embedder is not None:
                self._matrix = _empty_matrix(self._embedder)
            self._bodies.clear()
            analysis.clear_caches()
            if self._pg is None:
                self._conns.shrink_free()  # page caches; the free connections but one closed

    def _own_conn(self) -> Conn:
        """A connection of its own for a background reader (it closes it)."""
        if self._pg is not None:  # PostgreSQL: the pool's, a statement at a time
            return pgconn.PgConn(self._pg.pool, self.url, self._pg.timeout_s)
        return db.connect(
            self.path,
            busy_timeout_s=self.settings.busy_timeout_s,
            synchronous=self.settings.synchronous,
        )

    def close(self) -> None:
        """Close every connection this store opened."""
        if self.resident is not None:
            self.resident.close()
        if self._pg is not None:
            self._pg.close()
            return
        self._conns.close_all()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing --------------------------------------------------------------------------

    def put(
        self,
        content: str,
        *,
        kind: str = "text",
        topic: str = "",
        tags: Sequence[str] = (),
        summary: str = "",
        salience: float = 0.5,
        pinned: bool = False,
        source: str = "",
        scope: str = "",
        label: str | None = None,
        expires: float | None = None,
        regenerate: str = "",
        body: str | None = None,
        keep_original: bool = True,
        tokens: int | None = None,
        index_original: bool = False,
        index_from_line: int = 1,
        progress: PutProgress | None = None,
        event_time: float | None = None,
    ) -> PutResult:
        """Store ``content`` and index it; the same content again returns the existing entry.

        ``body`` is what to store when it differs from ``content`` (a lossy compression);
        the original is kept as its own block unless ``keep_original`` is False, and
        indexed too with ``index_original`` (a search then finds the entry by words only
        the original holds; its hits say so, :attr:`Hit.in_original`). ``index_from_line``
        indexes the stored body only from that line on: its earlier lines are another
        entry's, already indexed there (a proxy part that takes in the parts before it), so a
        search finds each text once.

        On SQLite the CPU work (hashing, compression, chunking, analysis, token counting)
        runs before the write lock is taken; the lock covers only the inserts. On
        PostgreSQL a put holds only its own locks (other puts run beside it), and its first
        round trip both begins the transaction and asks whether the content is stored
        already: a repeat is answered with no analysis, and new content is analysed inside
        the transaction, a big body's later chunks each while the server writes the batch
        before (the analysis and the server's work overlap instead of adding up). With an
        embedding model the work is done before, as on SQLite: an embedding should not
        hold a connection (store/write/writes.py).

        A big body on SQLite (over ``index.FREEZE_CHARS``) is analysed a batch at a time,
        its analysed chunks and stored bytes spilled to temporary files until its write,
        and its text let go before the write (a caller that hands over its only reference,
        as ``offload add --path`` does, has memory hold neither during the write).
        ``progress`` is told ``(stage, characters done, characters in all)`` as its analysis
        (``"analysing"``) and its write (``"writing"``) go; a small body reports nothing.

        ``event_time`` (epoch seconds) is when what the content tells happened (a
        message's timestamp, a conversation's date), apart from when it is stored; a
        search whose query names a date prefers entries near it. A repeat of stored
        content gives it an event time it did not have.
        """
        pending = writes.prepare_put(
            self,
            content,
            PutOptions(
                kind, topic, check_tags(tags), summary, salience, pinned, source, scope, label,
                expires, regenerate, body, keep_original, tokens, index_original,
                index_from_line, check_event_time(event_time), progress,
            ),
        )  # fmt: skip
        del content  # a big body is written from what was prepared: its text is let go
        return writes.commit_puts(self, [pending])[0]

    def put_many(
        self,
        contents: Iterable[str],
        *,
        kind: str = "text",
        tags: Sequence[str] = (),
        salience: float = 0.5,
        source: str = "",
        scope: str = "",
        expires: float | None = None,
        event_time: float | None = None,
    ) -> list[PutResult]:
        """Store many contents sharing these settings in one write transaction (a bulk
        import: one commit, one lock hold); results in order, duplicates as in :meth:`put`
        (``event_time``: when what they tell happened, e.g. the date of the conversation
        they are turns of)."""
        opts = PutOptions(
            kind, "", check_tags(tags), "", salience, False, source, scope, None, expires,
            event_time=check_event_time(event_time),
        )  # fmt: skip
        # PostgreSQL: no look-up per put before the lock (a round trip each); the batch's
        # write transaction checks every content and word at once (store/write/pgbulk.py)
        bulk = self._pg is not None
        return writes.commit_puts(
            self, writes.prepare_many(self, ((c, opts) for c in contents), bulk=bulk)
        )

    def put_each(self, puts: Iterable[tuple[str, PutOptions]]) -> list[PutResult]:
        """Store each content with its own options (labels, kinds, sources may differ) in
        one write transaction: all or none, one commit instead of one per put (a catalog's
        documents). Results in order, each as :meth:`put` gives it."""
        bulk = self._pg is not None
        return writes.commit_puts(self, writes.prepare_many(self, puts, bulk=bulk))

    def label(self, ref: str, label: str, scope: str | None = None) -> Entry:
        """Give an entry another name the resolver understands."""
        check_label(label)
        entry = self.resolve(ref, scope)
        with db.write_tx(self.conn) as conn:
            rows.set_label(conn, label, entry.id)
            return rows.entry_by_id(conn, entry.id)

    def update(
        self,
        ref: str,
        *,
        topic: str | None = None,
        summary: str | None = None,
        tags: Sequence[str] | None = None,
        salience: float | None = None,
        scope: str | None = None,
    ) -> Entry:
        """Change an entry's descriptive metadata (never its content)."""
        if salience is not None and not 0.0 <= salience <= 1.0:
            raise InvalidInput(f"salience must be within [0, 1], got {salience}")
        entry = self.resolve(ref, scope)
        new_topic = entry.topic if topic is None else topic
        new_summary = entry.summary if summary is None else summary
        check_meta(new_topic, new_summary)
        new_tags = " ".join(entry.tags if tags is None else clean_tags(check_tags(tags)))
        vector = None
        if (new_topic, new_summary, new_tags) != (entry.topic, entry.summary, " ".join(entry.tags)):
            body = self.block_text(entry.block_hash) if self._embedder is not None else ""
            vector = self.vector_of(new_topic, new_summary, new_tags, body)
        with db.write_tx(self.conn) as conn:
            conn.execute(
                Sql(
                    "UPDATE entries SET topic = ?, summary = ?, tags = ?, salience = ? WHERE id = ?"
                ),
                (
                    new_topic,
                    new_summary,
                    new_tags,
                    entry.salience if salience is None else salience,
                    entry.id,
                ),
            )
            meta.refresh_meta(conn, entry.id)
            if vector is not None and self._embedder is not None:
                vectors.insert(conn, entry.id, self._embedder.model_id, vector)
            return rows.entry_by_id(conn, entry.id)

    # -- resolving and reading --------------------------------------------------------------

    def get(self, entry_id: int) -> Entry:
        """The entry with this id (expired entries answer Gone)."""
        return self.resolve(f"id:{entry_id}")

    def resolve(self, ref: str, scope: str | None = None) -> Entry:
        """The live entry ``ref`` names: id, label, ``ctx:sha256:<hex>``, or a hex prefix.

        A scope is a boundary: with ``scope`` given only that scope's entries answer, and a
        reference naming entries of other scopes only raises OtherScope (nothing of theirs
        is read, not even a content hash's body). ``scope=None`` asks for every scope;
        several entries sharing one content are then one answer. Distinct contents under
        one prefix raise AmbiguousReference; a forgotten or expired entry raises Gone with
        the reason.
        """
        parsed = parse_ref(ref)
        conn = self.conn
        matched = lookup.entries_named(conn, parsed)
        now = self.clock()
        live = [(r, ls) for r, ls in matched if r["expires"] is None or r["expires"] > now]
        for r, _ in matched:
            if r["expires"] is not None and r["expires"] <= now:
                lifecycle.expire(self, int(r["id"]))  # archived; a live twin still answers
        if scope is not None:
            elsewhere = bool(live)
            live = [m for m in live if m[0]["scope"] == scope]
            if elsewhere and not live:
                raise OtherScope(parsed.raw, scope)
        if not live:
            raise lookup.why_missing(conn, parsed, scope)
        hashes = sorted({hexed(r["content_hash"]) for r, _ in live})
        if len(hashes) > 1:
            raise AmbiguousReference(parsed.raw, [f"ctx:sha256:{h[:16]}" for h in hashes])
        return Entry.from_row(*live[0])

    def body(self, entry: Entry, *, original: bool = False, touch: bool = False) -> str:
        """The stored body, verified against its hash (``original``: what the caller sent)."""
        digest = entry.content_hash if original else entry.block_hash
        text = self.block_text(digest)
        if touch:
            self.touch(entry.id)
        return text

    def read(self, ref: str, scope: str | None = None) -> str:
        """The stored body that ``ref`` names (see :meth:`resolve`), verified."""
        return self.body(self.resolve(ref, scope))

    def block_id(self, digest: str) -> int | None:
        """The row id of a block (None when it is not stored)."""
        row = self.conn.execute(rows.BLOCK_ID, (digest,)).fetchone()
        return None if row is None else int(row[0])

    def block_text(self, digest: str) -> str:
        """A block's plaintext by hash, verified once and then served from a small cache."""
        cached = self._bodies.get(digest)
        if cached is not None:
            return cached
        row = self.conn.execute(
            Sql(
                "SELECT codec, CAST(data AS BLOB) AS data FROM blocks WHERE hash = unhex(?)",
                "SELECT codec, data AS data FROM blocks WHERE hash = %s",
            ),
            (digest,),
        ).fetchone()
        if row is None:
            raise NotFound(f"ctx:sha256:{digest}", "the block is missing; run `offload doctor`")
        text = blocks.unpack(digest, row["codec"], bytes(row["data"]))
        self._bodies.put(digest, text)
        return text

    def block_texts(self, digests: Iterable[str]) -> dict[str, str]:
        """Many blocks' plaintexts by hash, as :meth:`block_text` gives each, those not
        cached read in one statement (a search shows and checks up to 40 chunks)."""
        out: dict[str, str] = {}
        missing: list[str] = []
        for digest in dict.fromkeys(digests):
            cached = self._bodies.get(digest)
            if cached is None:
                missing.append(digest)
            else:
                out[digest] = cached
        if missing:
            found = self.conn.execute(_BLOCKS_BY_HASH, (json.dumps(missing),)).fetchall()
            for row in found:
                digest = str(row["hash"])
                text = blocks.unpack(digest, row["codec"], bytes(row["data"]))
                self._bodies.put(digest, text)
                out[digest] = text
        for digest in missing:
            if digest not in out:
                raise NotFound(f"ctx:sha256:{digest}", "the block is missing; run `offload doctor`")
        return out

    def has_block(self, digest: str) -> bool:
        """Whether a block with this hash is stored."""
        return (
            self.conn.execute(
                Sql(
                    "SELECT 1 FROM blocks WHERE hash = unhex(?)",
                    "SELECT 1 FROM blocks WHERE hash = %s",
                ),
                (digest,),
            ).fetchone()
            is not None
        )

    def touch(self, entry_id: int) -> None:
        """Record an access (feeds the recency x frequency score)."""
        with db.write_tx(self.conn) as conn:
            conn.execute(
                Sql(
                    "UPDATE entries SET accessed = ?, access_count = access_count + 1 WHERE id = ?"
                ),
                (self.clock(), entry_id),
            )

    # -- listing and searching -----------------------------------------------------------------

    def entries(
        self, filters: Filters = NO_FILTERS, *, limit: int = 50, offset: int = 0
    ) -> list[Entry]:
        """Entries best first: pinned, then salience, then most recently used."""
        where, params = query.filter_sql(filters, self.clock())
        # pick the page's ids on the ranking index first, then join what they need
        ids = [
            int(r[0])
            for r in self.conn.execute(
                Sql(
                    f"SELECT e.id FROM entries e WHERE {where} "
                    "ORDER BY e.pinned DESC, e.salience DESC, e.accessed DESC, e.id DESC "
                    "LIMIT ? OFFSET ?"
                ),
                (*params, max(0, limit), max(0, offset)),
            )
        ]
        if not ids:
            return []
        found = {
            int(r["id"]): r
            for r in self.conn.execute(
                Sql(f"{_ENTRY_SELECT} WHERE e.id IN ({','.join('?' * len(ids))})"), ids
            )
        }
        return [Entry.from_row(found[i], rows.labels(self.conn, i)) for i in ids if i in found]

    def count(self, filters: Filters = NO_FILTERS) -> int:
        """How many entries match ``filters``."""
        where, params = query.filter_sql(filters, self.clock())
        row = self.conn.execute(
            Sql(f"SELECT count(*) FROM entries e WHERE {where}"), params
        ).fetchone()
        return int(row[0])

    def peek(self, scope: str | None = None) -> dict[str, Any]:
        """Counts only: by status, pinned, by kind, and total tokens.

        Reads the per-(scope, kind) sums that triggers keep (O(kinds), not O(entries)),
        after archiving anything whose expiry has passed so the sums count live entries.
        """
        self.expire_due()
        where, params = ("scope = ?", [scope]) if scope is not None else ("1 = 1", [])
        kinds = self.conn.execute(
            Sql(
                "SELECT kind, sum(entries) AS n, sum(tokens) AS t, sum(hot) AS hot, "
                f"sum(pinned) AS pinned FROM scope_stats WHERE {where} GROUP BY kind "
                "HAVING sum(entries) > 0 ORDER BY n DESC, kind"
            ),
            params,
        ).fetchall()
        n = sum(r["n"] for r in kinds)
        hot = sum(r["hot"] for r in kinds)
        return {
            "entries": n,
            "cold": n - hot,
            "hot": hot,
            "pinned": sum(r["pinned"] for r in kinds),
            "tokens": sum(r["t"] for r in kinds),
            "kinds": {r["kind"]: {"entries": r["n"], "tokens": r["t"]} for r in kinds},
        }

    def scope_counts(self) -> dict[str, int]:
        """Live entries per scope, from the per-(scope, kind) sums (O(scopes x kinds))."""
        self.expire_due()
        found = self.conn.execute(
            Sql(
                "SELECT scope, sum(entries) AS n FROM scope_stats GROUP BY scope "
                "HAVING sum(entries) > 0 ORDER BY scope"
            )
        ).fetchall()
        return {str(r["scope"]): int(r["n"]) for r in found}

    def elsewhere(self, scope: str | None) -> dict[str, int]:
        """What scopes other than ``scope`` hold: ``{"entries": n, "scopes": k}`` (None:
        every scope was asked for, so nothing is elsewhere)."""
        counts = {} if scope is None else self.scope_counts()
        others = [n for s, n in counts.items() if s != scope]
        return {"entries": sum(others), "scopes": len(others)}

    def stats(self) -> dict[str, Any]:
        """Store-wide figures: entries, blocks, raw and stored bytes, file sizes (the
        blocks' totals read again only when they may have changed: :mod:`totals`)."""
        peek = self.peek()
        return {
            **peek,
            **self._totals.read(self.conn, peek),
            "disk_bytes": self.disk_bytes(),
            "search_memory_bytes": self.search_memory_bytes(),
            "path": self.location,
        }

    def search_memory_bytes(self) -> int:
        """What this process holds in memory to search the store: the resident index, the
        vector matrix and the cached bodies (they grow with the entries searched and are
        let go when searches stay quiet, ``search.resident_idle_s``)."""
        index = 0 if self.resident is None else self.resident.held_bytes
        vectors_held = 0 if self._matrix is None else self._matrix.held_bytes
        return index + vectors_held + self._bodies.held_chars

    def disk_bytes(self) -> int:
        """What the store occupies on disk: the file and its log, or the whole database."""
        return totals.disk_bytes(self.conn, self.path, self.url)


def _release_free_pages(conn: sqlite3.Connection) -> None:
    """Give pages freed by index merges back to the filesystem (best effort, on close)."""
    try:
        conn.executescript("PRAGMA incremental_vacuum;")  # exec steps it to the end
        conn.execute(Sql("PRAGMA wal_checkpoint(PASSIVE)", "SELECT 'ok'", noop=True))
    except sqlite3.OperationalError:
        pass  # another process holds the lock; the pages stay free for reuse
