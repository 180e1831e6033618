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
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from offload.store.backend import Conn, Row, Sql
from offload.store.search.memory import entrykeys
from offload.store.search.state import Candidate, SearchState

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
