"""A cheap health check of an open store (for ``offload status``; ``doctor`` is the deep one)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from offload.store.backend import Sql

if TYPE_CHECKING:
    from offload.store.handle import StoreHandle as Store


def quick_check(store: Store) -> str:
    """SQLite's ``PRAGMA quick_check``: ``"ok"``, or the first problem it reports."""
    row = store.conn.execute(Sql("PRAGMA quick_check", "SELECT 'ok'", noop=True)).fetchone()
    return str(row[0]) if row else "no answer"
