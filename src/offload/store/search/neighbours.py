"""A hit's neighbours: the entries just before and after it in its scope and kind.

Memories arrive in sequence, and the turn that answers a question often sits next to the
one that names it, so part of a strong hit's score flows to its neighbours
(:func:`with_neighbours`; on SQLite the neighbourhood is scored as one document instead,
store/search/context.py, unless no terms are given).

On SQLite the neighbours are read in three statements (before, after, and the entries
that matched nothing themselves, under the filter); each is in-process. On PostgreSQL
each was a round trip (~10-15 ms each at 1M entries under load), so there one statement
reads both sides of every source with each neighbour's ranking columns and whether the
filter keeps it; with the entries' columns in memory (store/search/memory/entrykeys.py) none.

The wider neighbourhood (:func:`with_stretches`, after the fusion, on both backends): a hit's
*stretch*, the entries of its scope and kind stored one after another with its event time
(a conversation's session, the notes of one meeting). A question's words are often spread
over a stretch: the turn that answers it says "he" or "it" where a turn a few lines earlier
named the dog, the trip, the band; the neighbourhood reaches two entries each side, the
stretch all of it, scored as one document: BM25 of the searched terms over the stretch's
text (the terms' idf of the index, the length normalised by the stretches read), divided
by the best such score among the hits, multiplies each hit's score by ``1 +
STRETCH_WEIGHT * that share``. A hit told in the stretch that holds most of the question's
words rises above an equal hit told elsewhere; hits without an event time are each a
stretch of one. A stretch is read once, around the best of its hits among the best
``STRETCH_SOURCES``, ``STRETCH_REACH`` entries each side at most, as far as the event time
stays the same (ids in order within the scope and kind, from the entries' columns in
memory when held): a bounded read whatever the store's size. When no hit shares its event time with a
neighbour, nothing changes. Measured on LoCoMo (docs/benchmarks/search.md, "A hit ranked
by its stretch"): the weight chosen on conversations 1-2, reported on 3-5. The factor
is a ratio of the stretches' own scores, so it applies alike whatever scale the hits'
scores have (FTS5's BM25 on SQLite, PostgreSQL's ranking); the terms' idf is the index's
(in-memory, FTS5's statistics, or PostgreSQL's counts the search already read).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from offload.store.backend import Conn, Row, Sql
from offload.store.search import context, selective
from offload.store.search.hybrid import Fused
from offload.store.search.memory import entrykeys
from offload.store.search.state import Candidate, SearchState

if TYPE_CHECKING:
    from offload.store.handle import StoreHandle as Store

_KEYS = (
    "e.id AS eid, e.scope AS scope, e.kind AS kind, e.salience AS salience, "
    "e.accessed AS accessed, e.access_count AS uses"
)
# SQLite: one side of every source (PostgreSQL: _BOTH)
_SIDE = (
    "SELECT e.id AS src, n.id AS nid FROM entries e JOIN entries n ON n.id IN "
    "(SELECT p.id FROM entries p WHERE p.scope = e.scope AND p.kind = e.kind AND p.id {op} e.id "
    "ORDER BY p.id {order} LIMIT ?) WHERE e.id IN (SELECT value FROM json_each(?))"
)
_KEPT = Sql(
    f"SELECT NULL AS cid, {_KEYS} FROM json_each(?) j CROSS JOIN entries e "
    "WHERE e.id = j.value AND {where}",
    f"SELECT NULL AS cid, {_KEYS} FROM offload_ids(%s) j CROSS JOIN entries e "
    "WHERE e.id = j.value AND {where}",
)
# PostgreSQL: both sides of every source, each neighbour's columns and the filter's verdict
_BOTH = Sql.postgres_only(
    f"SELECT s.id AS src, n.before AS before, {_KEYS}, ({{where}}) AS kept "
    "FROM entries s CROSS JOIN LATERAL ("
    "(SELECT p.id, true AS before FROM entries p WHERE p.scope = s.scope AND p.kind = s.kind "
    "AND p.id < s.id ORDER BY p.id DESC LIMIT %s) UNION ALL "
    "(SELECT p.id, false FROM entries p WHERE p.scope = s.scope AND p.kind = s.kind "
    "AND p.id > s.id ORDER BY p.id ASC LIMIT %s)) n "
    "JOIN entries e ON e.id = n.id WHERE s.id IN (SELECT value FROM offload_ids(%s))"
)


def with_neighbours(
    found: list[Candidate], state: SearchState, *, share: float, window: int, sources: int
) -> list[Candidate]:
    """Each of the best ``sources`` direct hits passes ``share`` of its score to the
    entries just before and after it in the same scope and kind, ``share ** d`` at
    distance d up to ``window``; neighbours that matched nothing join the candidates (only
    if the search's filter keeps them). The state's ``gate``: the filter and the
    entries' columns in memory (a source it does not hold sends the whole step to SQL)."""
    conn, where, params, gate = state.conn, state.where, state.params, state.gate

    scores = {c.entry_id: c.score for c in found[:sources]}
    held = None if gate is None else _sides_held(gate, scores, window)
    if held is not None:
        near, kept = held
    elif isinstance(conn, sqlite3.Connection):
        near, kept = _sides_sqlite(conn, scores, window), None
    else:
        near, kept = _sides_pg(conn, scores, where, params, window)
    extra: dict[int, float] = {}
    for src, nids in near.items():
        for d, nid in nids:
            extra[nid] = extra.get(nid, 0.0) + share**d * scores[src]
    if not extra:
        return found
    out = {c.entry_id: c for c in found}
    missing = [i for i in extra if i not in out]
    if missing and kept is None:
        kept = {
            int(r["eid"]): r
            for r in conn.execute(_KEPT.fill(where=where), (json.dumps(missing), *params))
        }
    for nid in missing:
        row = (kept or {}).get(nid)
        if row is not None:
            out[nid] = Candidate.of_entry(row, 0.0, direct=False)
    for nid, add in extra.items():
        have = out.get(nid)
        if have is not None:
            have.score += add
    return sorted(out.values(), key=lambda c: (-c.score, -c.entry_id))


def _sides_sqlite(
    conn: Conn, scores: dict[int, float], window: int
) -> dict[int, list[tuple[int, int]]]:
    """Each source's neighbours as (distance, id), nearest first on each side."""
    near: dict[int, list[tuple[int, int]]] = {}
    ids = json.dumps(list(scores))
    for op, order in (("<", "DESC"), (">", "ASC")):
        side: dict[int, list[int]] = {}
        for r in conn.execute(Sql.sqlite_only(_SIDE.format(op=op, order=order)), (window, ids)):
            side.setdefault(int(r["src"]), []).append(int(r["nid"]))
        for src, nids in side.items():
            # nearest first: ids descend before the source, ascend after it
            ordered = sorted(nids, reverse=op == "<")
            near.setdefault(src, []).extend(enumerate(ordered, 1))
    return near


def _sides_pg(
    conn: Conn, scores: dict[int, float], where: str, params: list[Any], window: int
) -> tuple[dict[int, list[tuple[int, int]]], dict[int, Row]]:
    """:func:`_sides_sqlite`'s answer in one statement, with every neighbour's row where
    the filter keeps it."""
    rows = conn.execute(
        _BOTH.fill(where=where), (*params, window, window, json.dumps(list(scores)))
    ).fetchall()
    sides: dict[tuple[int, bool], list[int]] = {}
    kept: dict[int, Row] = {}
    for r in rows:
        sides.setdefault((int(r["src"]), bool(r["before"])), []).append(int(r["eid"]))
        if r["kept"]:
            kept[int(r["eid"])] = r
    near: dict[int, list[tuple[int, int]]] = {}
    for (src, before), nids in sides.items():
        ordered = sorted(nids, reverse=before)
        near.setdefault(src, []).extend(enumerate(ordered, 1))
    return near, kept


def _sides_held(
    gate: entrykeys.Gate, scores: dict[int, float], window: int
) -> tuple[dict[int, list[tuple[int, int]]], dict[int, Row]] | None:
    """:func:`_sides_pg`'s answer from the columns in memory, or None when a source is
    not held (written since the copy was read)."""
    near: dict[int, list[tuple[int, int]]] = {}
    kept: dict[int, Row] = {}
    keys, keep = gate.keys, gate.keep
    for src in scores:
        own = keys.get(src)
        if own is None:
            return None
        before, after = keys.neighbours(src, own, window)
        if not before and not after:
            continue
        near[src] = [*enumerate(before, 1), *enumerate(after, 1)]
        for nid in (*before, *after):
            k = keys.get(nid)
            if k is not None and keep(k):
                kept[nid] = entrykeys.row_of(nid, k)
    return near, kept


# -- the stretch ---------------------------------------------------------------------------

# The most a stretch's share of the best stretch's score multiplies a hit's score by
# (1 + this): the best LoCoMo R@10 on conversations 1-2 of 0.2, 0.3, 0.5 and 1.0 tried
STRETCH_WEIGHT = 0.5
# How many of the best hits have their stretch read
STRETCH_SOURCES = 50
# How far a stretch is read each side of a hit, in entries of its scope and kind
STRETCH_REACH = 32
# a stretch: its scope, kind and event time; or, for an entry without one, the entry's id
Stretch = tuple[str, str, float | None, int | None]
_EVENT_TIMES = Sql(
    "SELECT e.id AS eid, e.event_time AS t FROM json_each(?) j CROSS JOIN entries e "
    "WHERE e.id = j.value",
    "SELECT e.id AS eid, e.event_time AS t FROM offload_ids(%s) j CROSS JOIN entries e "
    "WHERE e.id = j.value",
)

# PostgreSQL's SQL path: each source's sides up to a limit, nearest first, each neighbour's
# id and event time ('n': none) in one text a side: the sides and the times in one statement
_TIMED = (
    "(SELECT string_agg(q.id::text || ' ' || coalesce(q.event_time::text, 'n'), ',' "
    "ORDER BY q.id {order}) FROM (SELECT p.id, p.event_time FROM entries p WHERE p.scope = "
    "e.scope AND p.kind = e.kind AND p.id {op} e.id ORDER BY p.id {order} LIMIT %s) q)"
)
_TIMED_SIDES = Sql.postgres_only(
    f"SELECT e.id AS src, {_TIMED.format(op='<', order='DESC')} AS before, "
    f"{_TIMED.format(op='>', order='ASC')} AS after "
    "FROM offload_ids(%s) j CROSS JOIN entries e WHERE e.id = j.value"
)


def stretched(store: Store, terms: Sequence[str], fused: Fused, state: SearchState) -> Fused:
    """The fused order with :func:`with_stretches` applied to it (the same hits, counted
    alike)."""
    return Fused(with_stretches(store, terms, fused.ranked, state), fused.total, fused.every)


def with_stretches(
    store: Store, terms: Sequence[str], ranked: list[Candidate], state: SearchState
) -> list[Candidate]:
    """``ranked`` (best first) with each of its best hits' scores multiplied by its
    stretch's factor (the module docstring), best first again; unchanged when no hit
    shares its event time with a neighbour."""
    top = sorted(ranked, key=attrgetter("score"), reverse=True)[:STRETCH_SOURCES]
    if not top or not terms:
        return ranked
    when = _event_times(store, [c.entry_id for c in top], state)
    # a stretch is a distinct (scope, kind, time), read once, around its best hit; a hit
    # without an event time is a stretch of its own
    key: dict[int, Stretch] = {}
    leaders: dict[Stretch, int] = {}
    for c in top:
        t = when.get(c.entry_id)
        key[c.entry_id] = (c.scope, c.kind, t, None if t is not None else c.entry_id)
        if t is not None:
            leaders.setdefault(key[c.entry_id], c.entry_id)
    if not leaders:
        return ranked
    slots = _stretch_slots(store, list(leaders.values()), when, state)
    held = None if state.gate is None else state.gate.keys
    stretches = {k: _stretch(e, slots[e], when, held) for k, e in leaders.items()}
    if all(len(m) == 1 for m in stretches.values()):
        return ranked
    for c in top:
        stretches.setdefault(key[c.entry_id], [c.entry_id])
    scores = _stretch_scores(store, terms, list(stretches.values()), state)
    best = max(scores, default=0.0)
    if best <= 0.0:
        return ranked
    share = dict(zip(stretches, (s / best for s in scores), strict=True))
    for c in top:
        c.score *= 1.0 + STRETCH_WEIGHT * share[key[c.entry_id]]
    out = sorted(ranked, key=attrgetter("entry_id"), reverse=True)
    out.sort(key=attrgetter("score"), reverse=True)
    return out


def _stretch_slots(
    store: Store, ids: list[int], when: dict[int, float | None], state: SearchState
) -> dict[int, list[int | None]]:
    """Each of ``ids``' ``STRETCH_REACH`` neighbours a side (context.Runs.slots' slots),
    the SQL path's with their event times put in ``when``: on PostgreSQL read with the
    sides in one statement, on SQLite by id after them."""
    if state.gate is not None:
        return context.HeldRuns(state.gate.keys).slots(store.conn, ids, STRETCH_REACH)
    if state.on_sqlite:
        slots = context.Runs().slots(store.conn, ids, STRETCH_REACH)
        near = [n for s in slots.values() for n in s if n is not None and n not in when]
        when.update(_event_times(store, near, state))
        return slots
    pad: list[int | None] = [None] * STRETCH_REACH
    out = {e: pad + pad for e in ids}
    params = (STRETCH_REACH, STRETCH_REACH, json.dumps(ids))
    for r in store.conn.execute(_TIMED_SIDES, params):
        row: list[int | None] = []
        for side in (r["before"], r["after"]):
            got = [n.split(" ") for n in side.split(",")] if side else []
            for n, t in got:
                when.setdefault(int(n), None if t == "n" else float(t))
            row += [int(n) for n, _ in got] + pad[len(got) :]
        out[int(r["src"])] = row
    return out


def _event_times(store: Store, ids: Sequence[int], state: SearchState) -> dict[int, float | None]:
    """Each id's event time (None: none given): from the entries' columns in memory when
    held (the state's ``gate``), the others read by id."""
    out: dict[int, float | None] = {}
    rest = list(dict.fromkeys(ids))
    if state.gate is not None:
        keys, rest = state.gate.keys, []
        for e in dict.fromkeys(ids):
            k = keys.get(e)
            if k is None:
                rest.append(e)
            else:
                out[e] = k[entrykeys.EVENT_TIME]
    if rest:
        for r in store.conn.execute(_EVENT_TIMES, (json.dumps(rest),)):
            out[int(r["eid"])] = None if r["t"] is None else float(r["t"])
    return out


def _stretch(
    e: int,
    slots: list[int | None],
    when: dict[int, float | None],
    held: entrykeys.EntryKeys | None,
) -> list[int]:
    """``e`` and its neighbours (``slots``: before, nearest first, then after) up to the
    first on each side told at another time (its time from ``when``, else from the
    entries' columns ``held`` in memory, read only as far as the walk goes)."""
    t = when.get(e)
    out = [e]
    reach = len(slots) // 2
    for side in (slots[:reach], slots[reach:]):
        for n in side:
            if n is None:
                break
            if n not in when and held is not None:
                k = held.get(n)
                when[n] = None if k is None else k[entrykeys.EVENT_TIME]
            if when.get(n) != t:
                break
            out.append(n)
    return out


def _stretch_scores(
    store: Store, terms: Sequence[str], stretches: list[list[int]], state: SearchState
) -> list[float]:
    """BM25 of ``terms`` over each stretch's text as one document (each entry's first
    chunk, its counts as context.count_matrix reads them)."""
    distinct = list(dict.fromkeys(terms))
    entries = sorted({e for s in stretches for e in s})
    counts, lengths = context.count_matrix(store, {}, entries, distinct, state.view)
    idf = _term_idf(store, distinct, state)
    row = {e: i for i, e in enumerate(entries)}
    fields = []
    for members in stretches:
        at = [row[e] for e in sorted(members)]
        summed = counts[at].sum(axis=0).tolist()
        fields.append((dict(zip(distinct, summed, strict=True)), int(lengths[at].sum())))
    avg = sum(n for _, n in fields) / len(fields)
    return [context.bm25f(distinct, [(1.0, c, n)], idf, avg) for c, n in fields]


def _term_idf(store: Store, terms: list[str], state: SearchState) -> dict[str, float]:
    """Each distinct term's idf over the body index: the in-memory index's or FTS5's
    (context.term_weights); on PostgreSQL without the in-memory index, from the row
    counts the search read (the state's ``stats``: no statement for a term it has read)."""
    if state.view is not None or state.on_sqlite:
        return context.term_weights(store.conn, state.view, terms)[1]
    stats = state.stats or selective.SearchStats(store.conn)
    counts = stats.counts(terms)
    rows = stats.rows
    return {t: selective.idf(rows, counts[t]) for t in terms}
