"""An entry scored with its neighbourhood as one document: BM25F with neighbour fields.

Memories arrive in sequence, and the entry that answers a question often sits next to the
one that names its subject. Adding a share of each neighbour's BM25 score to an entry
counts a query term twice when the entry and its neighbour both hold it, and it scores the
entry's own words and its neighbours' words against separate length norms. BM25F
(Robertson, Zaragoza and Taylor 2004) scores an entry once, over fields: its own text
(weight 1) and each neighbour at distance ``d`` in the same scope and kind (weight
``NEIGHBOUR_SHARE ** d``, the share the neighbourhood already used). Each field's term
frequency is normalised by that field's length (the "simple BM25F" of Zaragoza et al.
2004), weighted, and summed before BM25's saturation: a term held by the entry and its
neighbour saturates, and a turn gets credit for the query words its neighbours add.

Everything comes from the store itself: FTS5's ``k1``/``b`` (1.2 / 0.75), its idf and its
average row length (``store/search/selective.py``). The text scored is each entry's best chunk (a
direct match) or its first chunk: its term counts were cached when it was written
(``chunks.term_counts``, ``index.term_counts``); a chunk stored before that cache is
re-analysed exactly as it was indexed (``core.text.analysis.index_terms``), to the same counts.

The context score replaces only the body's own BM25: a direct match keeps what its
metadata added (``found`` holds body plus metadata), and entries that match nothing
themselves join with their context score alone, marked as not direct.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from offload.core.text import analysis
from offload.store.backend import Conn, Row, Sql
from offload.store.search import selective
from offload.store.search.memory import entrykeys
from offload.store.search.state import Candidate, SearchState
from offload.store.write import index, packed_counts

if TYPE_CHECKING:
    from offload.store.handle import StoreHandle as Store
    from offload.store.search.memory.postings import View

# FTS5's bm25() constants (fts5_aux.c): the context score is on the same scale as the
# direct BM25 it replaces
K1 = 1.2
B = 0.75

# Each id's neighbours on one side (a row per id, the ids joined), up to a limit (the
# first parameter) from the id's nearest: a seek of entries_sequence each
_SIDE = (
    "SELECT e.id AS src, (SELECT group_concat(id) FROM (SELECT p.id FROM entries p "
    "WHERE p.scope = e.scope AND p.kind = e.kind AND p.id {op} e.id ORDER BY p.id {order} "
    "LIMIT ?1)) AS ids FROM json_each(?2) j CROSS JOIN entries e WHERE e.id = j.value"
)
_PG_SIDE = (
    "SELECT e.id AS src, (SELECT string_agg(q.id::text, ',') FROM (SELECT p.id FROM entries p "
    "WHERE p.scope = e.scope AND p.kind = e.kind AND p.id {op} e.id ORDER BY p.id {order} "
    "LIMIT %s) q) AS ids FROM offload_ids(%s) j CROSS JOIN entries e WHERE e.id = j.value"
)
NEIGHBOURS_BEFORE = Sql(_SIDE.format(op="<", order="DESC"), _PG_SIDE.format(op="<", order="DESC"))
NEIGHBOURS_AFTER = Sql(_SIDE.format(op=">", order="ASC"), _PG_SIDE.format(op=">", order="ASC"))
_KEYS = (
    "e.id AS eid, e.scope AS scope, e.kind AS kind, e.salience AS salience, "
    "e.accessed AS accessed, e.access_count AS uses"
)
_CHUNKS = (
    "SELECT c.id AS cid, c.start AS start, c.end AS end, lower(hex(b.hash)) AS block, "
    "{counts} AS counts FROM json_each(?) j CROSS JOIN chunks c "
    "JOIN blocks b ON b.id = c.block_id WHERE c.id = j.value"
)
_FIRST_CHUNKS = (
    "SELECT e.id AS eid, c.start AS start, c.end AS end, lower(hex(b.hash)) AS block, "
    "{counts} AS counts FROM json_each(?) j CROSS JOIN entries e "
    "JOIN blocks b ON b.hash = e.block_hash JOIN chunks c ON c.id = "
    "(SELECT min(c2.id) FROM chunks c2 WHERE c2.block_id = b.id) WHERE e.id = j.value"
)
# chunks by id, each entry's first chunk: SQLite keeps large cached counts compressed in a
# column of their own (store/write/packed_counts.py), PostgreSQL all as text
_SQLITE_COUNTS = "coalesce(c.term_counts, c.packed_counts)"
_CHUNK_COUNTS = Sql(
    _CHUNKS.format(counts=_SQLITE_COUNTS),
    'SELECT c.id AS cid, c.start AS start, c."end" AS "end", b.hash AS block, '
    "c.term_counts AS counts FROM offload_ids(%s) j CROSS JOIN chunks c "
    "JOIN blocks b ON b.id = c.block_id WHERE c.id = j.value",
)
_FIRST_CHUNK_COUNTS = Sql(
    _FIRST_CHUNKS.format(counts=_SQLITE_COUNTS),
    'SELECT e.id AS eid, c.start AS start, c."end" AS "end", b.hash AS block, '
    "c.term_counts AS counts FROM offload_ids(%s) j CROSS JOIN entries e "
    "JOIN blocks b ON b.hash = e.block_hash JOIN chunks c ON c.id = "
    "(SELECT min(c2.id) FROM chunks c2 WHERE c2.block_id = b.id) WHERE e.id = j.value",
)
# the entries of these ids the filter keeps
_KEPT_ROWS = Sql(
    f"SELECT NULL AS cid, {_KEYS} FROM entries e "
    "WHERE e.id IN (SELECT value FROM json_each(?)) AND {where}",
    f"SELECT NULL AS cid, {_KEYS} FROM entries e "
    "WHERE e.id IN (SELECT value FROM offload_ids(%s)) AND {where}",
)
# Each entry's first chunk of its own body (the chunk map's integer keys)
_FIRST_OWN = Sql(
    "SELECT m.entry_id AS eid, min(m.chunk_id) AS cid FROM json_each(?) j "
    "CROSS JOIN entry_chunks m WHERE m.entry_id = j.value AND m.own = 1 GROUP BY m.entry_id",
    (
        "SELECT m.entry_id AS eid, min(m.chunk_id) AS cid FROM offload_ids(%s) j "
        "CROSS JOIN entry_chunks m WHERE m.entry_id = j.value AND m.own = 1 GROUP BY "
        "m.entry_id"
    ),
)
# A text's term counts and length (the sum of its counts)
Counts = tuple[dict[str, int], int]


def field_weights(share: float, window: int) -> list[float]:
    """The weight of a neighbour at distance 1..window: ``share ** d``."""
    return [share**d for d in range(1, window + 1)]


def bm25f(
    terms: Sequence[str],
    fields: Sequence[tuple[float, Mapping[str, int], int]],
    idf: dict[str, float],
    avg_length: float,
) -> float:
    """BM25F of one neighbourhood: ``fields`` are (weight, term counts, length).

    Each field's frequency is normalised by its own length against ``avg_length`` (a
    neighbour is a row of the same index), weighted, and summed before the saturation;
    one field alone scores exactly as FTS5's bm25() scores that row."""
    score = 0.0
    for t in dict.fromkeys(terms):
        tf = 0.0
        for w, counts, length in fields:
            n = counts.get(t, 0)
            if n:
                norm = 1.0 - B + B * length / avg_length if avg_length > 0 else 1.0
                tf += w * n / norm
        if tf > 0:
            score += idf.get(t, 0.0) * tf * (K1 + 1.0) / (tf + K1)
    return score


