"""BM25 over any of a query's terms, with its work bounded by their selectivity.

FTS5's ``bm25()`` costs tens of times more per matching row than finding the row (it reads
the row's length and every phrase's positions), so an OR query holding a common word (a
speaker's name in a third of the rows) spent nearly all its time scoring rows that end up
nowhere near the top. Here the terms are split by document frequency, measured from the
index itself (``fts5vocab``; common words cached per database file): only rows matching one
of the rare terms are scored, in two disjoint queries, ``(rare) AND (common)`` and
``(rare) NOT (common)``, so every phrase is in each expression once and FTS5 gives each row
exactly the score the plain OR query would. A row matching only common terms scores at most
the sum of their upper bounds (``idf * (k1 + 1)``): when the candidates' cut-off is above
that bound the top is exactly the plain query's; when it is not, the next rarest term joins
the rare ones and the pass repeats (at worst: every term, the plain query).

SQL is built by small functions here and run by the caller's connection; nothing here
writes to the store (the vocabulary table is a per-connection ``temp`` table). On
PostgreSQL the same plan is read from the store's own statistics (row count and each term's
row count, store/postgres/pgsql.py) and bounded by what ``ts_rank`` can give a row
(:func:`offload.store.postgres.pgsql.ts_rank_bound`), since that is the score there.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from offload.store.backend import Conn, Sql
from offload.store.postgres import pgsql

# FTS5's bm25() constant k1 (fts5_aux.c): a term's share of a row's score is below idf * (k1 + 1)
K1 = 1.2
# Rows the first pass may score: the rarest terms whose matches add up to this join it
# (at least one term). ~2 ms of bm25() on an idle core; the rest of the terms are bounded.
POSTINGS_BUDGET = 3000
# PostgreSQL: when the rows of the rarest term alone pass the budget and this share of
# the commonest term's, every term is scored at once (the partitions would save little).
WHOLE_SHARE = 0.5
# Cached document frequencies hold while the row count stays within this share.
_DRIFT = 0.02
_CACHED_DF = 64


def idf(rows: int, df: int) -> float:
    """FTS5's idf: log((N - n + 0.5) / (n + 0.5)), at least 1e-6. The row count and a
    term's count may come from statements that saw different commits, so ``df`` can pass
    ``rows`` under concurrent writes: the floor holds then too."""
    ratio = (rows - df + 0.5) / (df + 0.5) if rows else 0.0
    value = math.log(ratio) if ratio > 0 else 0.0
    return value if value > 0 else 1e-6


def upper_bound(rows: int, dfs: Sequence[int]) -> float:
    """The most a row matching only terms of these document frequencies can score."""
    return sum(idf(rows, df) * (K1 + 1.0) for df in dfs)


def ts_rank_upper_bound(rows: int, dfs: Sequence[int]) -> float:
    """:func:`upper_bound` for PostgreSQL's ranking (an estimated row count may lag
    behind a term's own count: the larger one counts, as in pgsql.top)."""
    return pgsql.ts_rank_bound([idf(max(rows, df), df) for df in dfs])


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    """SQLite's varint (big-endian, 7 bits a byte, the 9th byte whole)."""
    value = 0
    for _ in range(8):
        c = buf[i]
        i += 1
        value = (value << 7) | (c & 0x7F)
        if not c & 0x80:
            return value, i
    return (value << 8) | buf[i], i + 1


def totals_sql(table: str) -> Sql:
    """The table's statistics record: FTS5 keeps the row count and the tokens per column
    in ``%_data`` row 1 (the "averages" record bm25() itself reads)."""
    return Sql.sqlite_only(f"SELECT block FROM {table}_data WHERE id = 1")


def vocab_sql(table: str) -> tuple[Sql, Sql]:
    """(create, lookup): a per-connection fts5vocab table of ``table`` and a df lookup. On
    PostgreSQL there is nothing to create (the vocabulary is the table's tsvector column)
    and the lookup is a bounded count of the same table's rows (pgsql.vocab_row)."""
    vocab = f"temp.{table}_vocab"
    create = f"CREATE VIRTUAL TABLE IF NOT EXISTS {vocab} USING fts5vocab(main, {table}, 'row')"
    return (
        Sql(create, "SELECT 1", noop=True),
        Sql(
            f"SELECT doc FROM {vocab} WHERE term = ?",
            pgsql.vocab_row(table),
            params=pgsql.vocab_row_params,
        ),
    )


