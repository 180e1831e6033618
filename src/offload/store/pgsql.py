"""The store's statements, as PostgreSQL runs them (pure: no connection here).

The row-level functions (rows, index, tombstones, state, lifecycle, search, vectors) are
written once, in SQLite's dialect with ``?`` parameters. A PostgreSQL store runs the same
statements through :func:`translate`, which rewrites the few SQLite-only constructs, each
by a named rule below:

- ``?`` parameters become ``%s`` (and a literal ``%`` is doubled);
- ``INSERT OR IGNORE`` becomes ``ON CONFLICT DO NOTHING``; a replaced vector gets a new id;
- ``json_each(?)`` (a list of ids) becomes ``offload_ids(%s)``, a function of the schema;
  a list of words (``term IN (SELECT value FROM json_each(?))``) is read as JSON text;
- the column ``end`` is quoted; ``instr``/``substr(x, -n)`` become ``strpos``/``right``;
  ``max(a, b)`` of two counter values is ``greatest``, and an upsert's unqualified
  ``value`` names the counter's row;
- the FTS5 tables ``search_body``/``search_meta`` are ``tsvector`` columns with GIN indexes:
  their inserts build the vector from the terms that :mod:`offload.core.analysis` produced
  (one lexeme per term, positions kept), MATCH becomes ``@@`` on a ``tsquery`` of the same
  quoted terms, ``bm25()`` becomes an IDF-weighted sum of ``ts_rank`` (:func:`_top`;
  metadata columns weighted as :data:`offload.store.index.META_WEIGHTS` say), and FTS5's
  commands (optimize, automerge, integrity-check) have nothing to do;
- a join on ``n.id IN (a subquery correlated with the other side ... LIMIT ?)`` (an entry's
  neighbours) is a ``LATERAL`` join: PostgreSQL would otherwise run the subquery once per
  pair of rows (seconds at 2,000 entries);
- ``VACUUM`` is ``VACUUM FULL`` (what gives space back, as SQLite's does).

A statement translates the same way every time, so translations are cached.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from offload.store.index import META_WEIGHTS

ParamMap = Callable[[Sequence[Any]], Sequence[Any]]

# PostgreSQL refuses a lexeme of 2 KB or more, and positions past 16383
MAX_LEXEME_BYTES = 2046
MAX_POSITION = 16383
# tables whose inserts report the new row's id (cursor.lastrowid)
ID_TABLES = frozenset({"blocks", "entries", "tombstones", "chunks"})
# search_meta's columns and the tsvector weight letter each one gets
META_COLUMNS = ("topic", "summary", "tags", "labels", "source")
_LETTERS = "ABCD"


@dataclass(frozen=True)
class Statement:
    """One translated statement: its SQL, how its parameters map, whether it returns an id."""

    sql: str
    params: ParamMap | None = None
    returns_id: bool = False
    noop: bool = False


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
    returns it and the next free position."""
    parts: list[str] = []
    pos = start
    for term in terms.split(" "):
        lex = _lexeme(term)
        if lex is None:
            continue
        parts.append(f"{lex}:{min(pos, MAX_POSITION)}{letter}")
        pos += 1
    return " ".join(parts), pos


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
    """The tsquery for an FTS5 MATCH of quoted terms joined by OR (search.match_expression)."""
    lexemes = []
    for m in _QUOTED.finditer(match):
        lex = _lexeme(m.group(1).replace('""', '"'))
        if lex is not None:
            lexemes.append(lex)
    return " | ".join(lexemes)


# -- the rules ------------------------------------------------------------------------------