def neighbourhood_scores(
    counts: Any,
    lengths: Any,
    own: Any,
    sides: Any,
    weights: Sequence[float],
    idf: Sequence[float],
    avg_length: float,
) -> tuple[Any, Any]:
    """(:func:`bm25f` of each neighbourhood, :func:`bm25f` of its own field alone), all at
    once: ``counts`` holds a row per text (a column per distinct query term, in the
    query's order; ``idf`` the terms' idf in that order) and ``lengths`` its length;
    neighbourhood ``i`` is row ``own[i]`` (weight 1) and rows ``sides[i, k]`` (weight
    ``weights[k]``; a missing neighbour is a row of zeros).

    The same floats as bm25f: each field's share by the same operations, added in field
    order, then each term's part in term order (a field or a term adding nothing adds
    0.0, which changes no sum)."""
    norm = (1.0 - B) + (B * lengths) / avg_length if avg_length > 0 else np.ones(len(lengths))
    f = counts.astype(np.float64)
    alone = (1.0 * f[own]) / norm[own][:, None]
    tf = alone
    for k, w in enumerate(weights):
        at = sides[:, k]
        tf = tf + (w * f[at]) / norm[at][:, None]
    return _saturated(tf, idf), _saturated(alone, idf)


def _saturated(tf: Any, idf: Sequence[float]) -> Any:
    """Each row's sum over the columns, in order, of BM25's saturated part of ``tf``."""
    score = np.zeros(len(tf))
    for col, value in enumerate(idf):
        t = tf[:, col]
        score = score + ((value * t) * (K1 + 1.0)) / (t + K1)
    return score