VOCAB_ROWS = (
    "SELECT term, doc FROM temp.{table}_vocab WHERE term IN (SELECT value FROM json_each(?))"
)


def vocab_rows_sql(table: str) -> Sql:
    """Many terms' row counts in ``table`` (:data:`VOCAB_ROWS`); on PostgreSQL the same
    table's bounded counts (pgsql.vocab_rows)."""
    return Sql(
        VOCAB_ROWS.format(table=table),
        pgsql.vocab_rows(table),
        params=pgsql.vocab_rows_params,
    )


def vocab_counts(conn: Conn, table: str, terms: Sequence[str]) -> dict[str, int]:
    """Each of ``terms``' row count in ``table`` from its vocabulary, in one statement (on
    PostgreSQL pgsql's bounded counts: one lookup per term was a round trip each, 10-15 a
    search); a term the table does not hold counts 0."""
    want = list(dict.fromkeys(terms))
    if not want:
        return {}
    if isinstance(conn, sqlite3.Connection):
        conn.execute(vocab_sql(table)[0])
    sql = vocab_rows_sql(table)
    got = {str(r[0]): int(r[1]) for r in conn.execute(sql, (json.dumps(want),)).fetchall()}
    return {t: got.get(t, 0) for t in want}


def read_totals(conn: Conn, table: str) -> tuple[int, int]:
    """An FTS5 table's row count and tokens (all columns), as bm25() reads them."""
    row = conn.execute(totals_sql(table)).fetchone()
    if row is None or not row[0]:
        return 0, 0
    buf = bytes(row[0])
    rows, i = _varint(buf, 0)
    tokens = 0
    while i < len(buf):
        n, i = _varint(buf, i)
        tokens += n
    return rows, tokens


class HeldCounts(Protocol):
    """What the statistics read of an in-memory copy of the body index (postings.View)."""

    @property
    def rows(self) -> int: ...

    def df(self, terms: Sequence[str]) -> dict[str, int]: ...


@dataclass(frozen=True)
class Totals:
    """An FTS5 table's row count and average row length in tokens."""

    rows: int
    avg_length: float


class TermStats:
    """Document frequencies of one FTS5 table, cached while its row count holds."""

    def __init__(self, table: str) -> None:
        self.table = table
        self._lock = threading.Lock()
        self._rows = -1
        self._df: dict[str, int] = {}

    def totals(self, conn: Conn) -> Totals:
        """The table's current row count and average length (one small read)."""
        rows, tokens = read_totals(conn, self.table)
        totals = Totals(rows, tokens / rows if rows else 0.0)
        with self._lock:
            if abs(rows - self._rows) > _DRIFT * max(self._rows, 1):
                self._df, self._rows = {}, rows
        return totals

    def df(self, conn: Conn, terms: Sequence[str]) -> dict[str, int]:
        """Each term's document frequency (cached; call :meth:`totals` first)."""
        with self._lock:
            have = {t: self._df[t] for t in terms if t in self._df}
        missing = [t for t in terms if t not in have]
        if missing:
            create, lookup = vocab_sql(self.table)
            conn.execute(create)
            for t in missing:
                row = conn.execute(lookup, (t,)).fetchone()
                have[t] = 0 if row is None else int(row[0])
            with self._lock:
                # a word absent or rare now may be stored any moment: only the common ones,
                # whose weight barely moves with a few more rows, are remembered
                self._df.update((t, have[t]) for t in missing if have[t] >= _CACHED_DF)
        return have


# per database file and table: a document frequency belongs to the file's index, whichever
# connection reads it
_stats: dict[tuple[str, str], TermStats] = {}
_stats_lock = threading.Lock()
_STATS_FILES = 64


