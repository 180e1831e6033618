"""Every statement the store runs has its SQLite form and its PostgreSQL form (no server).

The store's statements are :class:`offload.store.backend.Sql` values written where they
are used. These tests read the store's modules: no call of ``execute``/``executemany``
is handed a bare string (a PostgreSQL connection refuses one), and every statement that
can be built without running the store (module constants, ``Sql(...)`` of constants) is
checked: its SQLite form prepares on a fresh store, its PostgreSQL form parses as
PostgreSQL (pglast, PostgreSQL's own parser), both take as many parameters, a form
written once calls no function only SQLite has, and an insert whose new id is read
returns it on PostgreSQL too.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pglast
import pytest

import offload.store
from offload.errors import StoreError
from offload.store import Store
from offload.store.backend import Sql
from offload.store.postgres.pgconn import pg_form
from offload.store.search import narrow, selective

STORE = Path(offload.store.__file__).parent
# modules that speak to one database's own driver rather than through the Conn seam: the
# migrations (SQLite's and PostgreSQL's schema, frozen with each migration) and the
# PostgreSQL connection's own statements
OWN_DRIVER = frozenset(
    {
        "sqlite/db.py",
        "sqlite/migrations.py",
        "sqlite/frozen.py",
        "legacy_tallies.py",
        "postgres/pgschema.py",
        "postgres/pgscopes.py",
        "postgres/pgconn.py",
    }
)
# functions SQLite has and PostgreSQL has not (or has as something else): a statement
# written once must not call them
SQLITE_ONLY_FUNCTIONS = frozenset(
    {
        "json_each",
        "json_extract",
        "instr",
        "group_concat",
        "ifnull",
        "iif",
        "printf",
        "bm25",
        "highlight",
        "snippet",
        "julianday",
        "strftime",
        "unixepoch",
        "typeof",
        "randomblob",
        "zeroblob",
        "last_insert_rowid",
        "changes",
        "total",
    }
)
# tables whose new row's id an insert reports (cursor.lastrowid)
ID_TABLES = ("blocks", "entries", "tombstones", "chunks")
# what a template's fields are filled with to check it
FIELDS = {"where": "e.expires IS NULL", "table": "narrow_chunks", "counts": "count(*)"}


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(STORE.rglob("*.py")):
        rel = path.relative_to(STORE).as_posix()
        if rel not in OWN_DRIVER:
            yield rel, ast.parse(path.read_text(encoding="utf-8"))


def _module(rel: str) -> Any:
    name = "offload.store." + rel.removesuffix(".py").replace("/", ".")
    return importlib.import_module(name.removesuffix(".__init__"))


def _executes(tree: ast.Module) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("execute", "executemany")
            and node.args
        ):
            yield node


def _bare(arg: ast.expr) -> bool:
    """Whether an argument is a string made on the spot: a literal, an f-string, a sum or
    ``%`` of strings, or a ``.format(...)`` of one."""
    if isinstance(arg, ast.Constant | ast.JoinedStr):
        return isinstance(arg, ast.JoinedStr) or isinstance(arg.value, str)
    if isinstance(arg, ast.BinOp):
        return _bare(arg.left) or _bare(arg.right)
    return (
        isinstance(arg, ast.Call)
        and isinstance(arg.func, ast.Attribute)
        and arg.func.attr == "format"
    )


def _sql_calls(tree: ast.Module) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Name) and f.id == "Sql") or (
                isinstance(f, ast.Attribute)
                and isinstance(f.value, ast.Name)
                and f.value.id == "Sql"
            ):
                yield node


def _found(value: Any) -> Iterator[Sql]:
    if isinstance(value, Sql):
        yield value
    elif isinstance(value, tuple | list):
        for v in value:
            yield from _found(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _found(v)


def _statements() -> dict[str, Sql]:
    """Every statement buildable without running the store, by where it is written."""
    out: dict[str, Sql] = {}
    for rel, tree in _modules():
        module = _module(rel)
        for name, value in vars(module).items():
            for i, sql in enumerate(_found(value)):
                out[f"{rel}:{name}[{i}]"] = sql
        for call in _sql_calls(tree):
            code = compile(ast.Expression(call), rel, "eval")
            try:
                sql = eval(code, vars(module))
            except NameError:
                continue  # built of a function's locals: checked where it runs
            out[f"{rel}:{call.lineno}"] = sql
    return {k: _filled(v) for k, v in out.items()}


def _filled(sql: Sql) -> Sql:
    if not any("{" + f + "}" in sql for f in FIELDS):
        return sql
    return sql.fill(**{f: v for f, v in FIELDS.items() if "{" + f + "}" in sql})


@pytest.fixture(scope="module")
def statements() -> dict[str, Sql]:
    return _statements()


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sqlite3.Connection]:
    store = Store(tmp_path_factory.mktemp("statements") / "store")
    conn = store.conn
    assert isinstance(conn, sqlite3.Connection)
    for sql in narrow._TABLES:
        conn.execute(sql)
    for table in ("search_body", "search_meta"):
        conn.execute(selective.vocab_sql(table)[0])
    yield conn
    store.close()


def _sqlite_markers(conn: sqlite3.Connection, text: str) -> int:
    """How many parameters SQLite's form takes (it is compiled, never run: EXPLAIN)."""
    try:
        conn.execute("EXPLAIN " + text).fetchall()
        return 0
    except sqlite3.ProgrammingError as e:
        m = re.search(r"uses (\d+)", str(e))
        assert m is not None, str(e)
    n = int(m.group(1))
    conn.execute("EXPLAIN " + text, [None] * n).fetchall()
    return n