# One side's links: id -> the nearest id on that side in its scope and kind (None: none);
# an id missing has not been read
Links = dict[int, int | None]


class Runs:
    """What has been read of the entries' order within each scope and kind, as links to
    each id's nearest neighbour on either side. An id's neighbours follow from what was
    read for another id of the same run, so only the ends of the known runs are read:
    asking for a hit's neighbours' neighbours after the hit's costs a statement row per
    run end and side, none when the hit's were read far enough (``reach``).

    Valid while the store is unchanged (as two statements of one search are taken to be)."""

    def __init__(self) -> None:
        self.before: Links = {}
        self.after: Links = {}

    def slots(
        self, conn: Conn, ids: list[int], window: int, reach: int = 0
    ) -> dict[int, list[int | None]]:
        """Each id's neighbours in the same scope and kind: ``2 * window`` slots, before
        (the nearest first) then after (the nearest first); a missing one is None. What
        is not known yet is read up to ``max(window, reach)`` ids beyond each id."""
        limit = max(window, reach)
        sides = (
            (NEIGHBOURS_BEFORE, self.before, self.after, True),
            (NEIGHBOURS_AFTER, self.after, self.before, False),
        )
        for sql, links, back, down in sides:
            ends = {end for i in ids if (end := _run_end(links, i, window)) is not None}
            if not ends:
                continue
            read: set[int] = set()
            for r in conn.execute(sql, (limit, json.dumps(sorted(ends)))):
                side = [int(i) for i in r["ids"].split(",")] if r["ids"] else []
                # nearest first (group_concat keeps no order): ids descend before, ascend after
                _link(links, back, int(r["src"]), sorted(side, reverse=down), limit)
                read.add(int(r["src"]))
            for gone in ends - read:  # not stored: nothing on either side
                links[gone] = None
        return {i: [*_walk(self.before, i, window), *_walk(self.after, i, window)] for i in ids}


def neighbour_ids(conn: Conn, ids: list[int], window: int) -> dict[int, list[int | None]]:
    """Each id's neighbours in the same scope and kind (:meth:`Runs.slots`)."""
    return Runs().slots(conn, ids, window)


class HeldRuns(Runs):
    """:class:`Runs` answered from the entries' columns in memory (store/search/memory/entrykeys.py):
    each scope and kind's ids in order, no statement; an id the copy does not hold
    (written since it was read) is read as :class:`Runs` reads it."""

    def __init__(self, keys: entrykeys.EntryKeys) -> None:
        super().__init__()
        self.keys = keys

    def slots(
        self, conn: Conn, ids: list[int], window: int, reach: int = 0
    ) -> dict[int, list[int | None]]:
        """:meth:`Runs.slots`' answer."""
        out: dict[int, list[int | None]] = {}
        unheld = []
        pad: list[int | None] = [None] * window
        for i in ids:
            own = self.keys.get(i)
            if own is None:
                unheld.append(i)
                continue
            before, after = self.keys.neighbours(i, own, window)
            out[i] = [*before, *pad[len(before) :], *after, *pad[len(after) :]]
        if unheld:
            out.update(super().slots(conn, unheld, window, reach))
        return out


