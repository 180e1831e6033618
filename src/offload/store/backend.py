"""The connection seam: what the row-level functions need of a database connection.

Row-level operations are functions over a :class:`Conn` (write/rows.py, write/index.py,
life/tombstones.py, state.py); what the operation modules need of the whole store is
:class:`offload.store.handle.StoreHandle`. This module imports nothing of offload's, so
every other store module may import it.

:class:`Conn` is the part of a DB-API connection those functions use: ``sqlite3``'s
connection is one, :class:`offload.store.postgres.pgconn.PgConn` the other (it runs the
statements' PostgreSQL forms, see :class:`Sql`). A :data:`Row` reads by column name and by
position.

Every statement the store runs on a :class:`Conn` is a :class:`Sql`: its SQLite form and its
PostgreSQL form, both written where the statement is. Most statements read the same on both
and are written once (``Sql("SELECT ... WHERE id = ?")``): the PostgreSQL form is the same
text with psycopg's parameter marker (``%s``; a literal ``%`` doubled). One that differs
names both (``Sql("INSERT OR IGNORE INTO ...", "INSERT INTO ... ON CONFLICT DO NOTHING")``).
Nothing rewrites SQL text at run time; tests/store/test_statements.py checks, without a
server, that every statement has both forms, that each SQLite form prepares on a fresh
store and that each PostgreSQL form parses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

# a result row: sqlite3.Row or pgconn.PgRow (both read by name and by position)
Row = Any
# how a statement's parameters become the PostgreSQL form's (e.g. terms into a tsvector)
ParamMap = Callable[[Sequence[Any]], Sequence[Any]]


def pg_markers(sqlite: str) -> str:
    """A statement that reads the same on both backends, as psycopg takes it: ``?`` is
    ``%s`` and a literal ``%`` is ``%%`` (the one difference of such a statement)."""
    return sqlite.replace("%", "%%").replace("?", "%s")


class Sql(str):
    """One statement in both dialects. Its value (it is a ``str``) is SQLite's form, so a
    ``sqlite3`` connection runs it as it is; :attr:`postgres` is PostgreSQL's (psycopg's
    ``%s`` markers), by default the same text (:func:`pg_markers`).

    ``params`` maps the parameters for the PostgreSQL form where they differ (an FTS5
    MATCH string becomes a ``tsquery``), ``returns_id`` says the PostgreSQL form ends in
    ``RETURNING id`` (what SQLite's ``lastrowid`` reports), ``noop`` that it has nothing to
    do there (an FTS5 or SQLite maintenance command: its PostgreSQL form is a constant
    ``SELECT``, and ``executemany`` sends nothing)."""

    # class defaults: a statement written once sets no attribute (built per call, cheaply)
    _postgres: str | None = None
    _markers: str | None = None  # the PostgreSQL form of one written once, made when asked
    params: ParamMap | None = None
    returns_id: bool = False
    noop: bool = False
    sqlite_runs: bool = True
    postgres_runs: bool = True

    def __new__(
        cls,
        sqlite: str,
        postgres: str | None = None,
        *,
        params: ParamMap | None = None,
        returns_id: bool = False,
        noop: bool = False,
    ) -> Sql:
        self = super().__new__(cls, sqlite)
        if postgres is not None:
            self._postgres = postgres
            self.params = params
            self.returns_id = returns_id
            self.noop = noop
        return self

    @classmethod
    def postgres_only(
        cls, postgres: str, *, params: ParamMap | None = None, returns_id: bool = False
    ) -> Sql:
        """A statement only a PostgreSQL store runs (bulk loads, its own watermarks): its
        text is PostgreSQL's, and SQLite never sees it."""
        out = cls(postgres, postgres, params=params, returns_id=returns_id)
        out.sqlite_runs = False
        return out

    @classmethod
    def sqlite_only(cls, sqlite: str) -> Sql:
        """A statement only a SQLite store runs (FTS5's own tables, its temp tables, a
        path PostgreSQL answers with a statement of its own): a PostgreSQL connection
        refuses it."""
        out = cls(sqlite)
        out.postgres_runs = False
        return out

    def fill(self, **fragments: str) -> Sql:
        """This statement with its ``{name}`` fields filled in by ``fragments``: pieces
        of SQL that read the same on both backends (a filter; SQLite's ``?`` markers),
        given to the PostgreSQL form with psycopg's (:func:`pg_markers`)."""
        sqlite = self.sqlite.format(**fragments)
        if self._postgres is None:
            out = Sql(sqlite)
        else:
            pg = {k: pg_markers(v) for k, v in fragments.items()}
            out = Sql(
                sqlite,
                self._postgres.format(**pg),
                params=self.params,
                returns_id=self.returns_id,
                noop=self.noop,
            )
        if not self.sqlite_runs:
            out.sqlite_runs = False
        if not self.postgres_runs:
            out.postgres_runs = False
        return out

    @property
    def written_once(self) -> bool:
        """Whether the statement reads the same on both backends (its PostgreSQL form is
        the SQLite text with psycopg's markers)."""
        return self._postgres is None

    @property
    def postgres(self) -> str:
        """The PostgreSQL form."""
        if self._postgres is not None:
            return self._postgres
        if self._markers is None:
            self._markers = pg_markers(self)
        return self._markers

    @property
    def sqlite(self) -> str:
        """The SQLite form (the string itself)."""
        return str.__str__(self)


class Cursor(Protocol):
    """The result of one statement."""

    @property
    def lastrowid(self) -> int | None: ...

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Conn(Protocol):
    """A connection the row-level functions run their statements on."""

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: Sql, parameters: Any = (), /) -> Cursor: ...

    def executemany(self, sql: Sql, parameters: Iterable[Sequence[Any]], /) -> Cursor: ...

    def commit(self) -> None: ...