_FTS_COMMAND = re.compile(
    r"^INSERT INTO (search_body|search_meta) \(\1(?:, rank)?\) VALUES \('([a-z-]+)'(?:, \d+)?\)$"
)
_FTS_DELETE = re.compile(
    r"^INSERT INTO search_body \(search_body, rowid, terms\) VALUES \('delete', \?, \?\)$"
)
_BODY_INSERT = "INSERT INTO search_body (rowid, terms) VALUES (?, ?)"
_META_INSERT = re.compile(
    r"^INSERT INTO search_meta \(rowid, topic, summary, tags, labels, source\)\s+"
    r"VALUES \(\?, \?, \?, \?, \?, \?\)$"
)
_TOP = re.compile(
    r"^SELECT rowid, bm25\((search_body|search_meta)[^)]*\) AS s FROM \1 "
    r"WHERE \1 MATCH \? ORDER BY s LIMIT \?$"
)
_MATCH = re.compile(r"\b(search_body|search_meta) MATCH \?")
_SEQUENCE = re.compile(r"^SELECT seq FROM sqlite_sequence WHERE name = '(\w+)'$")
_REPLACE_VECTOR = re.compile(r"^INSERT OR REPLACE INTO entry_vectors \(entry_id, model, data\)")
_INSERT_TABLE = re.compile(r"^\s*INSERT INTO (\w+)")
_PRAGMA = re.compile(r"^\s*PRAGMA\b", re.IGNORECASE)
_END = re.compile(r"(?<![\w\"'])end(?![\w\"'])")
_SUBSTR_TAIL = re.compile(r"substr\((\w+), -(\d+)\)")
_BLOB = re.compile(r"CAST\((\w+) AS BLOB\)")
_TS_COLUMN = {"search_body": "terms", "search_meta": "tsv"}
_VOCAB_ROW = re.compile(r"^SELECT doc FROM temp\.\w+ WHERE term = \?$")
_IN_CORRELATED = re.compile(
    r"^SELECT (.+?) FROM (\w+) (\w+) JOIN (\w+) (\w+) ON \5\.id IN \((SELECT \w+\.id FROM .+? LIMIT \?)\) (WHERE .+)$"
)
_TERMS_IN = re.compile(r"\bterm IN \(SELECT value FROM json_each\(\?\)\)")
_COUNT_OF_SUBQUERY = re.compile(r"^SELECT count\(\*\) FROM \(SELECT .*\)$")


def _body_params(p: Sequence[Any]) -> Sequence[Any]:
    return (p[0], tsvector_literal(p[1])[0])


def _meta_params(p: Sequence[Any]) -> Sequence[Any]:
    return (*p, meta_tsvector(p[1:6]))


def _top(table: str) -> str:
    """BM25's shape on PostgreSQL: each matched term's ``ts_rank`` (term frequency, damped
    by the row's length) weighted by the term's inverse document frequency, FTS5's own
    formula ``max(1e-6, ln((N - df + 0.5) / (df + 0.5)))`` (``ts_rank`` alone has no IDF, so
    a common word would outrank a rare one). N is the planner's row estimate once the table
    has been analysed, else an exact count; never below a term's own count (an estimate
    may lag behind a burst of writes). The term statistics are MATERIALIZED: inlined, the
    planner re-ran each term's count for every matching row (minutes at 2,000 entries)."""
    col = _TS_COLUMN[table]
    weights = ""
    if table == "search_meta":
        weights = "'{" + ", ".join(f"{w:.6g}" for w in META_RANK_WEIGHTS) + "}', "
    rows = (
        f"SELECT greatest(1, CASE WHEN c.reltuples > 0 THEN c.reltuples::float8 "
        f"ELSE (SELECT count(*) FROM {table})::float8 END) AS n "
        f"FROM pg_class c WHERE c.oid = '{table}'::regclass"
    )
    return (
        f"WITH w AS MATERIALIZED (SELECT x.q, "
        f"greatest(1e-6, ln((greatest(nd.n, x.df) - x.df + 0.5) / (x.df + 0.5))) AS idf "
        f"FROM (SELECT q, (SELECT count(*) FROM {table} WHERE {col} @@ q) AS df "
        f"FROM unnest(%s::tsquery[]) AS q) x, ({rows}) nd) "
        f"SELECT t.rowid, -sum(w.idf * ts_rank({weights}t.{col}, w.q, 1)) AS s "
        f"FROM {table} t JOIN w ON t.{col} @@ w.q GROUP BY t.rowid ORDER BY s LIMIT %s"
    )


def tsquery_terms(match: str) -> list[str]:
    """Each term of an FTS5 MATCH of quoted terms as its own one-lexeme tsquery."""
    out: list[str] = []
    for m in _QUOTED.finditer(match):
        lex = _lexeme(m.group(1).replace('""', '"'))
        if lex is not None and lex not in out:
            out.append(lex)
    return out


def _top_params(p: Sequence[Any]) -> Sequence[Any]:
    return (tsquery_terms(p[0]), p[1])


def _map_at(indexes: frozenset[int]) -> ParamMap:
    def mapped(p: Sequence[Any]) -> Sequence[Any]:
        return [tsquery_literal(v) if i in indexes else v for i, v in enumerate(p)]

    return mapped