def _link(links: Links, back: Links, src: int, side: Sequence[int | None], window: int) -> None:
    """Record a side read for ``src`` (nearest first, up to ``window``; None or a short
    list: the run ends there) in ``links``, and the same steps taken the other way in
    ``back`` (the other side's links)."""
    at = src
    for n in side:
        if n is None:
            links[at] = None
            return
        links[at] = n
        back[n] = at
        at = n
    if len(side) < window:
        links[at] = None


def _run_end(links: Links, i: int, window: int) -> int | None:
    """The id whose link must be read to walk ``window`` steps from ``i`` (None: known)."""
    at: int | None = i
    for _ in range(window):
        if at not in links:
            return at
        at = links[at]
        if at is None:
            return None
    return None


def _walk(links: Links, i: int, window: int) -> list[int | None]:
    """``window`` slots walked from ``i`` along ``links`` (None past the run's end)."""
    out: list[int | None] = []
    at: int | None = i
    for _ in range(window):
        at = None if at is None else links.get(at)
        out.append(at)
    return out


def query_counts(cached: str, keys: Mapping[str, str]) -> Counts | None:
    """The counts of the query's terms and the length, read from a cached object that leads
    with its length (index.term_counts) without parsing the rest: ``keys`` maps each term
    to its JSON key followed by ``:`` (json.dumps, as the writer encoded it). None for an
    object without the length (written before it) or holding an escape (parsed whole).

    Exact: with no backslash in the text every ``"`` delimits a string, so a key's match
    preceded by an even number of quotes opens a key (every string of the object is a key);
    a term whose key needs an escape cannot occur in such a text."""
    if not cached.startswith(index.LENGTH_FIRST) or "\\" in cached:
        return None
    start = len(index.LENGTH_FIRST)
    end = cached.find(",", start)
    length = int(cached[start : end if end >= 0 else len(cached) - 1])
    counts: dict[str, int] = {}
    for term, key in keys.items():
        at = cached.find(key, start)
        while at >= 0 and cached.count('"', 0, at) % 2:
            at = cached.find(key, at + 1)
        if at >= 0:
            value = at + len(key)
            stop = cached.find(",", value)
            counts[term] = int(cached[value : stop if stop >= 0 else len(cached) - 1])
    return counts, length


def term_keys(terms: Sequence[str]) -> dict[str, str]:
    """Each term's JSON key and colon, as index.term_counts writes it."""
    return {t: json.dumps(t, ensure_ascii=False) + ":" for t in dict.fromkeys(terms)}


def _counted(store: Store, r: Row, keys: Mapping[str, str]) -> Counts:
    """A chunk row's term counts (of the query's terms, when the cache leads with its
    length; else every term's) and length: cached at write time (index.term_counts), or,
    for a chunk stored before the cache, its text analysed exactly as it was indexed."""
    raw = store.conn if isinstance(store.conn, sqlite3.Connection) else None
    cached = packed_counts.unpack_stored(r["counts"], raw)
    if cached is not None and cached[:1].isdigit():  # compact text (packed_counts.compact)
        if "\\" not in cached:  # no term escaped: each is written as it is
            return packed_counts.compact_counts(cached, keys)
        cached = packed_counts.expand(cached)
    if cached is not None:
        quick = query_counts(cached, keys)
        if quick is not None:
            return quick
        counts: dict[str, int] = json.loads(cached)
        length = counts.pop(index.LENGTH_KEY, None)
        return counts, sum(counts.values()) if length is None else int(length)
    text = store.block_text(r["block"])[int(r["start"]) : int(r["end"])]
    counts = Counter(analysis.index_terms(text))
    return counts, sum(counts.values())


