"""A PostgreSQL connection that runs the store's statements (the other side of the seam).

:class:`PgConn` offers what the row-level functions use of a ``sqlite3`` connection
(``execute``, ``executemany``, ``in_transaction``; rows readable by name and by position;
``lastrowid``), running each statement's PostgreSQL form (:class:`offload.store.backend.Sql`). Connections
come from a ``psycopg_pool`` pool: borrowed per statement, or for a whole write
transaction.

Writes keep SQLite's guarantee that write transactions are serialised: ``BEGIN
IMMEDIATE`` becomes ``BEGIN`` plus a transaction-scoped advisory lock, so a read-then-write
inside one (dedup, label moves, counters) sees no concurrent writer, on any machine. The
CPU work of a put is done before the lock is taken, as with SQLite. Puts are the one
exception (:meth:`PgConn.begin_keyed`): they hold that lock *shared*, plus an exclusive
lock per thing their read-then-write depends on (the content in its scope, each block,
the label), taken in sorted order so that two puts never wait on each other in a cycle.
Puts that share none of them run at once; every other write still waits for all of them.

Credentials never reach a message: errors name the URL with its password removed
(:func:`offload.core.urls.redact_url`). TLS and other libpq options pass through the URL's query string.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar
from urllib.parse import parse_qs, urlsplit

from offload.core.urls import redact_url
from offload.errors import RowRefused, StoreBusy, StoreError
from offload.store.backend import Sql
from offload.store.postgres import pgarrays, pgterms

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

_R = TypeVar("_R")

# seconds libpq waits for one connection when the URL names no connect_timeout
CONNECT_TIMEOUT_S = 5
# seconds a statement waits for a pooled connection before asking the server if it is up
POOL_WAIT_S = 1.0
# the key of the advisory lock every write transaction holds ("offload" in ASCII)
WRITE_LOCK = 0x6F66666C6F6164
# a put's own locks (begin_keyed): taken in the order of the array, one statement
_KEY_LOCKS = "SELECT count(pg_advisory_xact_lock(k)) FROM unnest(ARRAY[{}]::bigint[]) AS k"
# every array goes in binary: a text array of the counts' JSON cost the client a regex
# callback per quote it escaped (~25 ms for a 100 KB body), the binary form none
_CHUNK_ARRAYS = """unnest(%b::integer[], %b::integer[], %b::integer[], %b::integer[], %b::tsvector[],
        %b::text[]) WITH ORDINALITY AS s(start_line, end_line, start, stop, terms, counts, n)"""
_CHUNK_ROWS = """INSERT INTO chunks (id, block_id, start_line, end_line, start, "end", term_counts)
    SELECT id, {block}, start_line, end_line, start, stop, counts FROM src"""


def _chunks_statement(block: str, where: str = "") -> str:
    """A block's chunks and their search rows in one statement, ids in chunk order; the
    block's id is the SQL ``block`` (after the arrays' parameters), ``where`` a filter."""
    return f"""
WITH src AS MATERIALIZED (
    SELECT s.*, nextval('chunks_id_seq') AS id
    FROM {_CHUNK_ARRAYS}
    {where}
    ORDER BY s.n
), c AS (
    {_CHUNK_ROWS.format(block=block)}
)
INSERT INTO search_body (rowid, terms) SELECT id, terms FROM src
"""


def _indexed_block_statement(answer: str) -> str:
    """A new block with its chunks and their search rows in one statement, ``answer`` the
    SELECT it ends with (over ``b``: the block's new id, no row when it was stored
    before: content-addressed, nothing is inserted then)."""
    return f"""
