"""The store's PostgreSQL connections: a pool of them, and one :class:`PgConn` per thread
drawn from it (the store opens this for a ``postgresql://`` URL)."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from offload.core.urls import redact_url
from offload.errors import StoreError
from offload.store.postgres.pgconn import (
    PgConn,
    configure,
    connect_options,
    first_line,
    probe,
    row_factory,
)

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool


def open_pool(url: str, *, max_size: int, timeout_s: float) -> ConnectionPool[Any]:
    """A pool of autocommit connections to ``url`` (statements run in their own
    transaction unless the store begins one); fails with a clear StoreError."""
    try:
        import psycopg
        from psycopg_pool import ConnectionPool, PoolTimeout
    except ImportError as exc:  # an optional dependency: the extra installs it
        raise StoreError(
            f"a PostgreSQL store needs the psycopg driver, and {exc.name or 'it'} is not "
            "installed: pip install 'offload[postgres]'"
        ) from None

    # the pool logs a warning per failed attempt (with the server's text); offload reports
    # an unreachable store itself, once, as a StoreError
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    probe(url)
    pool: ConnectionPool[Any] = ConnectionPool(
        url,
        min_size=1,
        max_size=max_size,
        kwargs={"autocommit": True, "row_factory": row_factory, **connect_options(url)},
        configure=configure,
        timeout=timeout_s,
        open=False,
        name="offload",
    )
    try:
        pool.open(wait=True, timeout=timeout_s)
    except (PoolTimeout, psycopg.Error) as exc:
        pool.close()
        raise StoreError(f"cannot open store at {redact_url(url)}: {first_line(exc)}") from None
    return pool


class ThreadConns:
    """One :class:`PgConn` per thread, all from one pool."""

    def __init__(self, pool: ConnectionPool[Any], url: str, timeout_s: float) -> None:
        self.pool = pool
        self.url = url
        self.timeout_s = timeout_s
        self._local = threading.local()
        self._all: list[PgConn] = []
        self._lock = threading.Lock()

    def get(self) -> PgConn:
        """This thread's connection."""
        conn: PgConn | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = PgConn(self.pool, self.url, self.timeout_s)
            with self._lock:
                self._all.append(conn)
        return conn

    def close(self) -> None:
        """Hand every connection back and close the pool."""
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()
        self.pool.close()