def term_counts(
    store: Store,
    chunk_of: dict[int, int],
    first_of: list[int],
    terms: Sequence[str],
) -> dict[int, Counts]:
    """Entry id -> the term counts and length of the text scored: its best chunk (``chunk_of``),
    or its first chunk (``first_of``), read from the chunks' rows. Only ``terms``' counts
    are sure to be there (BM25F reads no others), the length always."""
    conn = store.conn
    chunks_sql, first_sql = _CHUNK_COUNTS, _FIRST_CHUNK_COUNTS
    keys = term_keys(terms)
    out: dict[int, Counts] = {}
    by_chunk = {cid: eid for eid, cid in chunk_of.items()}
    if by_chunk:
        for r in conn.execute(chunks_sql, (json.dumps(list(by_chunk)),)):
            out[by_chunk[int(r["cid"])]] = _counted(store, r, keys)
    rest = [e for e in first_of if e not in out]
    if rest:
        for r in conn.execute(first_sql, (json.dumps(rest),)):
            out[int(r["eid"])] = _counted(store, r, keys)
    return out


def count_matrix(
    store: Store,
    chunk_of: dict[int, int],
    entries: Sequence[int],
    terms: Sequence[str],
    view: View | None = None,
) -> tuple[Any, Any]:
    """:func:`term_counts` as arrays: each of ``entries``' counts of ``terms`` (distinct; a
    column each) and length, a row each in their order, then one row of zeros (an entry
    without a text has zeros too). With ``view`` the counts are read from memory; a chunk
    it does not hold (written since) is read as without it."""
    counts = np.zeros((len(entries) + 1, len(terms)), dtype=np.int64)
    lengths = np.zeros(len(entries) + 1, dtype=np.int64)
    first_of = [e for e in entries if e not in chunk_of]
    if view is None:
        read = term_counts(store, chunk_of, first_of, terms)
    else:
        chunks = dict(chunk_of)
        chunks.update(_first_chunks(store, first_of))
        rows = [i for i, e in enumerate(entries) if e in chunks]
        held, got, got_lengths = view.count_matrix([chunks[entries[i]] for i in rows], terms)
        at = np.asarray(rows, dtype=np.int64)[held]
        counts[at], lengths[at] = got[held], got_lengths[held]
        left = {
            entries[i]: chunks[entries[i]]
            for i, h in zip(rows, held.tolist(), strict=True)
            if not h
        }
        read = term_counts(store, left, [], terms) if left else {}
    column = {t: j for j, t in enumerate(terms)}
    row = {e: i for i, e in enumerate(entries)} if read else {}
    for e, (held_counts, length) in read.items():
        i = row[e]
        lengths[i] = length
        for t, n in held_counts.items():
            j = column.get(t)
            if j is not None:
                counts[i, j] = n
    return counts, lengths


def _first_chunks(store: Store, entries: list[int]) -> dict[int, int]:
    """Each entry's own first chunk: from the map held in memory (store/search/memory/entrymap.py), if
    held; the entries written since it was read through the table."""
    found: dict[int, int] = {}
    held = None if store.resident is None else store.resident.entry_map.latest()
    if entries and held is not None:
        found, entries = held.first_chunks(entries)
    if entries:
        for r in store.conn.execute(_FIRST_OWN, (json.dumps(entries),)):
            found[int(r["eid"])] = int(r["cid"])
    return found


def term_weights(
    conn: Conn, view: View | None, terms: Sequence[str]
) -> tuple[selective.Totals, dict[str, float]]:
    """The body index's totals and each distinct term's idf: from the in-memory index
    (exact counts, no statement) when there is one, else from FTS5's statistics."""
    distinct = list(dict.fromkeys(terms))
    if view is not None:
        totals = view.totals()
        df = view.df(distinct)
    else:
        stats = selective.stats_for(conn, "search_body")
        totals = stats.totals(conn)
        df = stats.df(conn, distinct)
    return totals, {t: selective.idf(totals.rows, n) for t, n in df.items()}


