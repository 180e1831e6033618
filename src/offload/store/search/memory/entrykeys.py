"""Every entry's filter and ranking columns in memory, kept fresh before each search.

A lexical search read, by primary key, the rows of the ~1,300 entries its best chunks map
to (the filter and the ranking columns), then the neighbours of its best hits in their
scope and kind with the same columns: on PostgreSQL at 1M entries ~1,300 random heap
pages a search, 28 + 19 ms warm and ~200 ms cold (docs/benchmarks/team-store.md, session
9); on SQLite at 100k a third of a search's CPU (docs/benchmarks/search.md). Those columns
are small: held here for every entry (:data:`FIELDS`), with each scope and kind's ids in
order, a search filters, ranks and finds neighbours by lookups (store/search/lexical.py,
store/search/neighbours.py, store/search/context.py), to the same answers the statements give.

Freshness, PostgreSQL: store/search/memory/pgchunks.py's transaction-id watermark, on ``entries``: a row
trigger (migration ``pg_entry_changes``) stamps every inserted or updated row with its
writing transaction (``entries.changed``, ``xid8``), whatever the write path (put, touch,
pin, expiry, annotate, check-out, import); each read returns
``pg_snapshot_xmin(pg_current_snapshot())`` of its own statement, and the next read takes
every row stamped at or above it. A row re-read is applied again (an update may follow a
read), so no id list is kept.

Freshness, SQLite: writers are serialised, so a counter is a watermark: triggers
(migration ``m_entry_changes``) bump ``entry_stamp`` on every insert and every update of
a held column and stamp the row with it (``entries.changed``); a read in one snapshot
returns the counter with the rows, and the next read takes the rows stamped above it.

Both: a deleted entry (forget, gc, a truncate) or one whose id changed bumps
``entry_generation``: the copy is dropped, that search and the ones until the background
rebuild is done take the SQL path. Rows stamped NULL (written before the migration) are
taken by the full read and can change afterwards only by an update (stamped) or a
deletion (the generation).

A search asks :meth:`HeldCopy.current <offload.store.search.memory.held.HeldCopy.current>` once, at its
start (after the chunk index's own read), and every step of it uses that one
:class:`EntryKeys` (immutable). An entry the copy does not know (written after that read)
is asked of the table by the caller.
"""

from __future__ import annotations

import bisect
import math
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from offload.errors import OffloadError
from offload.store.backend import Conn, Sql
from offload.store.models import Filters
from offload.store.search.memory.chunkrows import ReadSnapshot
from offload.store.search.memory.held import HeldCopy

# the columns held, in this order after the id (the filter's and the ranking's: what
# query.filter_sql and Candidate.of_entry read, and the event time store/search/neighbours.py
# reads)
FIELDS = (
    "scope",
    "kind",
    "salience",
    "accessed",
    "access_count",
    "expires",
    "status",
    "pinned",
    "source",
    "created",
    "event_time",
)
SCOPE, KIND, SALIENCE, ACCESSED, USES, EXPIRES, STATUS, PINNED, SOURCE, CREATED, EVENT_TIME = range(
    11
)
# rows a full read asks for per statement (a result is held whole by the client)
PAGE = 50_000
# entries changed since the base past this many are folded into a new base (each refresh
# copies the tail; a fold copies the whole dict, ~30 ms at 1M entries)
TAIL_ENTRIES = 4096

_HEAD = (
    "SELECT g.value AS generation, pg_snapshot_xmin(pg_current_snapshot())::text AS xmin, "
    "e.* FROM entry_generation g LEFT JOIN LATERAL ({rows}) e ON true WHERE g.id = 0"
)
_COLUMNS = "id, " + ", ".join(FIELDS)
_PAGE = Sql.postgres_only(
    _HEAD.format(rows=f"SELECT {_COLUMNS} FROM entries WHERE id > %s ORDER BY id LIMIT %s")
)
_SINCE = Sql.postgres_only(
    _HEAD.format(rows=f"SELECT {_COLUMNS} FROM entries WHERE changed >= %s::xid8 ORDER BY id")
)
# SQLite: the token, then the rows in the same snapshot (the row's shape of the above)
_SQLITE_TOKEN = Sql(
    "SELECT (SELECT value FROM entry_generation WHERE id = 0), "
    "(SELECT value FROM entry_stamp WHERE id = 0)"
)
_SQLITE_ALL = Sql.sqlite_only(f"SELECT NULL, NULL, {_COLUMNS} FROM entries ORDER BY id")
_SQLITE_SINCE = Sql.sqlite_only(
    f"SELECT NULL, NULL, {_COLUMNS} FROM entries WHERE changed > ? ORDER BY id"
)


