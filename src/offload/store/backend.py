"""The storage seam: what the store's operation modules need, as protocols.

``Store`` (store.py) is the only module that composes the others. The operation modules
(lifecycle, search, hybrid, vectors, maintenance, archive, health) take a
:class:`StoreHandle` instead of importing ``Store`` (which imports them): no import cycle,
and no module reaches into another's private names. Row-level operations are functions
over a :class:`Conn` (store/rows.py, index.py, tombstones.py, state.py).

:class:`Conn` is the part of a DB-API connection those functions use: ``sqlite3``'s
connection is one, :class:`offload.store.pgconn.PgConn` the other (it runs the same
statements on PostgreSQL, store/pgsql.py). A :data:`Row` reads by column name and by
position.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from offload.config import StoreSettings
    from offload.store.models import Entry, Filters
    from offload.store.resident import ResidentIndex
    from offload.store.vectors import Encoder, VectorMatrix


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


class StoreHandle(Protocol):
    """What the operation modules use of the store that composes them."""

    settings: StoreSettings
    clock: Callable[[], float]
    semantic_weight: float
    resident: ResidentIndex | None

    @property
    def path(self) -> Path: ...

    @property
    def conn(self) -> Conn:
        """This thread's connection."""
        ...

    @property
    def embedder(self) -> Encoder | None: ...

    @property
    def vector_matrix(self) -> VectorMatrix | None: ...

    def resolve(self, ref: str, scope: str | None = None) -> Entry: ...

    def body(self, entry: Entry, *, original: bool = False, touch: bool = False) -> str: ...

    def block_text(self, digest: str) -> str: ...

    def block_texts(self, digests: Iterable[str]) -> dict[str, str]: ...

    def has_block(self, digest: str) -> bool: ...

    def count(self, filters: Filters = ...) -> int: ...

    def reset_stale_hot(self) -> int: ...

    def disk_bytes(self) -> int:
        """What the store occupies on disk (file and log, or the database)."""
        ...