def stats_for(conn: Conn, table: str) -> TermStats:
    """The cached statistics of ``table`` in the database file ``conn`` has open."""
    file = ""
    for row in conn.execute(Sql("PRAGMA database_list", "SELECT 'ok'", noop=True)):
        if row[1] == "main":
            file = str(row[2])
    key = (file or f"memory:{id(conn)}", table)
    with _stats_lock:
        got = _stats.get(key)
        if got is None:
            if len(_stats) >= _STATS_FILES:
                _stats.clear()
            got = _stats[key] = TermStats(table)
        return got


class SearchStats:
    """What one search asks of the body index before ranking, each read once: each term's
    row count, whether a term is known (some body or metadata row holds it), the index's
    row count and its chunk count.

    With the in-memory index (``view``, store/search/memory/resident.py) the body's counts are its own,
    exact, and only whether a metadata row holds a term is asked (one statement). Without
    it, on PostgreSQL the terms asked about together are read in one statement
    (:func:`offload.store.postgres.pgsql.search_stats_sql`), and a term asked about again is not
    read again; on SQLite the counts come from the per-file cache (:class:`TermStats`) and
    a term's existence from FTS5 (both in-process)."""

    def __init__(self, conn: Conn, view: HeldCounts | None = None) -> None:
        self.conn = conn
        self._view = view
        self._pg = not isinstance(conn, sqlite3.Connection)
        self._df: dict[str, int] = {}
        self._known: dict[str, bool] = {}
        self._meta: dict[str, bool] = {}  # term -> some metadata row holds it (with a view)
        self._rows = -1
        self._chunks = -1

    def counts(self, terms: Sequence[str]) -> dict[str, int]:
        """Each of ``terms``' row count in ``search_body`` (0: none holds it)."""
        want = list(dict.fromkeys(terms))
        if self._view is not None:
            return self._view.df(want)
        if not self._pg:
            stats = stats_for(self.conn, "search_body")
            stats.totals(self.conn)
            return stats.df(self.conn, want)
        self._read([t for t in want if t not in self._df])
        return {t: self._df[t] for t in want}

    def prefetch(self, terms: Sequence[str]) -> None:
        """Read what ``terms`` need now, with the others asked in the same statement (on
        SQLite without a view nothing: its counts are cached per file)."""
        if self._view is not None:
            self._read_meta(list(dict.fromkeys(terms)))
        elif self._pg:
            self._read([t for t in dict.fromkeys(terms) if t not in self._df])

    def known(self, terms: Sequence[str]) -> set[str]:
        """Those of ``terms`` some body or metadata row holds."""
        want = list(dict.fromkeys(terms))
        if self._view is not None:
            body = self._view.df(want)
            self._read_meta(want)
            return {t for t in want if body[t] or self._meta[t]}
        if not self._pg:
            return {t for t in want if _fts_holds(self.conn, t)}
        self._read([t for t in want if t not in self._df])
        return {t for t in want if self._known[t]}

    def meta_held(self, terms: Sequence[str]) -> set[str] | None:
        """Those of ``terms`` some metadata row holds, when known without ranking (with a
        view); None: not known (the metadata is ranked to find out)."""
        if self._view is None:
            return None
        want = list(dict.fromkeys(terms))
        self._read_meta(want)
        return {t for t in want if self._meta[t]}

    @property
    def rows(self) -> int:
        """The body index's row count (PostgreSQL: ANALYZE's estimate once analysed)."""
        if self._view is not None:
            return int(self._view.rows)
        if self._rows < 0:
            if self._pg:
                self._read([])
            else:
                self._rows = self.totals().rows
        return self._rows

    @property
    def chunks(self) -> int:
        """The chunk count (exact on a small store, the planner's estimate on a large one)."""
        if self._view is not None:
            return int(self._view.rows)
        if self._chunks < 0:
            if self._pg:
                self._read([])
            else:
                self._chunks = int(
                    self.conn.execute(
                        Sql("SELECT count(*) FROM chunks", pgsql.chunk_count())
                    ).fetchone()[0]
                )
        return self._chunks

    def _read_meta(self, terms: list[str]) -> None:
        missing = [t for t in terms if t not in self._meta]
        if not missing:
            return
        if not self._pg:
            self._meta.update((t, _fts_holds(self.conn, t, ("search_meta",))) for t in missing)
            return
        rows = self.conn.execute(pgsql.META_TERMS, pgsql.search_stats_params(missing))
        self._meta.update((str(r[0]), bool(r[1])) for r in rows.fetchall())

    def totals(self) -> Totals:
        """SQLite's FTS5 totals (row count and average length)."""
        return stats_for(self.conn, "search_body").totals(self.conn)

    def _read(self, terms: list[str]) -> None:
        if not terms and self._rows >= 0:
            return
        cache = _pg_counts_for(self.conn)
        held = cache.counts(terms)
        asked = [t for t in terms if t not in held]
        rows, clock = self._ask(asked)
        if not cache.note(rows, clock, {t: self._df[t] for t in asked}) and held:
            self._ask(list(held))  # the cache was older than the index: read them afresh
        else:
            self._df.update(held)
            self._known.update((t, True) for t in held)

    def _ask(self, terms: list[str]) -> tuple[int, int]:
        """Read ``terms`` (and the totals) in one statement; (rows, clock)."""
        # a statement needs a term to return a row: a term that cannot match stands in
        asked = terms or [""]
        got = self.conn.execute(pgsql.search_stats_sql(), pgsql.search_stats_params(asked))
        clock = 0
        for r in got.fetchall():
            self._rows, self._chunks, clock = int(r[3]), int(r[4]), int(r[5])
            if terms:
                self._df[str(r[0])] = int(r[1])
                self._known[str(r[0])] = bool(r[2])
        return self._rows, clock