Keys = tuple[Any, ...]  # one entry's FIELDS, in order
Group = tuple[str, str]  # (scope, kind)


class Unheld(OffloadError):
    """A row the copy cannot answer for exactly (a NaN, whose order SQL and Python differ on)."""


@dataclass(frozen=True, eq=False)
class EntryKeys:
    """Every entry's :data:`FIELDS` and each (scope, kind)'s ids ascending, as of
    ``token`` (generation, watermark). Immutable: a refresh makes a new one sharing
    ``base`` (``tail``: the entries changed since; ``tail_groups``: the groups they touched)."""

    base: dict[int, Keys]
    tail: dict[int, Keys]
    groups: dict[Group, list[int]]
    tail_groups: dict[Group, list[int]]
    token: tuple[int, int]

    def get(self, entry_id: int) -> Keys | None:
        """The entry's columns, or None: the copy does not hold it (written since)."""
        got = self.tail.get(entry_id)
        return self.base.get(entry_id) if got is None else got

    def neighbours(self, entry_id: int, keys: Keys, window: int) -> tuple[list[int], list[int]]:
        """Up to ``window`` ids of the entry's scope and kind before it (nearest first) and
        after it (nearest first)."""
        group = (keys[SCOPE], keys[KIND])
        ids = self.tail_groups.get(group)
        if ids is None:
            ids = self.groups.get(group, [])
        at = bisect.bisect_left(ids, entry_id)
        end = at + 1 if at < len(ids) and ids[at] == entry_id else at
        return ids[max(0, at - window) : at][::-1], ids[end : end + window]


@dataclass(frozen=True, eq=False)
class Gate:
    """A search's filter over one :class:`EntryKeys`: ``keep`` is the filter's test
    (:func:`keeper`), ``keys`` what the search reads the columns from."""

    keys: EntryKeys
    keep: Callable[[Keys], bool]

    def rows(self, entry_ids: Iterable[int]) -> tuple[dict[int, dict[str, Any] | None], list[int]]:
        """Each held entry's row (:func:`row_of`), None where the filter drops it, and the
        ids the copy does not hold (asked of the table by the caller)."""
        out: dict[int, dict[str, Any] | None] = {}
        unknown: list[int] = []
        get, keep = self.keys.get, self.keep
        for eid in entry_ids:
            k = get(eid)
            if k is None:
                unknown.append(eid)
            else:
                out[eid] = row_of(eid, k) if keep(k) else None
        return out, unknown


def row_of(entry_id: int, keys: Keys) -> dict[str, Any]:
    """A row of the columns every ranking step reads (``Candidate.of_entry``'s)."""
    return {
        "cid": None,
        "eid": entry_id,
        "scope": keys[SCOPE],
        "kind": keys[KIND],
        "salience": keys[SALIENCE],
        "accessed": keys[ACCESSED],
        "uses": keys[USES],
    }


def keeper(f: Filters, now: float) -> Callable[[Keys], bool]:
    """``query.filter_sql(f, now)`` as a test of held columns (the same conditions, in
    the same comparisons: floats against floats, text by code points as "C" collates)."""
    kinds = frozenset(f.kinds)
    pinned = None if f.pinned is None else (1 if f.pinned else 0)

    def keep(k: Keys) -> bool:
        expires = k[EXPIRES]
        if expires is not None and not expires > now:
            return False
        if f.scope is not None and k[SCOPE] != f.scope:
            return False
        if kinds and k[KIND] not in kinds:
            return False
        if f.status is not None and k[STATUS] != f.status:
            return False
        if pinned is not None and k[PINNED] != pinned:
            return False
        if f.min_salience is not None and not k[SALIENCE] >= f.min_salience:
            return False
        if f.source_prefix and not k[SOURCE].startswith(f.source_prefix):
            return False
        if f.created_after is not None and not k[CREATED] >= f.created_after:
            return False
        return f.created_before is None or k[CREATED] < f.created_before

    return keep


def _held(row: Any, strings: dict[str, str]) -> tuple[int, Keys]:
    """An entry's id and columns from a read row (``row[2]`` the id), repeated strings
    shared (a scope or kind is one object however many entries hold it)."""
    values = list(row[3:])
    for i in (SCOPE, KIND, STATUS, SOURCE):
        s = values[i]
        values[i] = strings.setdefault(s, s)
    for i in (SALIENCE, ACCESSED, EXPIRES, CREATED, EVENT_TIME):
        v = values[i]
        if v is not None and math.isnan(v):
            raise Unheld(f"entry {row[2]}: NaN in {FIELDS[i]}")
        values[i] = None if v is None else float(v)
    return int(row[2]), tuple(values)


