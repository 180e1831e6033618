"""The storage seam: what the store's operation modules need, as protocols.

``Store`` (store.py) is the only module that composes the others. The operation modules
(lifecycle, search, hybrid, vectors, maintenance, archive, health) take a
:class:`StoreHandle` instead of importing ``Store`` (which imports them): no import cycle,
and no module reaches into another's private names. Row-level operations are functions
over a connection (store/rows.py, index.py, tombstones.py, state.py).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from offload.config import StoreSettings
    from offload.store.models import Entry, Filters
    from offload.store.vectors import Encoder, VectorMatrix


class StoreHandle(Protocol):
    """What the operation modules use of the store that composes them."""

    settings: StoreSettings
    clock: Callable[[], float]
    semantic_weight: float

    @property
    def path(self) -> Path: ...

    @property
    def conn(self) -> sqlite3.Connection:
        """This thread's connection."""
        ...

    @property
    def embedder(self) -> Encoder | None: ...

    @property
    def vector_matrix(self) -> VectorMatrix | None: ...

    def resolve(self, ref: str, scope: str | None = None) -> Entry: ...

    def body(self, entry: Entry, *, original: bool = False, touch: bool = False) -> str: ...

    def block_text(self, digest: str) -> str: ...

    def has_block(self, digest: str) -> bool: ...

    def count(self, filters: Filters = ...) -> int: ...

    def reset_stale_hot(self) -> int: ...
