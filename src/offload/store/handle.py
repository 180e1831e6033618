"""The storage seam: what the store's operation modules need of the store, as a protocol.

``Store`` (store.py) is the only module that composes the others. The operation modules
(lifecycle, search, hybrid, maintenance, archive, health) take a :class:`StoreHandle`
instead of importing ``Store`` (which imports them): no import cycle, and no module reaches
into another's private names. What a row-level function needs of a connection is
:class:`offload.store.backend.Conn`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from offload.config import StoreSettings
    from offload.store.backend import Conn
    from offload.store.models import Entry, Filters
    from offload.store.search.memory.resident import ResidentIndex
    from offload.store.write.vectors import Encoder, VectorMatrix


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
