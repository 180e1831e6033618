"""Which entries each chunk belongs to, held in memory and kept fresh before each search.

A lexical search maps its ~650 best-scored chunks to entries (store/search/lexical.py
``_Mapping``): through ``entry_chunks`` (store/write/chunkmap.py) that is one statement of a
few milliseconds at 100k entries; from a dict it is a lookup per chunk. The filter on the
entries (scope, kind, dates, tombstones) still runs in SQL on the mapped ids.

Freshness, SQLite: ``entry_chunks`` changes only by
the triggers of store/write/chunkmap.py and doctor's refill. A new entry's rows carry its id,
above every id read before (rowids only grow, barring a deletion); a new chunk's rows its
id, likewise. So the rows added since a read of maxima ``(E, C)`` are those with
``entry_id > E`` or ``chunk_id > C``, as long as nothing else happened; everything else
bumps ``entry_map_generation`` (triggers, migration ``m_entry_map_generation``): a row of
the map deleted or rewritten, an entry or chunk deleted (its id could be reused), an
entry's block or a chunk's block rewritten, an entry or chunk inserted below the largest
id, and doctor's refill (:func:`offload.store.write.chunkmap.rebuild`). A bumped generation
drops the map; the next search maps through SQL and a rebuild starts in the background.

Freshness, PostgreSQL: ids commit out of order, so the watermark is store/search/memory/pgchunks.py's
transaction id, on the map's rows (``entry_chunks.changed``, migration
``pg_entry_map_changes``): a read takes every chunk with a row written at or above the last
read's ``pg_snapshot_xmin``, all of its rows (re-applying a chunk's rows is idempotent).
Deleting, updating or truncating the map's rows bumps the same generation (statement
triggers). The token's largest entry id is -1 there: an entry the map holds no first chunk
for may be one committed late, so it is asked of the table (:meth:`EntryMap.first_chunks`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from offload.errors import OffloadError
from offload.store.backend import Conn, Sql
from offload.store.search.memory.chunkrows import ReadSnapshot
from offload.store.search.memory.held import HeldCopy

# the map's tail (chunks whose entries changed since the base) is folded into a new base
# past this many chunks: each refresh copies the tail, a fold the whole map
TAIL_CHUNKS = 4096

_GENERATION = Sql("SELECT value FROM entry_map_generation WHERE id = 0")
# each a bare max(): SQLite answers it from the rowid b-tree's last row (wrapped in an
# expression it may scan the table)
_MAXIMA = (Sql("SELECT max(id) FROM entries"), Sql("SELECT max(id) FROM chunks"))
_ALL = Sql("SELECT chunk_id, entry_id, own FROM entry_chunks ORDER BY chunk_id, entry_id")
_SINCE = Sql(
    "SELECT chunk_id, entry_id, own FROM entry_chunks WHERE entry_id > ? UNION "
    "SELECT chunk_id, entry_id, own FROM entry_chunks WHERE chunk_id > ?"
)
# the chunks of the rows read since: every entry of each (a new entry of an old chunk)
# PostgreSQL: the generation and the watermark of this statement's snapshot, with the
# rows asked for (LEFT JOIN: one row even when there are none)
_PG_HEAD = (
    "SELECT g.value AS generation, pg_snapshot_xmin(pg_current_snapshot())::text AS xmin, "
    "m.chunk_id, m.entry_id, m.own FROM entry_map_generation g LEFT JOIN LATERAL ({rows}) m "
    "ON true WHERE g.id = 0"
)
_PG_PAGE = Sql.postgres_only(
    _PG_HEAD.format(
        rows="SELECT chunk_id, entry_id, own FROM entry_chunks "
        "WHERE (entry_id, chunk_id) > (%s, %s) ORDER BY entry_id, chunk_id LIMIT %s"
    )
)
_PG_SINCE = Sql.postgres_only(
    _PG_HEAD.format(
        rows="SELECT chunk_id, entry_id, own FROM entry_chunks WHERE chunk_id IN "
        "(SELECT chunk_id FROM entry_chunks WHERE changed >= %s::xid8) "
        "ORDER BY chunk_id, entry_id"
    )
)
# rows a full read asks for per statement (a result is held whole by the client)
PG_PAGE = 50_000
_OF_CHUNKS = Sql(
    "SELECT m.chunk_id, m.entry_id, m.own FROM json_each(?) j CROSS JOIN entry_chunks m "
    "WHERE m.chunk_id = j.value ORDER BY m.chunk_id, m.entry_id",
    (
        "SELECT m.chunk_id, m.entry_id, m.own FROM offload_ids(%s) j CROSS JOIN "
        "entry_chunks m WHERE m.chunk_id = j.value ORDER BY m.chunk_id, m.entry_id"
    ),
)


Entries = dict[int, tuple[int, ...]]
# entry id -> the first (smallest) chunk id of its own body
Firsts = dict[int, int]
Row3 = tuple[int, int, int]  # (chunk id, entry id, own)


@dataclass(frozen=True, eq=False)
class EntryMap:
    """Chunk id -> its entries' ids (ascending), and entry id -> its own body's first
    chunk, as of ``token`` (generation, largest entry id, largest chunk id). Immutable:
    a refresh makes a new one (``tail``: what changed since ``base``)."""

    base: Entries
    tail: Entries
    firsts: Firsts
    firsts_tail: Firsts
    token: tuple[int, int, int]

    def entries(self, chunk_id: int) -> tuple[int, ...] | None:
        """The chunk's entries, or None: the map does not know the chunk (written since)."""
        got = self.tail.get(chunk_id)
        return self.base.get(chunk_id) if got is None else got

    def first_chunks(self, entry_ids: Iterable[int]) -> tuple[Firsts, list[int]]:
        """Each entry's own first chunk, and the entries the map cannot answer for
        (written since it was read). An entry it knows without one has no own chunk."""
        found: Firsts = {}
        unknown = []
        top = self.token[1]
        for eid in entry_ids:
            got = self.firsts_tail.get(eid)
            if got is None:
                got = self.firsts.get(eid)
            if got is not None:
                found[eid] = got
            elif eid > top:
                unknown.append(eid)
        return found, unknown


