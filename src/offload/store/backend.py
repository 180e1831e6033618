"""The connection seam: what the row-level functions need of a database connection.

Row-level operations are functions over a :class:`Conn` (write/rows.py, write/index.py,
life/tombstones.py, state.py); what the operation modules need of the whole store is
:class:`offload.store.handle.StoreHandle`. This module imports nothing of offload's, so
every other store module may import it.

:class:`Conn` is the part of a DB-API connection those functions use: ``sqlite3``'s
connection is one, :class:`offload.store.postgres.pgconn.PgConn` the other (it runs the
same statements on PostgreSQL, store/postgres/pgsql.py). A :data:`Row` reads by column name
and by position.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

# a result row: sqlite3.Row or pgconn.PgRow (both read by name and by position)
Row = Any


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

    def execute(self, sql: str, parameters: Any = (), /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Cursor: ...

    def commit(self) -> None: ...