WITH b AS (
    INSERT INTO blocks (hash, size, lines, codec, data, created)
    VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (hash) DO NOTHING RETURNING id
), src AS MATERIALIZED (
    SELECT s.*, b.id AS block_id, nextval('chunks_id_seq') AS id
    FROM b, {_CHUNK_ARRAYS}
    ORDER BY s.n
), c AS (
    {_CHUNK_ROWS.format(block="block_id")}
), t AS (
    INSERT INTO search_body (rowid, terms) SELECT id, terms FROM src
)
{answer}
"""


# a block's chunks (insert_chunks): one round trip instead of two per chunk
_INSERT_CHUNKS = Sql.postgres_only(_chunks_statement("%s"))
# a new block with its chunks outside a transaction (insert_indexed_block): one round
# trip, where the block's insert and then its chunks' took two
_INSERT_INDEXED_BLOCK = Sql.postgres_only(_indexed_block_statement("SELECT id FROM b"))
# A block inside a transaction (insert_indexed_block, pipelined): its new id (0 when it
# was stored before) also kept in a transaction-local setting that a big body's later
# batches' statements read, so the client sends them without waiting for the id (it
# waited ~2-4 ms of a 100 KB put); a batch after a block stored before inserts nothing.
# The setting ends with the transaction.
_STREAM_SETTING = "offload.streamed_block"
_STREAM_HEAD = _indexed_block_statement(
    f"SELECT set_config('{_STREAM_SETTING}', coalesce((SELECT id FROM b), 0)::text, true)::bigint"
)
_STREAM_CHUNKS = _chunks_statement(
    f"current_setting('{_STREAM_SETTING}')::bigint",
    f"WHERE current_setting('{_STREAM_SETTING}') <> '0'",
)
SCHEMES = ("postgresql://", "postgres://")
_TUPLES_OK = 2  # libpq's PGRES_TUPLES_OK (psycopg.pq.ExecStatus), without importing psycopg


def is_postgres(url: str) -> bool:
    """Whether a store URL names a PostgreSQL server."""
    return url.startswith(SCHEMES)


# whether a table is under row-level security (then COPY FROM is refused), per store URL
_ROW_SECURITY: dict[tuple[str, str], bool] = {}


class PgRow(tuple[Any, ...]):
    """A row readable by position and by column name (like ``sqlite3.Row``)."""

    _index: dict[str, int]
    _names: tuple[str, ...]

    def __new__(cls, values: Sequence[Any], names: tuple[str, ...], index: dict[str, int]) -> PgRow:
        row = super().__new__(cls, values)
        row._index, row._names = index, names
        return row

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        """The column names, in order."""
        return list(self._names)


def _returns_rows(cursor: Any) -> bool:
    """Whether the statement returned rows (``cursor.description`` is not None), read
    from the result without building its Column objects a second time."""
    res = cursor.pgresult
    return res is not None and bool(res.nfields or res.status == _TUPLES_OK)


def row_factory(cursor: Any) -> Any:
    if not _returns_rows(cursor):
        return tuple
    names = tuple(d.name for d in cursor.description)
    index: dict[str, int] = {}
    for i, n in enumerate(names):
        index.setdefault(n, i)
    return lambda values: PgRow(values, names, index)


class PgCursor:
    """The result of one statement, read whole when it ran."""

    def __init__(
        self, rowcount: int | None, lastrowid: int | None = None, rows: list[Any] | None = None
    ) -> None:
        self._rows: deque[Any] = deque(rows or ())
        self.rowcount = -1 if rowcount is None else rowcount
        self.lastrowid = lastrowid

    def fetchone(self) -> Any:
        """The next row, or None."""
        return self._rows.popleft() if self._rows else None

    def fetchall(self) -> list[Any]:
        """Every remaining row."""
        out = list(self._rows)
        self._rows.clear()
        return out

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


class PgConn:
    """One thread's view of a PostgreSQL store, speaking the store's statements.

    Outside a transaction each statement borrows a pooled connection just for itself (its
    rows are read at once), so a store's connections are bounded by the pool, not by the
    number of threads; a write transaction holds one from BEGIN to COMMIT. A statement that
    meets a link broken while idle (the server restarted) is tried once more on a fresh one:
    outside a transaction that is always a read, and nothing of it ran.
    """

    def __init__(self, pool: ConnectionPool[Any], url: str, timeout_s: float) -> None:
        self._pool = pool
        self._url = url
        self._timeout_s = timeout_s
        self._tx: psycopg.Connection[Any] | None = None
        self._direct: set[int] = set()  # ids of connections made outside the pool
        # reads sent with BEGIN (begin_keyed): (sql, parameters) -> its result
        self._first: dict[tuple[str, tuple[Any, ...]], PgCursor] = {}
        # reads run ahead together (read_ahead): sql -> (its parameters, its result)
        self._ahead: dict[str, tuple[tuple[Any, ...], PgCursor]] = {}

    @property
    def url(self) -> str:
        """The store's URL (a key for per-store caches; never shown: it may hold a password)."""
        return self._url

    @property
    def in_transaction(self) -> bool:
        """Whether this thread has a write transaction open."""
        return self._tx is not None

    def execute(self, sql: Sql, parameters: Any = (), /) -> PgCursor:
        """Run one statement (its PostgreSQL form); its rows are read at once."""
        head = sql.strip().upper()
        if head in ("BEGIN", "BEGIN IMMEDIATE", "COMMIT", "ROLLBACK"):
            self._transaction(head)
            return PgCursor(None)
        st, params = _pg_bound(sql, parameters)
        if self._first and self._tx is not None:
            first = self._first.pop((st.postgres, tuple(params)), None)
            if first is not None:
                return first  # read with the BEGIN (begin_keyed), nothing else run since
        ahead = self._ahead.get(st.postgres) if self._ahead else None
        if ahead is not None and self._tx is None and ahead[0] == tuple(params):
            del self._ahead[st.postgres]
            return ahead[1]  # read ahead (read_ahead), nothing else run since
        return self._run(lambda raw: _run_one(raw, st, params))

    def read_ahead(self, reads: Sequence[tuple[Sql, Sequence[Any]]]) -> None:
        """Run ``reads`` (the store's SQL and parameters, each a read) now, together: one
        round trip, one statement each with its own snapshot, as one by one. Each result
        answers the next :meth:`execute` of the same statement with the same parameters,
        once, provided no other statement runs before it (one that does drops them all).
        A search's three refresh reads of the copies it holds in memory go this way
        (store/search/memory/resident.py). Nothing inside a write transaction (its reads see its writes)."""
        if self._tx is not None or not reads:
            return
        keyed = [_pg_bound(sql, parameters) for sql, parameters in reads]
        results = self._run(lambda raw: _run_together(raw, _inlined(raw, keyed)))
        self._ahead = {
            st.postgres: (tuple(params), cur or PgCursor(None))
            for (st, params), cur in zip(keyed, results, strict=True)
        }

    def executemany(self, sql: Sql, parameters: Iterable[Sequence[Any]], /) -> PgCursor:
        """Run one statement for each parameter row."""
        st = pg_form(sql)
        rows = [st.params(p) if st.params else p for p in parameters]
        if not rows or st.noop:
            return PgCursor(None)
        return self._run(lambda raw: _run_many(raw, st, rows))

    def _run(self, fn: Callable[[psycopg.Connection[Any]], _R]) -> _R:
        import psycopg

        self._first = {}  # another statement ran: an early read no longer answers one
        self._ahead = {}

        if self._tx is not None:
            with errors(self._url):
                return fn(self._tx)
        for attempt in (1, 2):
            raw = self._borrow()
            try:
                with errors(self._url):
                    try:
                        return fn(raw)
                    except psycopg.OperationalError:
                        if attempt == 2 or not raw.broken:
                            raise
                        self._pool.check()  # the server restarted: replace every stale link
            finally:
                self._give_back(raw)
        raise AssertionError("unreachable")  # pragma: no cover

    def _borrow(self) -> psycopg.Connection[Any]:
        import psycopg
        import psycopg_pool

        quick = min(POOL_WAIT_S, self._timeout_s)
        try:
            raw: psycopg.Connection[Any] = self._pool.getconn(timeout=quick)
            return raw
        except psycopg_pool.PoolTimeout:
            pass
        # None at once: every pooled connection is busy, or the server is down. Asking the
        # server tells which: one that is down is an error now, not after the busy timeout
        # (probe raises StoreError); one that is up leaves the wait for the pool as it was.
        probe(self._url)
        try:
            raw = self._pool.getconn(timeout=max(0.0, self._timeout_s - quick))
            return raw
        except psycopg_pool.PoolTimeout:
            pass
        # after an outage the pool retries with growing pauses: ask the server itself
        with errors(self._url):
            raw = psycopg.connect(
                self._url,
                autocommit=True,
                row_factory=row_factory,
                connect_timeout=max(1, round(self._timeout_s)),
            )
        configure(raw)
        self._direct.add(id(raw))
        return raw

    def _give_back(self, raw: psycopg.Connection[Any]) -> None:
        if id(raw) in self._direct:
            self._direct.discard(id(raw))
            raw.close()
        else:
            self._pool.putconn(raw)

    def _transaction(self, head: str) -> None:
        raw = self._tx
        self._first = {}
        if head == "ROLLBACK":
            if raw is not None:
                self._tx = None
                _rollback_quietly(raw)
                self._give_back(raw)
            return
        if head == "COMMIT":
            if raw is None:
                return
            self._tx = None
            try:
                with errors(self._url):
                    raw.execute("COMMIT")
            finally:
                self._give_back(raw)
            return
        raw = self._borrow()
        try:
            with errors(self._url):
                raw.execute(f"BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK})")
        except BaseException:
            _rollback_quietly(raw)
            self._give_back(raw)
            raise
        self._tx = raw

    def insert_chunks(self, block_id: int, chunks: Sequence[Sequence[Any]]) -> None:
        """Insert a block's chunks, each (start_line, end_line, start, end, terms, their
        counts, term_counts: index.term_counts), and their search rows in one statement:
        one round trip instead of two per chunk (a 100 KB body has about a hundred chunks)."""
        if not chunks:
            return
        params = (*_chunk_columns(chunks), block_id)
        self._run(lambda raw: _run_one(raw, _INSERT_CHUNKS, params))

    def insert_indexed_block(
        self,
        block: Sequence[Any],
        chunks: Sequence[Sequence[Any]],
        later: Iterable[Sequence[Sequence[Any]]] = (),
        then: tuple[Sql, Sequence[Any]] | None = None,
        after: Callable[[], tuple[Sql, Sequence[Any]] | None] | None = None,
    ) -> Inserted:
        """Insert a new block, ``block`` = (hash, size, lines, codec, data, created), with
        its chunks (as :meth:`insert_chunks` takes them, at least one) and their search
        rows, in one statement. Its :attr:`Inserted.block_id` is the block's new id, or
        None when a block with that hash is stored already (then nothing was inserted).

        ``later``: more batches of its chunks, in order, each taken from the iterable
        (analysed, by the caller's generator) only once the batch before has been sent.
        Inside a transaction they go in pipeline mode, without waiting for the server's
        answers: the server writes one batch while the next is being analysed.

        ``then``: a statement (the store's SQL and parameters) run right after the
        block's, before the later batches, whether the block was new or not; its id is
        :attr:`Inserted.then_id`. A put's entry goes there, so the later chunks are
        mapped to it as they land rather than all at once after the last. ``after``: a
        statement made once the later batches are taken (a put's vocabulary, maybe made of
        their chunks), run last (None, or giving None: none).

        Inside a transaction all of it is one pipeline: one round trip, however many
        statements.
        """
        follow = None if then is None else _pg_bound(*then)
        if self._tx is not None:
            params = (*block, *_chunk_columns(chunks))
            return self._run(lambda raw: _stream_block(raw, params, later, follow, after))
        # outside one each statement would commit on its own: the chunks all in one
        whole = [*chunks, *(row for batch in later for row in batch)]
        params = (*block, *_chunk_columns(whole))
        cur = self._run(lambda raw: _run_one(raw, _INSERT_INDEXED_BLOCK, params))
        block_id = _new_id(cur.fetchone())
        then_id = (
            None if follow is None else self._run(lambda raw: _run_one(raw, *follow)).lastrowid
        )
        last = None if after is None else after()
        if last is not None:
            self.execute(*last)
        return Inserted(block_id, then_id)

    def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Write ``rows`` into ``table`` with one ``COPY`` (bulk loads, store/write/pgbulk.py):
        one round trip however many rows, inside the caller's write transaction."""
        if not rows:
            return
        names = ", ".join(f'"{c}"' for c in columns)
        key = (self._url, table)

        def copy(raw: psycopg.Connection[Any]) -> PgCursor:
            if key not in _ROW_SECURITY:
                found = raw.execute(
                    "SELECT relrowsecurity FROM pg_class WHERE oid = to_regclass(%s)", (table,)
                ).fetchone()
                _ROW_SECURITY[key] = bool(found and found[0])
            if _ROW_SECURITY[key]:
                # PostgreSQL refuses COPY FROM into a table under row-level security
                # (store/postgres/pgscopes.py): the rows go in as INSERTs, which the policies check
                marks = ", ".join(["%s"] * len(columns))
                with raw.cursor() as cur:
                    cur.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})", rows)
                return PgCursor(len(rows))
            try:
                with raw.cursor() as cur, cur.copy(f"COPY {table} ({names}) FROM STDIN") as out:
                    for row in rows:
                        out.write_row(row)
            except psycopg.errors.FeatureNotSupported:
                _ROW_SECURITY.pop(key, None)  # secured since: the next put looks again
                raise
            return PgCursor(len(rows))

        self._run(copy)

    def begin_keyed(self, keys: Iterable[str], then: Sequence[tuple[Sql, Any]] = ()) -> None:
        """Begin a put's write transaction: the store lock shared, and an exclusive lock
        for each of ``keys`` (what the put reads and then writes), in sorted order.

        A put that shares no key with another runs at the same time; one that does waits
        for it, as every put did behind the store-wide lock. Writes that are not puts
        (forget, reap, labels, checkouts, migrations) take the store lock exclusively and
        so still see no put in flight.

        ``then``: statements (sql, parameters) the transaction starts with, after the
        locks, sent with them in one query string: all of it costs one round trip. The rows
        of each that returns rows (a read) answer this connection's next execution of the
        same statement with the same parameters, once (see :meth:`execute`); any other
        statement drops those not asked for yet, unread.
        """
        locks = ",".join(str(k) for k in sorted({lock_key(k) for k in keys}))
        # one round trip: the keys are integers, written into the statement
        begin = [f"SELECT pg_advisory_xact_lock_shared({WRITE_LOCK})"]
        if locks:
            begin.append(_KEY_LOCKS.format(locks))
        raw = self._borrow()
        try:
            with errors(self._url):
                if not then:
                    raw.execute("; ".join(["BEGIN", *begin]))
                else:
                    self._first = _begin_with(raw, begin, then)
        except BaseException:
            self._tx = None
            _rollback_quietly(raw)
            self._give_back(raw)
            raise
        self._tx = raw

    def begin_state(self, namespaces: Sequence[str], keys: Sequence[str] | None) -> None:
        """Begin a write transaction of saved state (store/state.py) without the store lock:
        the namespace's lock shared and each of ``keys``' exclusively; ``keys`` None: each
        of ``namespaces``' locks exclusively (a prune reads one namespace and deletes in
        another). Namespace locks come first, and locks of one kind in sorted order, so
        state writers never wait on each other in a cycle.

        State statements touch only the ``state`` and ``state_retired`` rows of their
        keys, each write one conditional statement, so the store lock guards nothing they
        need: a state write (a proxy session's frontier) no longer waits behind a bulk
        load holding it (``put_many``), only behind writers of the same keys.
        """
        spaces = sorted({lock_key(f"state\x00{n}") for n in namespaces})
        if keys is None:
            begin = [_KEY_LOCKS.format(",".join(map(str, spaces)))]
        else:
            (namespace,) = namespaces  # keys of one namespace
            locks = sorted({lock_key(f"state\x00{namespace}\x00{k}") for k in keys})
            begin = [f"SELECT pg_advisory_xact_lock_shared({spaces[0]})"]
            if locks:
                begin.append(_KEY_LOCKS.format(",".join(map(str, locks))))
        raw = self._borrow()
        try:
            with errors(self._url):
                raw.execute("; ".join(["BEGIN", *begin]))
        except BaseException:
            _rollback_quietly(raw)
            self._give_back(raw)
            raise
        self._tx = raw

    def settled_id(self, sequence: str, *, wait: bool) -> int | None:
        """The value ``sequence`` had handed out when no write transaction was in flight
        (every row with an id up to it is committed or never will be), or None when a
        writer is in flight and ``wait`` is False.

        Writers take the store lock at BEGIN, before any id is drawn: holding it
        exclusively for an instant is a moment when none is in flight. ``wait`` waits
        for the writers in flight to commit (new ones queue behind it for that instant).
        """
        if self._tx is not None:
            return None  # this thread's own write is in flight (waiting would be for itself)
        take = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
        raw = self._borrow()
        try:
            with errors(self._url):
                raw.execute("BEGIN")
                row: Any = raw.execute(f"SELECT {take}(%s)", (WRITE_LOCK,)).fetchone()
                got = wait or bool(row[0])
                top: Any = raw.execute(f"SELECT last_value, is_called FROM {sequence}").fetchone()
                raw.execute("COMMIT")
        except BaseException:
            _rollback_quietly(raw)
            raise
        finally:
            self._give_back(raw)
        if not got:
            return None
        return int(top[0]) if top[1] else 0

    def commit(self) -> None:
        """Nothing to do: a statement outside a write transaction commits by itself."""

    def close(self) -> None:
        """Roll back a transaction left open (a thread that died mid-write)."""
        self._transaction("ROLLBACK")


