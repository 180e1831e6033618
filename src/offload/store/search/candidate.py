"""One entry a search may show, as every ranking step passes it on (store/search/pipeline.py)."""

from __future__ import annotations

from dataclasses import dataclass

from offload.store.backend import Row


@dataclass(slots=True)
class Candidate:
    """One entry that may be shown: its score (higher is better) and best chunk.

    ``chunk_id`` is None for an entry found by its metadata only, or brought in by a
    neighbour or a semantic retriever (its first chunk is shown then).
    """

    entry_id: int
    score: float
    chunk_id: int | None
    scope: str
    kind: str
    salience: float
    accessed: float
    uses: int
    direct: bool = True  # matched the query itself (not only through a neighbour)
    # the entry's next best matching chunks, best first (a lookup's case check reads them)
    others: tuple[int, ...] = ()

    @classmethod
    def of_entry(
        cls, r: Row, score: float = 0.0, *, chunk_id: int | None = None, direct: bool = True
    ) -> Candidate:
        """A candidate from a row of the entry columns every ranking step selects
        (``eid``, ``scope``, ``kind``, ``salience``, ``accessed``, ``uses``)."""
        # positional: ~1,100 candidates a search at 100k, keywords cost ~40 % more
        return cls(
            int(r["eid"]),
            score,
            chunk_id,
            r["scope"],
            r["kind"],
            float(r["salience"]),
            float(r["accessed"]),
            int(r["uses"]),
            direct,
        )