def _generic(sql: str) -> str:
    out = sql.replace("%", "%%")
    out = _TERMS_IN.sub("term IN (SELECT json_array_elements_text(?::json))", out)
    out = _BLOB.sub(r"\1", out)
    out = out.replace("json_each(?)", "offload_ids(?)")
    out = out.replace("instr(", "strpos(")
    out = _SUBSTR_TAIL.sub(r"right(\1, \2)", out)
    out = _END.sub('"end"', out)
    out = out.replace("max(value, excluded.value)", "greatest(counters.value, excluded.value)")
    out = out.replace("SET value = value + 1", "SET value = counters.value + 1")
    ignore = out.lstrip().startswith("INSERT OR IGNORE INTO")
    if ignore:
        out = out.replace("INSERT OR IGNORE INTO", "INSERT INTO", 1) + " ON CONFLICT DO NOTHING"
    return out.replace("?", "%s")


@functools.lru_cache(maxsize=1024)
def translate(sql: str) -> Statement:
    """The PostgreSQL form of one of the store's statements."""
    flat = " ".join(sql.split())
    if _PRAGMA.match(flat):
        return Statement("SELECT 'ok'", noop=True)
    if m := _FTS_COMMAND.match(flat):
        if m.group(2) == "delete-all":
            return Statement(f"DELETE FROM {m.group(1)}")
        return Statement("SELECT 1", noop=True)  # optimize, automerge, integrity-check
    if _FTS_DELETE.match(flat):
        return Statement("DELETE FROM search_body WHERE rowid = %s", lambda p: (p[0],))
    if flat == _BODY_INSERT:
        return Statement(
            "INSERT INTO search_body (rowid, terms) VALUES (%s, %s::tsvector)", _body_params
        )
    if _META_INSERT.match(flat):
        return Statement(
            "INSERT INTO search_meta (rowid, topic, summary, tags, labels, source, tsv) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s::tsvector)",
            _meta_params,
        )
    if m := _TOP.match(flat):
        return Statement(_top(m.group(1)), _top_params)
    if m := _SEQUENCE.match(flat):
        # committed rows only (writers are serialised, so ids commit in order)
        return Statement(f"SELECT coalesce(max(id), 0) AS seq FROM {m.group(1)}")
    if _REPLACE_VECTOR.match(flat):
        return Statement(
            "INSERT INTO entry_vectors (entry_id, model, data) VALUES (%s, %s, %s) "
            "ON CONFLICT (entry_id) DO UPDATE SET id = nextval('entry_vectors_id_seq'), "
            "model = excluded.model, data = excluded.data"
        )
    if flat.startswith("CREATE VIRTUAL TABLE IF NOT EXISTS temp.") and "fts5vocab" in flat:
        return Statement("SELECT 1", noop=True)  # the vocabulary is search_body itself
    if _VOCAB_ROW.match(flat):
        # fts5vocab's per-term row count: the rows whose vector holds the term
        return Statement(
            "SELECT count(*) AS doc FROM search_body WHERE terms @@ %s::tsquery",
            lambda p: (tsquery_literal('"' + str(p[0]).replace('"', '""') + '"'),),
        )
    if m := _IN_CORRELATED.match(flat):
        cols, table, alias, _other, near, sub, rest = m.groups()
        flat = f"SELECT {cols} FROM {table} {alias} CROSS JOIN LATERAL ({sub}) {near} {rest}"
        return Statement(_generic(flat))
    if flat.upper() == "VACUUM":
        # SQLite's VACUUM rewrites the file, giving free pages back: PostgreSQL's FULL does
        return Statement("VACUUM FULL")
    matches = frozenset(
        flat[: m.start()].count("?") for m in _MATCH.finditer(flat)
    )  # the parameters that are MATCH expressions
    out = _MATCH.sub(lambda m: f"{_TS_COLUMN[m.group(1)]} @@ ?::tsquery", sql)
    table = _INSERT_TABLE.match(flat)
    returns_id = bool(table and table.group(1) in ID_TABLES and "RETURNING" not in flat)
    text = _generic(out) + (" RETURNING id" if returns_id else "")
    if _COUNT_OF_SUBQUERY.match(flat):
        text += " AS sub"  # PostgreSQL 15 wants a name for a subquery in FROM
    return Statement(text, _map_at(matches) if matches else None, returns_id)