def _numbered(postgres: str) -> tuple[str, int]:
    """psycopg's markers (%s, %b) as PostgreSQL's own ($1, $2, ...), and how many."""
    count = 0

    def number(m: re.Match[str]) -> str:
        nonlocal count
        if m.group(0) == "%%":
            return "%"
        count += 1
        return f"${count}"

    return re.sub(r"%[%sb]", number, postgres), count


def _functions(tree: Any) -> Iterator[tuple[str, int]]:
    """(name, number of arguments) of every function a parsed statement calls."""
    if isinstance(tree, dict):
        call = tree.get("FuncCall")
        if isinstance(call, dict):
            name = call["funcname"][-1]["String"]["sval"]
            yield name, len(call.get("args", []))
        for v in tree.values():
            yield from _functions(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from _functions(v)


def test_no_statement_reaches_a_connection_as_a_bare_string() -> None:
    bare = []
    for rel, tree in _modules():
        module = _module(rel)
        for call in _executes(tree):
            arg = call.args[0]
            named = vars(module).get(arg.id, Sql("")) if isinstance(arg, ast.Name) else Sql("")
            if _bare(arg) or not isinstance(named, Sql):
                bare.append(f"{rel}:{call.lineno}")
    assert bare == []


def test_the_store_has_hundreds_of_statements_to_check(statements: dict[str, Sql]) -> None:
    # the collection itself works: a change that hid the statements would pass the rest
    assert len(statements) > 150


def test_every_sqlite_form_prepares_on_a_fresh_store(
    statements: dict[str, Sql], fresh: sqlite3.Connection
) -> None:
    failed = {}
    for where, sql in statements.items():
        if sql.sqlite_runs:
            try:
                _sqlite_markers(fresh, sql.sqlite)
            except sqlite3.Error as e:
                failed[where] = f"{e}: {sql.sqlite[:100]}"
    assert failed == {}


def test_every_postgresql_form_parses_and_takes_as_many_parameters(
    statements: dict[str, Sql], fresh: sqlite3.Connection
) -> None:
    failed = {}
    for where, sql in statements.items():
        if not sql.postgres_runs or sql.noop:
            continue
        text, count = _numbered(sql.postgres)
        try:
            pglast.parser.parse_sql(text)
        except pglast.parser.ParseError as e:
            failed[where] = f"{e}: {text[:100]}"
            continue
        if sql.sqlite_runs and sql.params is None:
            expected = _sqlite_markers(fresh, sql.sqlite)
            if count != expected:
                failed[where] = f"{count} parameters, SQLite's form {expected}"
    assert failed == {}


def test_a_statement_written_once_calls_no_function_only_sqlite_has(
    statements: dict[str, Sql],
) -> None:
    failed = {}
    for where, sql in statements.items():
        if not (sql.written_once and sql.postgres_runs):
            continue
        tree = json.loads(pglast.parser.parse_sql_json(_numbered(sql.postgres)[0]))
        for name, args in _functions(tree):
            scalar_pair = name in ("max", "min") and args > 1  # greatest/least on PostgreSQL
            if name in SQLITE_ONLY_FUNCTIONS or scalar_pair:
                failed[where] = f"{name}(): {sql[:100]}"
    assert failed == {}


def test_an_insert_whose_id_is_read_returns_it_on_postgresql(
    statements: dict[str, Sql],
) -> None:
    inserts = re.compile(r"^\s*INSERT INTO (" + "|".join(ID_TABLES) + r")\b")
    failed = [
        where
        for where, sql in statements.items()
        if inserts.match(sql)
        and "RETURNING" not in sql
        and sql.postgres_runs
        and sql.sqlite_runs
        and not (sql.returns_id and sql.postgres.rstrip().endswith("RETURNING id"))
    ]
    assert failed == []


def test_a_statement_written_once_differs_on_postgresql_only_in_its_markers() -> None:
    sql = Sql("SELECT id FROM entries WHERE source = ? AND topic != '5%'")
    assert sql == sql.sqlite == "SELECT id FROM entries WHERE source = ? AND topic != '5%'"
    assert sql.postgres == "SELECT id FROM entries WHERE source = %s AND topic != '5%%'"
    assert sql.written_once and sql.params is None and not sql.returns_id


def test_a_template_gives_each_form_the_filter_with_its_own_markers() -> None:
    template = Sql(
        "SELECT e.id FROM json_each(?) j JOIN entries e ON e.id = j.value WHERE {where}",
        "SELECT e.id FROM offload_ids(%s) j JOIN entries e ON e.id = j.value WHERE {where}",
    )
    sql = template.fill(where="e.scope = ?")
    assert sql.sqlite.endswith("WHERE e.scope = ?") and sql.postgres.endswith("e.scope = %s")
    assert sql.postgres.startswith("SELECT e.id FROM offload_ids(%s)")


def test_a_postgresql_connection_refuses_a_bare_string_and_a_statement_only_sqlite_runs() -> None:
    with pytest.raises(StoreError, match="PostgreSQL form"):
        pg_form("SELECT 1")  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="only SQLite runs"):
        pg_form(Sql.sqlite_only("SELECT rowid FROM search_body WHERE search_body MATCH ?"))
    sql = Sql("SELECT 1 WHERE ? = 1")
    assert pg_form(sql) is sql
