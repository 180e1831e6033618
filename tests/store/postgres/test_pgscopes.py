"""A PostgreSQL role held to its scopes by row-level security: through offload and through
raw SQL it neither sees, changes nor deletes another scope's rows."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from offload.core.hashing import text_hash
from offload.core.tokens import EstimateCounter
from offload.errors import InvalidInput, NotFound, RowRefused
from offload.store.store import Store
from pgserver import PgServer

pytestmark = pytest.mark.slow

SETUP = """
CREATE ROLE {db}_owner NOLOGIN;
CREATE ROLE {db}_a LOGIN;
CREATE ROLE {db}_b LOGIN;
CREATE DATABASE {db} OWNER {db}_owner;
GRANT CONNECT ON DATABASE {db} TO {db}_a, {db}_b
"""
IN_DB = """
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO {db}_a, {db}_b;
ALTER DEFAULT PRIVILEGES FOR ROLE {db}_owner IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {db}_a, {db}_b;
ALTER DEFAULT PRIVILEGES FOR ROLE {db}_owner IN SCHEMA public
    GRANT USAGE, SELECT ON SEQUENCES TO {db}_a, {db}_b
"""
SECRET = "team a's payroll figures: 4242\n"


def team(pg_server: PgServer, db: str) -> tuple[str, str, str]:
    """docs/team-store.md's least-privilege setup with two machine roles: the owner's URL
    (an administrator acting as the owner), team a's and team b's."""
    for statement in SETUP.format(db=db).strip().split(";\n"):
        pg_server.execute(statement)
    for statement in IN_DB.format(db=db).strip().split(";\n"):
        pg_server.execute(statement, dbname=db)
    url = pg_server.url(db)
    owner = url + f"?options=-c%20role%3D{db}_owner"
    return owner, url.replace("postgres@", f"{db}_a@"), url.replace("postgres@", f"{db}_b@")


def test_a_role_held_to_its_scope_cannot_reach_another_scopes_rows_even_with_raw_sql(
    pg_server: PgServer,
) -> None:
    owner, url_a, url_b = team(pg_server, "rls")
    with Store(owner, counter=EstimateCounter()) as admin:
        admin.restrict_role("rls_b", ["teamB"])
        assert admin.restricted_roles() == {"rls_b": ["teamB"]}
    with Store(url_a, counter=EstimateCounter()) as a:  # not held to scopes: sees all
        secret = a.put(SECRET, scope="teamA", topic="payroll", label="payroll").entry
        common = a.put("a text both teams hold\n", scope="teamA").entry
        a.forget(a.put("team a's old draft\n", scope="teamA").entry.full_ref, scope="teamA")
    with psycopg.connect(url_b, autocommit=True) as raw:
        assert raw.execute("SELECT count(*) FROM entries").fetchone() == (0,)
        assert raw.execute("SELECT count(*) FROM blocks").fetchone() == (0,)
        assert raw.execute("SELECT count(*) FROM labels").fetchone() == (0,)
        assert raw.execute("SELECT count(*) FROM search_meta").fetchone() == (0,)
        assert raw.execute("SELECT count(*) FROM scope_stats").fetchone() == (0,)
        assert raw.execute("SELECT count(*) FROM tombstones").fetchone() == (0,)
        assert raw.execute("SELECT count(*) FROM entry_vectors").fetchone() == (0,)
        assert raw.execute("UPDATE entries SET topic = 'x'").rowcount == 0
        assert raw.execute("DELETE FROM entries").rowcount == 0
        assert raw.execute("DELETE FROM blocks").rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # its own grants: no
            raw.execute("DELETE FROM offload_scope_grants")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # a row in teamA: no
            raw.execute(
                "INSERT INTO entries (kind, tokens, content_hash, block_hash, scope, created,"
                " accessed) VALUES ('text', 1, 'x', %s, 'teamA', 0, 0)",
                (common.block_hash,),
            )
    with Store(url_b, counter=EstimateCounter()) as b:
        # the same content in its own scope shares the block; forgetting it keeps team a's
        mine = b.put("a text both teams hold\n", scope="teamB").entry
        b.put_many(["a text both teams hold\n", "team b's own batch\n"], scope="teamB")
        for ref in (f"#{secret.id}", secret.full_ref, "payroll"):
            with pytest.raises(NotFound):
                b.resolve(ref)  # every scope asked for: team a's is still not there
        assert [h.entry.scope for h in b.search("payroll figures")] == []
        assert b.count() == 2 and b.peek()["entries"] == 2
        b.forget(mine.full_ref, scope="teamB")
    with Store(url_a, counter=EstimateCounter()) as a:
        assert a.read(secret.full_ref, "teamA") == SECRET
        assert a.read(common.full_ref, "teamA") == "a text both teams hold\n"
        assert a.resolve(f"#{secret.id}").topic == "payroll"
    with Store(owner, counter=EstimateCounter()) as admin:
        assert admin.unrestrict_role("rls_b") == 1
    with psycopg.connect(url_b, autocommit=True) as raw:
        assert raw.execute("SELECT count(*) FROM entries").fetchone() == (3,)
    assert text_hash(SECRET) == secret.content_hash


DOC = Path(__file__).resolve().parents[3] / "docs" / "team-store.md"


def doc_sql(prefix: str) -> tuple[list[str], list[str]]:
    """docs/team-store.md's SQL as written, its role and database names given ``prefix``
    (roles are the whole server's): the statements run on the server, then those run in
    the new database (after its ``\\c``)."""
    text = DOC.read_text(encoding="utf-8")
    sql = "\n".join(re.findall(r"```sql\n(.*?)```", text, flags=re.S))
    sql = re.sub(r"--[^\n]*", "", sql).replace("'…'", "'pw'")
    sql = sql.replace("offload_owner", f"{prefix}_owner").replace("team_b", f"{prefix}_b")
    sql = re.sub(r"\boffload\b", prefix, sql)
    server, _, in_db = sql.partition(f"\\c {prefix}\n")
    return statements(server), statements(in_db)


def statements(sql: str) -> list[str]:
    return [st.strip() for st in sql.split(";") if st.strip()]


def test_the_docs_restricted_role_writing_another_scope_is_told_its_scopes_in_one_line(
    pg_server: PgServer, tmp_path: Path
) -> None:
    on_server, in_db = doc_sql("rlsdoc")
    # the team's login, as the doc makes it (a role is the server's, made from any database)
    assert any("IN ROLE rlsdoc" in st for st in in_db)
    for statement in on_server:
        pg_server.execute(statement)
    for statement in in_db:
        pg_server.execute(statement, dbname="rlsdoc")
    url = pg_server.url("rlsdoc")
    with Store(url + "?options=-c%20role%3Drlsdoc_owner", counter=EstimateCounter()) as admin:
        admin.restrict_role("rlsdoc_b", ["teamB", "common"])
        admin.put("team a's note\n", scope="teamA", label="a-note")
    url_b = url.replace("postgres@", "rlsdoc_b@")
    where = url_b  # no password in it: shown as is
    with Store(url_b, counter=EstimateCounter()) as b:
        assert b.put("team b's note\n", scope="teamB").created
        for put in (
            lambda: b.put("into a\n", scope="teamA"),
            lambda: b.put_many(["one\n", "two\n"], scope="teamA"),
        ):
            with pytest.raises(RowRefused) as refused:
                put()
            assert str(refused.value) == (
                f"store at {where}: role rlsdoc_b may not write scope teamA "
                "(it is held to: common, teamB); nothing was saved"
            )
        with pytest.raises(
            RowRefused,
            match=r"held to: common, teamB\) may not write this: "
            r"the label is another scope's",
        ):
            b.put("b wants a's label\n", scope="teamB", label="a-note")
        assert b.count() == 1
    env = {"OFFLOAD_HOME": str(tmp_path), "OFFLOAD_STORE__URL": url_b, "PATH": ""}
    added = subprocess.run(
        [sys.executable, "-m", "offload.cli.main", "add", "--scope", "teamA", "x"],
        env={**env, "OFFLOAD_SEARCH__SEMANTIC": "false"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert added.returncode == 5
    assert added.stderr == (
        f"offload add: error: store at {where}: role rlsdoc_b may not write scope teamA "
        "(it is held to: common, teamB); nothing was saved\n"
    )


def test_restricting_a_role_is_a_command_that_names_what_it_did(
    pg_server: PgServer, tmp_path: Path
) -> None:
    owner, _url_a, _url_b = team(pg_server, "rlscli")
    env = {"OFFLOAD_HOME": str(tmp_path), "OFFLOAD_STORE__URL": owner, "PATH": ""}

    def offload(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "offload.cli.main", "store", *argv],
            env={**env, "OFFLOAD_SEARCH__SEMANTIC": "false"},
            capture_output=True,
            text=True,
            timeout=120,
        )

    done = offload("restrict", "rlscli_b", "--scope", "teamB", "--scope", "common")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "role rlscli_b is held to scope(s) common, teamB\n"
    assert offload("roles").stdout == "rlscli_b: common, teamB\n"
    missing = offload("restrict", "nobody", "--scope", "x")
    assert missing.returncode == 2 and "no role named 'nobody'" in missing.stderr
    assert offload("unrestrict", "rlscli_b").returncode == 0
    assert offload("roles").stdout == "no role is held to scopes\n"


def test_a_sqlite_store_says_restricting_roles_needs_postgresql(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as store, pytest.raises(InvalidInput, match="PostgreSQL"):
        store.restrict_role("anyone", ["x"])