def _begin_with(
    raw: psycopg.Connection[Any], begin: list[str], then: Sequence[tuple[Sql, Any]]
) -> dict[tuple[str, tuple[Any, ...]], PgCursor]:
    """BEGIN, the ``begin`` statements (the locks) and then ``then`` as one query string
    (:func:`_run_together`): one round trip and one execute for all of them. Each runs
    after the one before it, in the same transaction and with its own snapshot, exactly as
    it would one by one (so a read after the locks sees what the writers before them
    committed); an error skips the rest. Returns the result of each of ``then``'s reads (a
    statement that returned rows) by its key (its PostgreSQL SQL and parameters).

    psycopg's pipeline mode also sent them in one round trip, but its Python loop per
    statement and per result cost the client ~0.25 ms more a put."""
    keyed = [_pg_bound(sql, parameters) for sql, parameters in then]
    results = _run_together(raw, ["BEGIN", *begin, *_inlined(raw, keyed)])
    answers = zip(keyed, results[1 + len(begin) :], strict=True)
    # a read answers once; a write must run again when asked again
    return {(st.postgres, tuple(params)): r for (st, params), r in answers if r is not None}


def _inlined(raw: psycopg.Connection[Any], statements: Sequence[tuple[Sql, Any]]) -> list[str]:
    """Statements with their parameters written in as literals (libpq's quoting)."""
    import psycopg

    inline = psycopg.ClientCursor(raw)
    return [inline.mogrify(st.postgres, params) for st, params in statements]