def _add_neighbours(
    conn: Conn, state: SearchState, new: list[int], by_id: dict[int, Candidate]
) -> None:
    """Candidates for the neighbours ``new`` that the filter keeps, into ``by_id`` (not
    direct matches): the held entries' rows from memory, the others by id."""
    if new and state.gate is not None:
        held, new = state.gate.rows(new)
        for e, r in held.items():
            if r is not None:
                by_id[e] = Candidate.of_entry(r, direct=False)
    if new:
        rows = conn.execute(
            _KEPT_ROWS.fill(where=state.where),
            (json.dumps(new), *state.params),
        ).fetchall()
        for r in rows:
            by_id[int(r["eid"])] = Candidate.of_entry(r, direct=False)


def with_context(
    store: Store,
    terms: Sequence[str],
    found: list[Candidate],
    state: SearchState,
    *,
    share: float,
    window: int,
    sources: int,
) -> list[Candidate]:
    """``found`` (direct matches, best first) rescored by :func:`bm25f` over each of the
    best ``sources`` and its neighbours, with the neighbours that match nothing themselves
    added (when the filter keeps them); best first. The candidates of ``found`` are
    rescored in place. With the state's ``gate`` the neighbours and their rows come from
    the entries' columns in memory (store/search/memory/entrykeys.py); with its ``view``
    the terms' counts from the in-memory index."""

    conn, view, gate = store.conn, state.view, state.gate
    top = found[:sources]
    if not top or not terms:
        return found
    totals, idf = term_weights(conn, view, terms)
    weights = field_weights(share, window)
    runs = Runs() if gate is None else HeldRuns(gate.keys)
    # read far enough for the neighbours' own neighbours too (asked for below)
    slots = runs.slots(conn, [c.entry_id for c in top], window, reach=2 * window)
    by_id = {c.entry_id: c for c in found}
    members = {n for s in slots.values() for n in s if n is not None} | set(slots)
    _add_neighbours(conn, state, [n for n in members if n not in by_id], by_id)
    scored = [e for e in members if e in by_id]
    # a scored entry's own neighbours are needed too: those of the added ones
    more = [e for e in scored if e not in slots]
    if more:
        slots.update(runs.slots(conn, more, window))
    every = {n for e in scored for n in slots[e] if n is not None} | set(scored)
    chunk_of = {e: c.chunk_id for e, c in by_id.items() if e in every and c.chunk_id is not None}
    distinct = list(dict.fromkeys(terms))
    texts = list(every)
    row = {e: i for i, e in enumerate(texts)}
    counts, lengths = count_matrix(store, chunk_of, texts, distinct, view)
    none = len(texts)  # the row of zeros: no neighbour there
    own = np.fromiter((row[e] for e in scored), dtype=np.int64, count=len(scored))
    sides = np.array(
        [none if n is None else row[n] for e in scored for n in slots[e]], dtype=np.int64
    ).reshape(len(scored), 2 * window)
    ctx, alone = neighbourhood_scores(
        counts,
        lengths,
        own,
        sides,
        [weights[k % window] for k in range(2 * window)],
        [idf.get(t, 0.0) for t in distinct],
        totals.avg_length,
    )
    for e, x, o in zip(scored, ctx.tolist(), alone.tolist(), strict=True):
        c = by_id[e]
        # the body's own BM25 gives way to the neighbourhood's; metadata's share stays
        # (rescored in place: the caller's list is ranked anew, as rank() does after)
        c.score = max(0.0, c.score - (o if c.direct else 0.0)) + x
    # best first, ties newer first: two stable C-keyed sorts, the order of one sort by
    # (-score, -entry_id) without a key tuple per candidate
    ranked = sorted(by_id.values(), key=attrgetter("entry_id"), reverse=True)
    ranked.sort(key=attrgetter("score"), reverse=True)
    return [c for c in ranked if c.direct or c.score > 0.0]
