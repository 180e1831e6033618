"""offload's store as a library: put text in, find it again, read it back, forget it.

    from offload.store import open_store

    with open_store("memory.db") as store:
        ref = store.put("Caroline said, I went to a support group", scope="chat-1").entry.ref
        for hit in store.search("Where did Caroline go?", scope="chat-1", limit=5):
            print(hit.entry.ref, hit.match_line, hit.snippet)
        text = store.read(ref)
        store.forget(ref)

See docs/store.md for the whole API. Everything else under ``offload.store`` is internal.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from offload.store.models import Entry, Filters, Hit, PutResult
from offload.store.postgres.pgconn import is_postgres
from offload.store.store import Store

if TYPE_CHECKING:
    from offload.config import Settings

__all__ = ["Entry", "Filters", "Hit", "PutResult", "Store", "open_store"]


def open_store(
    path: str | Path | None = None, *, settings: Settings | None = None, **kwargs: Any
) -> Store:
    """Open (creating and migrating if needed) a store: the SQLite file at ``path`` (or the
    PostgreSQL server a ``postgresql://`` URL names), or the one ``settings`` name (its
    store settings apply either way). Close it when done, or use it as a context manager."""
    if path is None and settings is None:
        raise TypeError("open_store needs a path or settings")
    where: Path | str | None = path if is_postgres(str(path)) else path and Path(path)
    # a library caller's store is long-lived: it keeps its search index in memory
    from offload.config import SearchSettings

    search = settings.search if settings is not None else SearchSettings()
    kwargs.setdefault("resident_mb", search.resident_mb)
    if settings is None:
        return Store(where, **kwargs)  # type: ignore[arg-type]
    if where is None:
        return Store.open(settings, **kwargs)
    return Store(where, settings.store, **kwargs)