def _grouped(rows: Iterable[Row3]) -> Entries:
    out: dict[int, list[int]] = {}
    for cid, eid, _own in rows:
        out.setdefault(int(cid), []).append(int(eid))
    return {cid: tuple(eids) for cid, eids in out.items()}


def _firsts(rows: Iterable[Row3], held: Firsts, into: Firsts) -> Firsts:
    """``into`` with each entry's smallest own chunk of ``rows`` (and of ``held``): rows
    are only ever added between bumps, so the smallest of the union is the first."""
    for cid, eid, own in rows:
        if own:
            have = into.get(eid)
            if have is None:
                have = held.get(eid)
            if have is None or cid < have:
                into[eid] = cid
    return into


def _maxima(conn: sqlite3.Connection) -> tuple[int, int]:
    e, c = (conn.execute(sql).fetchone()[0] for sql in _MAXIMA)
    return int(e or 0), int(c or 0)


def read_all(conn: sqlite3.Connection) -> EntryMap:
    """The whole map and its token, in one read snapshot."""
    with ReadSnapshot(conn):
        gen = int(conn.execute(_GENERATION).fetchone()[0])
        top_e, top_c = _maxima(conn)
        rows = [(int(c), int(e), int(o)) for c, e, o in conn.execute(_ALL).fetchall()]
    return EntryMap(_grouped(rows), {}, _firsts(rows, {}, {}), {}, (gen, top_e, top_c))