def read_all(conn: Conn) -> EntryKeys:
    """Every entry's columns, with the generation and watermark of the same snapshot."""
    if isinstance(conn, sqlite3.Connection):
        with ReadSnapshot(conn):
            gen, stamp = conn.execute(_SQLITE_TOKEN).fetchone()
            rows = conn.execute(_SQLITE_ALL).fetchall()
        return _built([rows], (int(gen), int(stamp)))
    pages = []
    token = (-1, -1)
    after = 0
    while True:
        got = conn.execute(_PAGE, (after, PAGE)).fetchall()
        if token[0] < 0:  # the first statement's snapshot is the token's
            token = (int(got[0][0]), int(got[0][1]))
        pages.append(got)
        if len(got) < PAGE or got[-1][2] is None:
            return _built(pages, token)
        after = int(got[-1][2])


def _built(pages: Iterable[Iterable[Any]], token: tuple[int, int]) -> EntryKeys:
    """A copy of the rows read (``row[2]`` the id; None: no row), ids ascending."""
    strings: dict[str, str] = {}
    base: dict[int, Keys] = {}
    groups: dict[Group, list[int]] = {}
    for page in pages:
        for r in page:
            if r[2] is None:
                continue
            eid, keys = _held(r, strings)
            base[eid] = keys
            groups.setdefault((keys[SCOPE], keys[KIND]), []).append(eid)
    return EntryKeys(base, {}, groups, {}, token)


def read_since(conn: Conn, held: EntryKeys) -> EntryKeys | None:
    """``held`` with the rows stamped since its watermark applied, or None: an entry was
    deleted (or renumbered) since (the generation moved)."""
    if isinstance(conn, sqlite3.Connection):
        with ReadSnapshot(conn):
            gen, stamp = conn.execute(_SQLITE_TOKEN).fetchone()
            if int(gen) != held.token[0]:
                return None
            if int(stamp) == held.token[1]:
                return held
            got = conn.execute(_SQLITE_SINCE, (held.token[1],)).fetchall()
        return _applied(held, got, (int(gen), int(stamp)))
    got = conn.execute(*pg_since(held)).fetchall()
    generation, watermark = int(got[0][0]), int(got[0][1])
    if generation != held.token[0]:
        return None
    rows = [r for r in got if r[2] is not None]
    if not rows and watermark == held.token[1]:
        return held
    return _applied(held, rows, (generation, watermark))


def pg_since(held: EntryKeys) -> tuple[Sql, tuple[str]]:
    """PostgreSQL: the statement a refresh of ``held`` runs, with its parameters (a search
    runs it ahead with others: ``PgConn.read_ahead``)."""
    return _SINCE, (str(held.token[1]),)


def _applied(held: EntryKeys, rows: Iterable[Any], token: tuple[int, int]) -> EntryKeys:
    """``held`` with ``rows`` as its entries' current columns (a new or moved entry's id
    put in its group's order)."""
    strings: dict[str, str] = {}
    tail = dict(held.tail)
    touched: dict[Group, list[int]] = {}

    def group(g: Group) -> list[int]:
        have = touched.get(g)
        if have is None:
            have = touched[g] = list(held.tail_groups.get(g, held.groups.get(g, [])))
        return have

    for r in rows:
        eid, keys = _held(r, strings)
        old = held.get(eid)
        was = None if old is None else (old[SCOPE], old[KIND])
        now = (keys[SCOPE], keys[KIND])
        if was != now:
            if was is not None:
                ids = group(was)
                del ids[bisect.bisect_left(ids, eid)]
            ids = group(now)
            if not ids or ids[-1] < eid:
                ids.append(eid)
            else:
                bisect.insort(ids, eid)
        tail[eid] = keys
    tail_groups = {**held.tail_groups, **touched}
    if len(tail) > TAIL_ENTRIES:
        return EntryKeys({**held.base, **tail}, {}, {**held.groups, **tail_groups}, {}, token)
    return EntryKeys(held.base, tail, held.groups, tail_groups, token)


def resident(connect: Callable[[], Conn]) -> HeldCopy[EntryKeys]:
    """One store's copy, built in a thread of its own and refreshed before each search
    (store/search/memory/held.py)."""
    return HeldCopy(
        connect,
        name="keys",
        read_all=read_all,
        read_since=read_since,
        pg_next_read=pg_since,
        errors=(OffloadError, ValueError, sqlite3.Error),
    )
