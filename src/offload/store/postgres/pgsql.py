"""What PostgreSQL's forms of the store's statements are built from (pure: no connection here).

Each statement the store runs is a :class:`offload.store.backend.Sql` written where it is
used, with its PostgreSQL form beside its SQLite one where the two differ. The forms that
stand for FTS5 are built here, as are the parameter maps that turn a statement's SQLite
parameters into the PostgreSQL form's:

- the FTS5 tables ``search_body``/``search_meta`` are ``tsvector`` columns with GIN
  indexes: their rows hold the terms that :mod:`offload.core.text.analysis` produced (one lexeme
  per term, positions kept: :func:`body_params`, :func:`meta_params`), a MATCH is ``@@`` on a
  ``tsquery`` of the same quoted terms (:func:`tsqueries_at`; a selective partition
  ``(rare) AND/NOT (common)`` becomes ``&``/``& !``), ``bm25()`` is an IDF-weighted sum of
  ``ts_rank`` (:func:`top`; metadata columns weighted as
  :data:`offload.store.schema.META_WEIGHTS` say), and a term's document frequency
  (fts5vocab's ``doc``) is read cheaply (:func:`vocab_row`, :func:`vocab_rows`);
- a search's term statistics in one statement (:func:`search_stats_sql`), and a body
  ranking whose weights the caller computed (:data:`RANKED_BODY`);
- the row and chunk counts read from the planner's estimates once a table is large
  (:func:`row_count`, :func:`chunk_count`).

Elsewhere the differences are written out at the statement: ``INSERT OR IGNORE`` is
``ON CONFLICT DO NOTHING``, a list of ids ``json_each(?)`` is ``offload_ids(%s)`` (a
function of the schema) and one of words or labels ``json_array_elements_text(%s::json)``,
the column ``end`` is quoted, an insert whose id is read ends in ``RETURNING id``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from offload.store.backend import ParamMap, Sql
from offload.store.schema import META_WEIGHTS

# PostgreSQL refuses a lexeme of 2 KB or more, and positions past 16383
MAX_LEXEME_BYTES = 2046
MAX_POSITION = 16383
# search_meta's columns and the tsvector weight letter each one gets
META_COLUMNS = ("topic", "summary", "tags", "labels", "source")
_LETTERS = "ABCD"
# a term's rows are counted up to this many; past it ANALYZE's statistics stand for the count
DF_EXACT_UP_TO = 5000
# the chunk count is counted up to this many rows; past it the planner's estimate stands
EXACT_ROWS_UP_TO = 100_000
# ts_rank's default weight of an unlabelled lexeme (label D): search_body's terms
BODY_TERM_WEIGHT = 0.1
# the tsvector column of each search table (FTS5's tables on SQLite)
_TS_COLUMN = {"search_body": "terms", "search_meta": "tsv"}


def _meta_letters() -> tuple[dict[str, str], list[float]]:
    """Weight letters for search_meta's columns (equal weights share a letter) and the
    ts_rank weight array {D, C, B, A} scaled to at most 1 (ts_rank's range)."""
    distinct = sorted(set(META_WEIGHTS), reverse=True)[:4]
    letter_of = {w: _LETTERS[i] for i, w in enumerate(distinct)}
    top = max(distinct)
    cols = {
        c: letter_of.get(w, _LETTERS[len(distinct) - 1])
        for c, w in zip(META_COLUMNS, META_WEIGHTS, strict=True)
    }
    array = [0.0, 0.0, 0.0, 0.0]  # D, C, B, A
    for w, letter in letter_of.items():
        array[3 - _LETTERS.index(letter)] = w / top
    return cols, array


META_LETTERS, META_RANK_WEIGHTS = _meta_letters()


def _lexeme(term: str) -> str | None:
    if not term or len(term.encode("utf-8")) > MAX_LEXEME_BYTES:
        return None
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def tsvector_literal(terms: str, letter: str = "", start: int = 1) -> tuple[str, int]:
    """A tsvector's text form for space-separated analysed terms (positions from ``start``);
    returns it and the next free position.

    Each distinct lexeme is written once with all its positions (``'w':1,5,9``), the form
    PostgreSQL itself prints: built for every chunk of every put, and a 100 KB body has
    ~30k terms but a few thousand distinct ones."""
    words = [
        t
        for t in terms.split(" ")
        if t and (len(t) * 4 <= MAX_LEXEME_BYTES or len(t.encode("utf-8")) <= MAX_LEXEME_BYTES)
    ]
    if "\\" in terms or "'" in terms:
        words = [t.replace("\\", "\\\\").replace("'", "''") for t in words]
    end = start + len(words)
    at: dict[str, list[int]] = {}
    for pos, w in enumerate(words, start):
        at.setdefault(w, []).append(pos)
    sep = f"{letter},"
    parts = []
    for w, ps in at.items():
        if ps[-1] > MAX_POSITION:
            ps = sorted({min(p, MAX_POSITION) for p in ps})
        parts.append(f"'{w}':{sep.join(map(str, ps))}{letter}")
    return " ".join(parts), end


def meta_tsvector(columns: Sequence[str]) -> str:
    """The weighted tsvector of an entry's analysed metadata columns."""
    out: list[str] = []
    pos = 1
    for name, terms in zip(META_COLUMNS, columns, strict=True):
        text, pos = tsvector_literal(terms or "", META_LETTERS[name], pos)
        if text:
            out.append(text)
    return " ".join(out)


_QUOTED = re.compile(r'"((?:[^"]|"")*)"')


def tsquery_literal(match: str) -> str:
    """The tsquery for an FTS5 MATCH of quoted terms joined by OR (query.match_expression)."""
    lexemes = []
    for m in _QUOTED.finditer(match):
        lex = _lexeme(m.group(1).replace('""', '"'))
        if lex is not None:
            lexemes.append(lex)
    return " | ".join(lexemes)


def body_params(p: Sequence[Any]) -> Sequence[Any]:
    """A search_body row's parameters (rowid, analysed terms): the terms as a tsvector."""
    return (p[0], tsvector_literal(p[1])[0])


def meta_params(p: Sequence[Any]) -> Sequence[Any]:
    """A search_meta row's parameters, its weighted tsvector appended."""
    return (*p, meta_tsvector(p[1:6]))


def first_param(p: Sequence[Any]) -> Sequence[Any]:
    """Only the first parameter (FTS5's delete command also names the old terms)."""
    return (p[0],)


def vocab_row_params(p: Sequence[Any]) -> Sequence[Any]:
    """:func:`vocab_row`'s parameters for the term ``p[0]``: it and its tsquery."""
    return (str(p[0]), _lexeme(str(p[0])) or _NOTHING)


def row_count(table: str) -> str:
    """The table's row count: the planner's estimate once it has been analysed (reading
    it costs nothing), else an exact count."""
    return (
        f"SELECT greatest(1, CASE WHEN c.reltuples > 0 THEN c.reltuples::float8 "
        f"ELSE (SELECT count(*) FROM {table})::float8 END) AS n "
        f"FROM pg_class c WHERE c.oid = '{table}'::regclass"
    )


def chunk_count() -> str:
    """The index's chunk count (scope_terms' shares over the whole index): exact below
    :data:`EXACT_ROWS_UP_TO` (a small store is counted, whatever autovacuum did), the
    planner's estimate above it (counting reads the whole primary key: ~0.1 s a million)."""
    return (
        f"SELECT CASE WHEN c.reltuples >= {EXACT_ROWS_UP_TO} THEN c.reltuples::bigint "
        "ELSE (SELECT count(*) FROM chunks) END AS n "
        "FROM pg_class c WHERE c.oid = 'chunks'::regclass"
    )


def _lexeme_stats(table: str) -> str:
    """ANALYZE's statistics of the table's tsvector column: its most common lexemes
    (``el``) and the share of rows holding each (``fr``; the smallest share follows)."""
    return (
        "SELECT s.most_common_elems::text::text[] AS el, s.most_common_elem_freqs AS fr "
        "FROM pg_stats s JOIN pg_class c ON c.relname = s.tablename "
        "JOIN pg_namespace ns ON ns.oid = c.relnamespace AND ns.nspname = s.schemaname "
        f"WHERE c.oid = '{table}'::regclass AND s.attname = '{_TS_COLUMN[table]}' "
        "AND NOT s.inherited"
    )


def _df(table: str, term: str, q: str) -> str:
    """A term's document frequency with bounded work: the rows holding it, counted up to
    :data:`DF_EXACT_UP_TO` (exact below that: a small store is counted exactly); a term
    ANALYZE found in at least that many rows is not counted at all: its share of the
    statistics' sample times the row count stands for it (counting a common word's
    rows reads its whole posting list: ~0.1 s at 100k rows). ``term`` (text) and ``q``
    (its tsquery) are columns of the caller's query; ``st`` and ``nd`` its joins of
    :func:`_lexeme_stats` and :func:`_rows`."""
    est = f"st.fr[array_position(st.el, {term})] * nd.n"
    return (
        f"CASE WHEN coalesce({est}, 0) >= {DF_EXACT_UP_TO} THEN round({est}) "
        f"ELSE (SELECT count(*) FROM (SELECT 1 FROM {table} "
        f"WHERE {_TS_COLUMN[table]} @@ {q} LIMIT {DF_EXACT_UP_TO}) AS held) END"
    )


def top(table: str) -> str:
    """BM25's shape on PostgreSQL: each term's ``ts_rank`` (term frequency, damped by the
    row's length) weighted by the term's inverse document frequency, FTS5's own formula
    ``max(1e-6, ln((N - df + 0.5) / (df + 0.5)))`` (``ts_rank`` alone has no IDF, so a
    common word would outrank a rare one), summed over every term of the MATCH for each
    row the MATCH's tsquery selects (a term a row lacks adds 0). So a selective partition,
    ``(rare) AND (common)``, scores its rows exactly as the plain OR query would, and only
    its rows (the GIN index finds them). N is :func:`_rows`, never below a term's own
    count (an estimate may lag behind a burst of writes); df is :func:`_df`. The term
    statistics are MATERIALIZED: inlined, the planner re-ran them for every row (and each
    count once for each use of it)."""
    col = _TS_COLUMN[table]
    weights = ""
    if table == "search_meta":
        weights = "'{" + ", ".join(f"{w:.6g}" for w in META_RANK_WEIGHTS) + "}', "
    return (
        f"WITH nd AS MATERIALIZED ({row_count(table)}), st AS MATERIALIZED ({_lexeme_stats(table)}), "
        f"d AS MATERIALIZED (SELECT t.q, {_df(table, 't.term', 't.q')} AS df "
        f"FROM unnest(%s::text[], %s::tsquery[]) AS t(term, q) CROSS JOIN nd "
        f"LEFT JOIN st ON true), "
        f"w AS MATERIALIZED (SELECT d.q, "
        f"greatest(1e-6, ln((greatest(nd.n, d.df) - d.df + 0.5) / (d.df + 0.5))) AS idf "
        f"FROM d CROSS JOIN nd) "
        f"SELECT t.rowid, -(SELECT sum(w.idf * ts_rank({weights}t.{col}, w.q, 1)) FROM w) AS s "
        f"FROM {table} t WHERE t.{col} @@ %s::tsquery ORDER BY s LIMIT %s"
    )


def vocab_row(table: str) -> str:
    """fts5vocab's per-term row count (``doc``) as :func:`_df` reads it."""
    return (
        f"SELECT {_df(table, 't.term', 't.q')} AS doc "
        f"FROM (SELECT %s::text AS term, %s::tsquery AS q) AS t CROSS JOIN ({row_count(table)}) nd "
        f"LEFT JOIN ({_lexeme_stats(table)}) st ON true"
    )


def vocab_rows(table: str) -> str:
    """:func:`_vocab_row` of many terms in one statement: (term, doc) rows."""
    return (
        f"SELECT t.term, {_df(table, 't.term', 't.q')} AS doc "
        f"FROM unnest(%s::text[], %s::tsquery[]) AS t(term, q) CROSS JOIN ({row_count(table)}) nd "
        f"LEFT JOIN ({_lexeme_stats(table)}) st ON true"
    )


def search_stats_sql() -> Sql:
    """What a search asks of the index before ranking, in one statement (PostgreSQL's
    only): for each term (parameters: the terms, their one-lexeme
    tsqueries) its row count in ``search_body`` (:func:`_df`'s bounded count), whether it
    is known at all (a body or a metadata row holds it), and on every row the index's row
    count (:func:`_rows`), its chunk count (:func:`_chunk_count`) and the chunk id drawn
    last (``clock``: how many chunks were ever written, the cache's measure of change). A search asked these
    in 6-10 statements, each a round trip and some a whole posting list again; and a word
    no row holds, checked alone (``LIMIT 1`` on a constant tsquery), was planned as a scan
    of the whole table (0.46 s at 1M rows) where the generic plan probes the index."""
    return Sql.postgres_only(
        f"WITH d AS MATERIALIZED (SELECT t.term, t.q, nd.n, {_df('search_body', 't.term', 't.q')} "
        f"AS doc FROM unnest(%s::text[], %s::tsquery[]) AS t(term, q) "
        f"CROSS JOIN ({row_count('search_body')}) nd LEFT JOIN ({_lexeme_stats('search_body')}) st "
        f"ON true) "
        f"SELECT d.term, d.doc, CASE WHEN d.doc > 0 THEN true "
        f"ELSE EXISTS (SELECT 1 FROM search_meta m WHERE m.tsv @@ d.q) END AS known, "
        f"d.n AS body_rows, ch.n AS chunks, (SELECT last_value FROM chunks_id_seq) AS clock "
        f"FROM d CROSS JOIN ({chunk_count()}) ch"
    )


def search_stats_params(terms: Sequence[str]) -> tuple[list[str], list[str]]:
    """:func:`search_stats_sql`'s parameters for ``terms``."""
    return list(terms), [_lexeme(t) or _NOTHING for t in terms]


# Which of the terms (the parameters of search_stats_sql) some metadata row holds: with an
# in-memory index of the bodies, the one thing a search still asks before ranking.
META_TERMS = Sql.postgres_only(
    "SELECT t.term, EXISTS (SELECT 1 FROM search_meta m WHERE m.tsv @@ t.q) AS held "
    "FROM unnest(%s::text[], %s::tsquery[]) AS t(term, q)"
)


# A body ranking on PostgreSQL whose term weights the caller computed (from the counts
# :func:`search_stats_sql` read once per search): :func:`_top`'s score for every row its
# tsquery selects, without reading each term's count again in every ranking statement.
RANKED_BODY = Sql.postgres_only(
    "WITH w AS MATERIALIZED (SELECT * FROM unnest(%s::tsquery[], %s::float8[]) AS w(q, idf)) "
    "SELECT t.rowid, -(SELECT sum(w.idf * ts_rank(t.terms, w.q, 1)) FROM w) AS s "
    "FROM search_body t WHERE t.terms @@ %s::tsquery ORDER BY s LIMIT %s"
)


def ranked_body_params(
    match: str, idf: Callable[[str], float], limit: int
) -> tuple[list[str], list[float], str, int]:
    """:data:`RANKED_BODY`'s parameters: each term of the FTS5 ``match`` with its weight
    (``idf`` of the term), the tsquery selecting the match's rows, the limit."""
    terms = _match_terms(match)
    return ([str(_lexeme(t)) for t in terms], [idf(t) for t in terms], match_tsquery(match), limit)


def vocab_rows_params(p: Sequence[Any]) -> Sequence[Any]:
    """:func:`vocab_rows`'s parameters for a JSON list of terms: the terms, their tsqueries."""
    terms = [str(t) for t in json.loads(p[0])]
    return (terms, [_lexeme(t) or _NOTHING for t in terms])


def _match_terms(match: str) -> list[str]:
    """The distinct terms of an FTS5 MATCH of quoted terms (those PostgreSQL can hold)."""
    out: list[str] = []
    for m in _QUOTED.finditer(match):
        term = m.group(1).replace('""', '"')
        if _lexeme(term) is not None and term not in out:
            out.append(term)
    return out


def tsquery_terms(match: str) -> list[str]:
    """Each term of an FTS5 MATCH of quoted terms as its own one-lexeme tsquery."""
    return [str(_lexeme(t)) for t in _match_terms(match)]


_PARTITION = re.compile(r'^\((".*")\) (AND|NOT) \((".*")\)$')
# the tsquery of no lexeme: it matches no row
_NOTHING = ""


def match_tsquery(match: str) -> str:
    """The tsquery selecting the rows an FTS5 MATCH selects: any of its quoted terms, or
    a selective partition ``(a OR b) AND (c OR d)`` / ``(a OR b) NOT (c OR d)``
    (lexical._partitions; a term is quoted, so ``) AND (`` is never inside one)."""
    m = _PARTITION.match(match)
    if m is None:
        return tsquery_literal(match) or _NOTHING
    rare, op, common = tsquery_literal(m.group(1)), m.group(2), tsquery_literal(m.group(3))
    if not rare or (op == "AND" and not common):
        return _NOTHING
    if not common:
        return rare
    return f"({rare}) & {'!' if op == 'NOT' else ''}({common})"


def top_params(p: Sequence[Any]) -> Sequence[Any]:
    """:func:`top`'s parameters for (an FTS5 MATCH, a limit)."""
    terms = _match_terms(p[0])
    return (terms, [_lexeme(t) for t in terms], match_tsquery(p[0]), p[1])


def ts_rank_bound(idfs: Sequence[float]) -> float:
    """The most a body row holding only terms of these IDFs can score in :func:`_top`:
    ``ts_rank`` gives an unlabelled lexeme at most its weight (0.1) and divides by
    log2(1 + the row's length in positions), at least log2(1 + k) for a row holding k of
    the terms; the best k terms are the k of highest IDF."""
    best = sorted(idfs, reverse=True)
    out, total = 0.0, 0.0
    for k, value in enumerate(best, 1):
        total += value
        out = max(out, BODY_TERM_WEIGHT * total / math.log2(k + 1))
    return out


def tsqueries_at(*indexes: int) -> ParamMap:
    """A parameter map turning the parameters at ``indexes`` (FTS5 MATCH strings) into
    tsqueries (:func:`tsquery_literal`)."""
    return tsqueries_at_set(frozenset(indexes))


def tsqueries_at_set(indexes: frozenset[int]) -> ParamMap:
    def mapped(p: Sequence[Any]) -> Sequence[Any]:
        return [tsquery_literal(v) if i in indexes else v for i, v in enumerate(p)]

    return mapped
