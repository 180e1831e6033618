"""Recording the SQL a store runs: SQLite's trace callback, PostgreSQL's execute wrapped."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from offload.store.backend import Sql
from offload.store.store import Store


@contextmanager
def recorded_statements(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The statements the store's connection runs inside the block."""
    ran: list[str] = []
    conn = store.conn
    if isinstance(conn, sqlite3.Connection):
        conn.set_trace_callback(ran.append)
        try:
            yield ran
        finally:
            conn.set_trace_callback(None)
        return
    from offload.store.postgres import pgconn

    real = pgconn.PgConn.execute

    def counted(self: pgconn.PgConn, sql: Sql, parameters: object = ()) -> pgconn.PgCursor:
        ran.append(sql)
        return real(self, sql, parameters)

    with monkeypatch.context() as m:
        m.setattr(pgconn.PgConn, "execute", counted)
        yield ran