def _run_together(raw: psycopg.Connection[Any], statements: Sequence[str]) -> list[PgCursor | None]:
    """``statements`` (their parameters written in) as one query string: one round trip.
    Each one's rows are read whole; None for one that returns no rows (a write, BEGIN)."""
    cur = raw.execute("; ".join(statements))
    out: list[PgCursor | None] = []
    while True:
        out.append(PgCursor(cur.rowcount, None, cur.fetchall()) if _returns_rows(cur) else None)
        if not cur.nextset():
            return out


def _chunk_columns(chunks: Sequence[Sequence[Any]]) -> list[Any]:
    """Chunks (see PgConn.insert_chunks) as the six arrays the chunk statements take, each
    packed whole (store/postgres/pgarrays.py)."""
    cols: list[list[Any]] = [list(c) for c in zip(*chunks, strict=True)]
    # binary tsvectors, from the counts the put made already
    terms = [pgterms.ChunkTerms(t, n) for t, n in zip(cols[4], cols[5], strict=True)]
    lines_and_offsets = [pgarrays.int4s(c) for c in cols[:4]]
    return [*lines_and_offsets, pgarrays.TsvectorColumn(terms), pgarrays.texts(cols[6])]


def lock_key(key: str) -> int:
    """The 64-bit advisory lock key of a put's key (never the store lock's own)."""
    value = int.from_bytes(
        hashlib.blake2b(key.encode(), digest_size=8).digest(), "big", signed=True
    )
    return value if value != WRITE_LOCK else value ^ 1