def read_since(conn: sqlite3.Connection, held: EntryMap) -> EntryMap | None:
    """``held`` with the rows added since, or None: the generation moved (rebuild)."""
    with ReadSnapshot(conn):
        gen = int(conn.execute(_GENERATION).fetchone()[0])
        if gen != held.token[0]:
            return None
        top_e, top_c = _maxima(conn)
        if (top_e, top_c) == held.token[1:]:
            return held
        since = conn.execute(_SINCE, held.token[1:]).fetchall()
        changed = sorted({int(r[0]) for r in since})
        got = conn.execute(_OF_CHUNKS, (json.dumps(changed),)).fetchall() if changed else []
    rows = [(int(c), int(e), int(o)) for c, e, o in got]
    return _with_tail(held, rows, (gen, top_e, top_c))


def read_all_pg(conn: Conn) -> EntryMap:
    """PostgreSQL: the whole map, in pages of rows by primary key, with the first page's
    token (a row committed between pages is read again by the next refresh)."""
    rows: list[Row3] = []
    token: tuple[int, int, int] | None = None
    after = (-1, -1)
    while True:
        got = conn.execute(_PG_PAGE, (*after, PG_PAGE)).fetchall()
        if token is None:  # the first statement's snapshot is the token's
            token = (int(got[0][0]), -1, int(got[0][1]))
        page = [(int(r[2]), int(r[3]), int(r[4])) for r in got if r[2] is not None]
        rows += page
        if len(page) < PG_PAGE:
            # by entry, then chunk: each chunk's entries ascend, as the SQLite read's do
            return EntryMap(_grouped(rows), {}, _firsts(rows, {}, {}), {}, token)
        after = (page[-1][1], page[-1][0])


def read_since_pg(conn: Conn, held: EntryMap) -> EntryMap | None:
    """PostgreSQL: ``held`` with every chunk written to since its watermark read again
    whole, or None: the generation moved (rebuild)."""
    got = conn.execute(*pg_since(held)).fetchall()
    gen, xmin = int(got[0][0]), int(got[0][1])
    if gen != held.token[0]:
        return None
    rows = [(int(r[2]), int(r[3]), int(r[4])) for r in got if r[2] is not None]
    if not rows and xmin == held.token[2]:
        return held
    return _with_tail(held, rows, (gen, -1, xmin))


def pg_since(held: EntryMap) -> tuple[Sql, tuple[str]]:
    """PostgreSQL: the statement a refresh of ``held`` runs, with its parameters (a search
    runs it ahead with others: ``PgConn.read_ahead``)."""
    return _PG_SINCE, (str(held.token[2]),)


def _with_tail(held: EntryMap, rows: list[Row3], token: tuple[int, int, int]) -> EntryMap:
    """``held`` with ``rows`` as their chunks' whole rows (folded into a new base past
    :data:`TAIL_CHUNKS`)."""
    tail = {**held.tail, **_grouped(rows)}
    firsts_tail = _firsts(rows, held.firsts, dict(held.firsts_tail))
    if len(tail) + len(firsts_tail) > TAIL_CHUNKS:
        base, firsts = {**held.base, **tail}, {**held.firsts, **firsts_tail}
        return EntryMap(base, {}, firsts, {}, token)
    return EntryMap(held.base, tail, held.firsts, firsts_tail, token)


def resident(connect: Callable[[], Conn]) -> HeldCopy[EntryMap]:
    """One store's map, built in a thread of its own and refreshed before each search
    (store/search/memory/held.py)."""
    return HeldCopy(
        connect,
        name="map",
        read_all=_read_all,
        read_since=_read_since,
        pg_next_read=pg_since,
        errors=(sqlite3.Error, OffloadError),
    )


def _read_all(conn: Conn) -> EntryMap:
    return read_all(conn) if isinstance(conn, sqlite3.Connection) else read_all_pg(conn)


def _read_since(conn: Conn, held: EntryMap) -> EntryMap | None:
    if isinstance(conn, sqlite3.Connection):
        return read_since(conn, held)
    return read_since_pg(conn, held)