class PgCounts:
    """A PostgreSQL store's common terms' row counts, kept across searches by the rule
    :class:`TermStats` keeps SQLite's by: a term held by at least ``_CACHED_DF`` rows
    (whose weight barely moves with a few more), while the index's row count and the
    chunks written since stay within ``_DRIFT`` of the count the cache was started at.
    Counting such a term reads up to 5,000 of its rows (pgsql._df): ~5-50 ms each at
    1M rows, several a question, where a cached one costs nothing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows = -1
        self._clock = -1
        self._df: dict[str, int] = {}

    def counts(self, terms: Sequence[str]) -> dict[str, int]:
        """The cached counts of those of ``terms`` held (valid if :meth:`note` agrees)."""
        with self._lock:
            return {t: self._df[t] for t in terms if t in self._df}

    def note(self, rows: int, clock: int, counts: dict[str, int]) -> bool:
        """Record fresh ``counts`` read at ``rows``/``clock``; False when the cache had
        drifted past the rule (it starts again from these)."""
        with self._lock:
            drift = _DRIFT * max(self._rows, 1)
            fresh = (
                self._rows >= 0
                and abs(rows - self._rows) <= drift
                and 0 <= clock - self._clock <= drift
            )
            if not fresh or len(self._df) >= _CACHED_TERMS:
                self._df, self._rows, self._clock = {}, rows, clock
            self._df.update((t, n) for t, n in counts.items() if n >= _CACHED_DF)
            return fresh


# per PostgreSQL store (its URL): the common terms' counts (PgCounts)
_pg_counts: dict[str, PgCounts] = {}
# the most terms one store's cache holds before it starts again
_CACHED_TERMS = 100_000


def _pg_counts_for(conn: Conn) -> PgCounts:
    key = str(getattr(conn, "url", ""))
    with _stats_lock:
        got = _pg_counts.get(key)
        if got is None:
            if len(_pg_counts) >= _STATS_FILES:
                _pg_counts.clear()
            got = _pg_counts[key] = PgCounts()
        return got


def _fts_holds(
    conn: Conn, term: str, tables: Sequence[str] = ("search_body", "search_meta")
) -> bool:
    """Whether an FTS5 table (body or metadata) holds ``term``."""
    m = '"' + term.replace('"', '""') + '"'
    for table in tables:
        found = conn.execute(
            Sql.sqlite_only(f"SELECT 1 FROM {table} WHERE {table} MATCH ? LIMIT 1"), (m,)
        )
        if found.fetchone():
            return True
    return False


@dataclass
class Plan:
    """The rare terms (``scored``: every row matching one is scored) and the common ones
    (``rest``: bounded), rarest first."""

    scored: list[str]
    rest: list[str]
    df: dict[str, int]
    totals: Totals
    bound_of: Callable[[int, Sequence[int]], float] = upper_bound
    # widen to every term at once (PostgreSQL: each pass scans every row it scores again)
    widen_whole: bool = False

    @property
    def bound(self) -> float:
        """The most a row matching only ``rest`` terms can score."""
        return self.bound_of(self.totals.rows, [self.df[t] for t in self.rest])

    def widen(self) -> None:
        """Move the rarest remaining term to the scored ones (or all, ``widen_whole``)."""
        if self.widen_whole:
            self.widen_all()
            return
        self.scored.append(self.rest.pop(0))

    def widen_all(self) -> None:
        """Score every term (the plain OR query)."""
        self.scored.extend(self.rest)
        self.rest.clear()


def plan(conn: Conn, table: str, terms: Sequence[str], stats: SearchStats | None = None) -> Plan:
    """Split ``terms``: the rarest up to :data:`POSTINGS_BUDGET` matches are scored by FTS5
    (on PostgreSQL by pgsql's ``ts_rank`` sum, each term's row count read once per search,
    ``stats``: the rule there reads ``search_body``'s)."""
    if not isinstance(conn, sqlite3.Connection):
        if stats is None or table != "search_body":
            rows = int(conn.execute(Sql.postgres_only(pgsql.row_count(table))).fetchone()[0])
            counts = vocab_counts(conn, table, terms)
        else:
            counts, rows = stats.counts(terms), stats.rows
        p = _split(counts, Totals(rows, 0.0), ts_rank_upper_bound)
        p.widen_whole = True
        first = sum(counts[t] for t in p.scored)
        if first > POSTINGS_BUDGET and first >= WHOLE_SHARE * max(counts.values()):
            # even the rarest term is common: the partitions would score most of the
            # matches and, ts_rank's bound being loose, most likely score them again
            p.widen_all()
        return p
    stats_ = stats_for(conn, table)
    totals = stats_.totals(conn)
    return _split(stats_.df(conn, list(dict.fromkeys(terms))), totals, upper_bound)


def plan_of(df: dict[str, int], totals: Totals) -> Plan:
    """The SQLite plan for terms of known document frequencies (store/search/memory/resident.py's
    exact counts instead of the cached ones)."""
    return _split(df, totals, upper_bound)


def _split(
    df: dict[str, int], totals: Totals, bound_of: Callable[[int, Sequence[int]], float]
) -> Plan:
    """The rarest terms up to :data:`POSTINGS_BUDGET` matches scored, the rest bounded."""
    order = sorted(df, key=lambda t: (df[t], t))
    order = [t for t in order if df[t] > 0] or order[:1]
    scored: list[str] = []
    spent = 0
    for t in order:
        if scored and spent + df[t] > POSTINGS_BUDGET:
            break
        scored.append(t)
        spent += df[t]
    return Plan(scored, order[len(scored) :], df, totals, bound_of)


def idle_forms(
    conn: Conn,
    table: str,
    forms: Sequence[tuple[str, str]],
    stats: SearchStats | None = None,
) -> set[str]:
    """The written forms (``(form, stem)`` pairs of a query) that ``table`` holds in no
    fewer rows than their stems: a name is written one way wherever it occurs, so its form
    would only count the same rows twice. A form rarer than its stem tells which
    inflection was meant, and is searched beside it (``stats``: the search's counts)."""
    if not forms:
        return set()
    terms = list(dict.fromkeys(t for pair in forms for t in pair))
    if stats is not None and table == "search_body":
        df = stats.counts(terms)
    elif isinstance(conn, sqlite3.Connection):
        cached = stats_for(conn, table)
        cached.totals(conn)
        df = cached.df(conn, terms)
    else:  # no cached FTS5 statistics: each term's row count, read directly
        df = vocab_counts(conn, table, terms)
    return {f for f, s in forms if df[f] >= df[s]}
