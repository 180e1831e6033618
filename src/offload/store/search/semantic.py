"""The semantic side of a search: the nearest entries by embedding, found beside the lexical side.

:func:`start` encodes the query and hands the matrix scan (:func:`offload.store.write.vectors.nearest`:
numpy loops that release the GIL) to a worker thread, so on a second core it runs while the
caller's thread does the lexical side; :func:`finish` then applies the filter to what it
found and scores the lexical candidates too. The worker touches no connection: every SQL
statement runs on the caller's thread (a store's connection is not shared across threads).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from offload.store.backend import Conn, Sql
from offload.store.search import selective
from offload.store.search.memory import entrykeys
from offload.store.search.state import SearchState
from offload.store.write import vectors

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from offload.store.handle import StoreHandle as Store

# matrix scans running at once, across every store of the process (each ~1-4 ms at 100k
# rows; more threads than cores would only queue in the kernel instead of here)
_WORKERS = 2
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="offload-nearest")
        return _pool


def _forget_pool() -> None:
    # a forked child inherits the pool but not its threads: a scan submitted there would
    # wait forever, so the child starts a pool of its own
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


@dataclass(frozen=True)
class Nearest:
    """The semantic side of one query: the closest entries and the typical similarity."""

    scores: dict[int, float]  # entry id -> cosine similarity
    floor: float
    # the similarity of the last of the nearest when the list stopped at the number asked
    # for (entries further away may follow); None: it holds every entry the filter keeps
    deepest: float | None = None


@dataclass(frozen=True)
class Probe:
    """A query's semantic search under way: its vector, the matrix it scans, and the scan."""

    query: NDArray[np.float32]
    ids: Any
    rows: Any
    prefixes: Any
    sample: Any
    close: Future[tuple[list[tuple[int, float]], float]]


def answered_by_words(
    conn: Conn, lookup: bool, terms: Sequence[str], stats: selective.SearchStats, keep: int
) -> bool:
    """Whether a query's words answer it alone, so no matrix scan is started: a lookup (a
    query without function words: a name, an identifier, keywords) whose terms' rows,
    body and metadata, number at most ``keep`` (the page and what precedes it), so every
    entry its words find is on the page already. What the scan would add there are
    entries holding none of the words, and a reordering of a page the words fill alone;
    the answer is then lexical alone's. The rows are counted before any ranking (the same
    statistics the search reads next); where the metadata's cannot be counted (PostgreSQL
    without the in-memory index) the scan runs."""
    if not lookup or not terms:
        return False
    rows = sum(stats.counts(terms).values())
    if rows > keep:
        return False
    held = stats.meta_held(terms)
    if held is not None:
        return not held
    if not isinstance(conn, sqlite3.Connection):
        return False
    return rows + sum(selective.vocab_counts(conn, "search_meta", terms).values()) <= keep


def start(store: Store, text: str, k: int) -> Probe | None:
    """Encode ``text`` and start the scan for the ``4 * k`` nearest entries (unfiltered);
    None without a model, a vector stored, or a query the model has a word of."""
    encoder, matrix = store.embedder, store.vector_matrix
    if encoder is None or matrix is None:
        return None
    query = encoder.encode([text])[0]
    if not query.any():
        return None
    ids, rows = matrix.refresh(store.conn)
    if ids is None or not len(ids):
        return None
    coarse = matrix.coarse and len(ids) > vectors.COARSE_ROWS
    prefixes = matrix.prefixes() if coarse else None
    sample = matrix.sample()
    scan = _executor().submit(
        vectors.nearest, ids, rows, query, k * 4, prefixes=prefixes, sample=sample
    )
    return Probe(query, ids, rows, prefixes, sample, scan)


def finish(
    store: Store, probe: Probe, state: SearchState, lexical_ids: Sequence[int]
) -> Nearest | None:
    """The ``state.need`` nearest entries the search's filter keeps, plus the similarity
    of every lexical candidate, and how near the last of them is when there may be more;
    None when the scan found nothing. With the state's
    ``gate`` (the entries' columns in memory, store/search/memory/entrykeys.py) the
    filter is tested there; only the entries it does not hold are asked of the table."""
    where, params, gate, k = state.where, state.params, state.gate, state.need
    close, floor = probe.close.result()
    if not close:
        return None
    conn, matrix = store.conn, store.vector_matrix
    live, kept = _kept(conn, [eid for eid, _ in close], where, params, gate)
    if matrix is not None:
        matrix.note_stale(1.0 - len(live) / len(close))
    if len(kept) < k and len(kept) < len(live):
        # a selective filter (a small scope in a big store): search only what it keeps
        allowed = _filter_ids(conn, where, params)
        close, _ = vectors.nearest(
            probe.ids, probe.rows, probe.query, k, allowed, probe.prefixes, probe.sample
        )
        kept = {eid for eid, _ in close}
    nearest = [(eid, s) for eid, s in close if eid in kept][:k]
    scores = dict(nearest)
    deepest = nearest[-1][1] if len(nearest) == k else None
    if matrix is not None:
        scores.update(matrix.similarity(probe.query, lexical_ids))
    return Nearest(scores, floor, deepest)


# the ids still stored of these, and whether the filter keeps each
_KEPT = Sql(
    "SELECT e.id, ({where}) FROM entries e WHERE e.id IN (SELECT value FROM json_each(?))",
    "SELECT e.id, ({where}) FROM entries e WHERE e.id IN (SELECT value FROM offload_ids(%s))",
)


def _filter_ids(conn: Conn, where: str, params: list[Any]) -> Any:
    """The ids of the entries the filter keeps; on SQLite as one joined string, split by
    numpy (a row per id costs ~10x more in Python at 14,000 entries)."""
    import numpy as np

    sql = f"SELECT e.id FROM entries e WHERE {where}"
    if not isinstance(conn, sqlite3.Connection):
        return np.array([int(r[0]) for r in conn.execute(Sql(sql), params)], dtype=np.int64)
    text = conn.execute(Sql.sqlite_only(f"SELECT group_concat(id) FROM ({sql})"), params)
    text = text.fetchone()[0]
    return np.array(text.split(",") if text else [], dtype=np.int64)


def _kept(
    conn: Conn, ids: list[int], where: str, params: list[Any], gate: entrykeys.Gate | None = None
) -> tuple[set[int], set[int]]:
    """(the ids still stored, those the filter keeps)."""
    if gate is not None:
        held, ask = gate.rows(ids)
        live, kept = set(held), {eid for eid, row in held.items() if row is not None}
        if ask:
            more_live, more_kept = _kept(conn, ask, where, params)
            live |= more_live
            kept |= more_kept
        return live, kept
    rows = conn.execute(
        _KEPT.fill(where=where),
        (*params, json.dumps(ids)),
    ).fetchall()
    return {int(r[0]) for r in rows}, {int(r[0]) for r in rows if r[1]}