def _rollback_quietly(raw: psycopg.Connection[Any]) -> None:
    import psycopg

    if raw.closed or raw.broken:
        return
    with contextlib.suppress(psycopg.Error):  # the error being raised says more
        raw.execute("ROLLBACK")


class Inserted(NamedTuple):
    """What :meth:`PgConn.insert_indexed_block` wrote: the block's new id (None: stored
    before) and the id of the statement run after it (None: none, or no id)."""

    block_id: int | None
    then_id: int | None


def pg_form(sql: Sql) -> Sql:
    """A statement as this connection runs it (:attr:`Sql.postgres`); a bare string, which
    has no PostgreSQL form, or one only SQLite runs is refused (StoreError)."""
    if not isinstance(sql, Sql):
        raise StoreError(f"a statement without its PostgreSQL form: {sql[:80]}")
    if not sql.postgres_runs:
        raise StoreError(f"a statement only SQLite runs was sent to PostgreSQL: {sql[:80]}")
    return sql


def _pg_bound(sql: Sql, parameters: Sequence[Any]) -> tuple[Sql, Any]:
    """A store statement and its parameters as PostgreSQL takes them."""
    st = pg_form(sql)
    return st, (st.params(parameters) if st.params else parameters)


def _stream_block(
    raw: psycopg.Connection[Any],
    params: Sequence[Any],
    later: Iterable[Sequence[Sequence[Any]]],
    then: tuple[Sql, Any] | None = None,
    after: Callable[[], tuple[Sql, Sequence[Any]] | None] | None = None,
) -> Inserted:
    """The block statement (and ``then``), then one chunk statement per later batch, then
    ``after``'s statement, pipelined: each is sent as soon as its batch is ready, and the
    answers are waited for once, after the last. The block's new id is None when it was
    stored before (then the later batches insert nothing)."""
    with raw.pipeline():
        head = raw.execute(_STREAM_HEAD, params)
        follow = None if then is None else raw.execute(then[0].postgres, then[1] or None)
        wants_id = then is not None and then[0].returns_id
        for batch in later:
            raw.execute(_STREAM_CHUNKS, _chunk_columns(batch))
        last = None if after is None else after()
        if last is not None:
            st, parameters = _pg_bound(*last)
            raw.execute(st.postgres, parameters or None)
        block_id = _new_id(head.fetchone()) or None
        then_id = _new_id(follow.fetchone()) if follow is not None and wants_id else None
    return Inserted(block_id, then_id)


