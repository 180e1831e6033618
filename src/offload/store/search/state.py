"""One search's context, built once by the pipeline and passed down, the choice of the
path that scores its hits, and the candidates every ranking step passes on.

:class:`SearchState` holds what every step of a search reads: the connection, the filter
as a ``where`` clause on ``entries e`` and its parameters, the time, the times the query
names, the index's statistics,
the in-memory copies (the run-time switches) and the page being asked for.
:func:`scoring_path` is the one place that decides which code scores the candidates, and
says why; :mod:`offload.store.search.explain` reports it for each hit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from offload.core.text.timeexpr import Span
from offload.store.backend import Conn, Row
from offload.store.search import narrow, selective
from offload.store.search.memory import entrykeys, entrymap, postings

# The lexical paths (which code computes each candidate's BM25)
LEXICAL = "lexical"  # FTS5's bm25() over the rare terms' rows (store/search/lexical.py)
POSTINGS = "postings"  # the in-memory replica of the index (store/search/memory/postings.py)
NARROW = "narrow"  # FTS5 inside a narrow filter's own rows (store/search/narrow.py)
PGSQL = "pgsql"  # PostgreSQL's ranking statements (store/postgres/pgsql.py)
# The neighbourhood steps (store/search/ranking.py)
CONTEXT = "context"  # BM25F over a hit and its neighbours as one document (context.py)
NEIGHBOURS = "neighbours"  # a share of each hit's score to its neighbours (neighbours.py)


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


@dataclass(frozen=True, slots=True)
class ScoringPath:
    """Which code scores a search's candidates, and why."""

    lexical: str  # LEXICAL, POSTINGS, NARROW or PGSQL
    neighbourhood: str  # CONTEXT or NEIGHBOURS
    why: str


@dataclass(slots=True)
class Fusion:
    """The semantic side of one search: its share and each entry's similarity."""

    weight: float
    floor: float
    similarity: dict[int, float]
    lexical_unit: dict[int, float]  # the lexical score mapped to [0, 1], as fused
    semantic_unit: dict[int, float]  # the similarity mapped to [0, 1], as fused


@dataclass(slots=True)
class Trace:
    """The scores a search's steps recorded, by entry id (filled only when explaining)."""

    path: ScoringPath | None = None
    body: dict[int, float] = field(default_factory=dict)
    meta: dict[int, float] = field(default_factory=dict)
    lexical: dict[int, float] = field(default_factory=dict)
    lexical_rank: dict[int, int] = field(default_factory=dict)
    neighbourhood: dict[int, float] = field(default_factory=dict)  # the score after it
    time: dict[int, float] = field(default_factory=dict)  # the time preference's factor
    phrase: dict[int, float] = field(default_factory=dict)  # the score after the boost
    use: dict[int, float] = field(default_factory=dict)  # the score after salience x use
    ranked: dict[int, float] = field(default_factory=dict)  # the lexical side's last score
    fusion: Fusion | None = None

    def lexical_step(
        self, body: Mapping[int, float], meta: Mapping[int, float], found: Iterable[Candidate]
    ) -> None:
        """The lexical candidates: each side's BM25, their sum and its rank (1 = best)."""
        self.body, self.meta = dict(body), dict(meta)
        self.lexical, self.lexical_rank = {}, {}
        for i, c in enumerate(found, 1):
            self.lexical[c.entry_id] = c.score
            self.lexical_rank[c.entry_id] = i

    @staticmethod
    def scores(found: Iterable[Candidate]) -> dict[int, float]:
        """Each candidate's score now."""
        return {c.entry_id: c.score for c in found}


@dataclass(frozen=True, slots=True)
class SearchState:
    """What every step of one search reads (see the module docstring).

    ``where`` is a condition on ``entries e`` with ``params``; once a narrow filter was
    read (``narrowed``) it is the entries that filter kept. ``view``, ``entry_map`` and
    ``gate`` are the in-memory copies (None: read through SQL); ``stats`` the index's
    counts this search reads, each once. ``need`` is how many candidates each side brings,
    ``keep`` how many of the final order the page and what precedes it take."""

    conn: Conn
    where: str
    params: list[Any]
    now: float
    need: int
    keep: int | None = None
    narrowed: narrow.Narrow | None = None
    view: postings.View | None = None
    stats: selective.SearchStats | None = None
    entry_map: entrymap.EntryMap | None = None
    gate: entrykeys.Gate | None = None
    # set only when the caller asked why each hit ranks where it does (explain.py)
    trace: Trace | None = None
    # the stretches of time the query names (core/text/timeexpr.py): entries whose event time
    # is near one rank higher (ranking.py)
    times: tuple[Span, ...] = ()
    # the query asks when (or how long): hits that say when rank higher (ranking.py)
    asks_time: bool = False

    @property
    def on_sqlite(self) -> bool:
        """Whether the store is SQLite's (FTS5's BM25) rather than PostgreSQL's."""
        return isinstance(self.conn, sqlite3.Connection)


def scoring_path(state: SearchState, terms: list[str] | tuple[str, ...]) -> ScoringPath:
    """The path that scores a search for ``terms``: the three run-time switches (a narrow
    filter, the in-memory index, the backend) and the terms decide it, here only."""
    sqlite = state.on_sqlite
    neighbourhood = CONTEXT if terms and sqlite else NEIGHBOURS
    near = (
        "neighbourhood scored as one document (BM25F)"
        if neighbourhood == CONTEXT
        else "neighbours take a share of each hit's score"
        + ("" if sqlite else " (PostgreSQL's rank is not FTS5's BM25)")
    )
    if state.narrowed is not None:
        return ScoringPath(
            NARROW,
            neighbourhood,
            f"a narrow filter ({state.narrowed.entries} entries): only its rows are "
            f"scored, by the database; {near}",
        )
    if state.view is not None and len(terms) <= postings.MAX_TERMS:
        return ScoringPath(
            POSTINGS, neighbourhood, f"the in-memory index scores the body's rows; {near}"
        )
    if not sqlite:
        return ScoringPath(PGSQL, neighbourhood, f"PostgreSQL's ranking statements; {near}")
    why = (
        "no in-memory index, or a term it does not hold as FTS5 reads it"
        if state.view is None
        else f"more than {postings.MAX_TERMS} terms for the in-memory index"
    )
    return ScoringPath(LEXICAL, neighbourhood, f"FTS5's bm25(), {why}; {near}")