def _new_id(row: Any) -> int | None:
    """The id a ``RETURNING id`` row holds, or None for no row (nothing was inserted)."""
    return None if row is None else int(row[0])


def _run_one(raw: psycopg.Connection[Any], st: Sql, params: Any) -> PgCursor:
    cur = raw.execute(st.postgres, params or None)
    if st.returns_id:
        row = cur.fetchone()
        return PgCursor(cur.rowcount, int(row[0]) if row else None, [])
    rows = cur.fetchall() if _returns_rows(cur) else []
    return PgCursor(cur.rowcount, None, rows)


def _run_many(raw: psycopg.Connection[Any], st: Sql, rows: list[Any]) -> PgCursor:
    with raw.cursor() as cur:
        cur.executemany(st.postgres, rows)
        return PgCursor(cur.rowcount, None, [])


class _ErrorMap:
    """psycopg's errors as offload's (the URL in the message has no password)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        import psycopg

        if exc is None or not isinstance(exc, psycopg.Error):
            return
        where = redact_url(self.url)
        busy = (
            psycopg.errors.LockNotAvailable,
            psycopg.errors.SerializationFailure,
            psycopg.errors.DeadlockDetected,
        )
        if isinstance(exc, busy):
            raise StoreBusy(f"store at {where} is busy ({first_line(exc)})") from None
        refused = _refused_table(exc)
        if refused is not None:
            raise RowRefused(
                f"store at {where}: {first_line(exc)} (this role is held to its scopes: "
                "`offload store roles` lists them); nothing was saved",
                where=where,
                table=refused,
            ) from None
        if isinstance(exc, psycopg.OperationalError):
            raise StoreError(
                f"store at {where} is unavailable ({first_line(exc)}); nothing was saved"
            ) from None
        raise StoreError(f"store at {where}: {first_line(exc)}") from None


_POLICY_TABLE = re.compile(r'row-level security policy .*for table "([^"]+)"')


def _refused_table(exc: BaseException) -> str | None:
    """The table whose row-level security policy refused a row, or None when ``exc`` is
    another error (PostgreSQL names the table in its message only)."""
    import psycopg

    if not isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return None
    found = _POLICY_TABLE.search(first_line(exc))
    return found.group(1) if found else None


def errors(url: str) -> _ErrorMap:
    """A context in which psycopg's errors become offload's (named by the redacted URL)."""
    return _ErrorMap(url)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _load_numeric(value: Any) -> Any:
    return int(value) if value == value.to_integral_value() else float(value)


def configure(conn: psycopg.Connection[Any]) -> None:
    """Set up a new connection: sums of integer columns (numeric) load as ints."""
    from psycopg.types.numeric import NumericLoader

    class _Numeric(NumericLoader):
        def load(self, data: Any) -> Any:
            value = super().load(data)
            return _load_numeric(value) if isinstance(value, Decimal) else value

    conn.adapters.register_loader("numeric", _Numeric)
    pgterms.register(conn)
    pgarrays.register(conn)


def connect_options(url: str) -> dict[str, Any]:
    """libpq options offload adds to ``url``: a bounded ``connect_timeout`` unless the URL
    names its own (libpq's default is to wait as long as the network does)."""
    query = parse_qs(urlsplit(url).query)
    return {} if "connect_timeout" in query else {"connect_timeout": CONNECT_TIMEOUT_S}


def probe(url: str) -> None:
    """Connect once, so that an unreachable server is one clear StoreError (exit 5) at
    once, not the pool's retries until the busy timeout."""
    import psycopg

    with errors(url):
        psycopg.connect(url, autocommit=True, **connect_options(url)).close()
