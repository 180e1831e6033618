"""The least-privilege setup of docs/team-store.md works: an owner role holds the schema,
the machines' role reads and writes rows and can change nothing else."""

from __future__ import annotations

import psycopg
import pytest

from offload.core.tokens import EstimateCounter
from offload.errors import StoreError
from offload.store.store import Store
from pgserver import PgServer

pytestmark = pytest.mark.slow

SETUP = """
CREATE ROLE {owner} NOLOGIN;
CREATE ROLE {user} LOGIN;
CREATE DATABASE {db} OWNER {owner};
REVOKE ALL ON DATABASE {db} FROM PUBLIC;
GRANT CONNECT ON DATABASE {db} TO {user};
"""
IN_DB = """
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO {user};
ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {user};
ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA public
    GRANT USAGE, SELECT ON SEQUENCES TO {user};
"""


def team(pg_server: PgServer, prefix: str) -> tuple[str, str]:
    """The documented setup under names starting with ``prefix``: (the administrator's URL
    acting as the owner, the machines' URL)."""
    names = {"owner": f"{prefix}_owner", "user": f"{prefix}_agent", "db": f"{prefix}_store"}
    for statement in SETUP.format(**names).strip().split(";\n"):
        pg_server.execute(statement)
    for statement in IN_DB.format(**names).strip().split(";\n"):
        pg_server.execute(statement, dbname=names["db"])
    url = pg_server.url(names["db"])
    admin = url + f"?options=-c%20role%3D{names['owner']}"
    return admin, url.replace("postgres@", f"{names['user']}@")


def test_the_machines_role_uses_a_store_the_owner_created_and_cannot_alter_it(
    pg_server: PgServer,
) -> None:
    admin, agent = team(pg_server, "team")
    # the schema is created once by an administrator acting as the owner
    with Store(admin, counter=EstimateCounter()) as owner_store:
        owner_store.put("created by the owner\n", scope="p")
    with Store(agent, counter=EstimateCounter()) as store:
        ref = store.put("written by an agent\n", scope="p", label="note").entry.ref
        assert store.read(ref, "p") == "written by an agent\n"
        assert [h.entry.ref for h in store.search("agent", scope="p")] == [ref]
        store.forget(ref, reason="done", scope="p")
        assert store.next_number("gateway-run:x") == 1
        assert store.put_state("proxy.session", "s", {"turn": 1}) == 1
        assert store.put_state("proxy.session", "s", {"turn": 2}) == 2
    with (
        psycopg.connect(agent, autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("DROP TABLE entries")
    with (
        psycopg.connect(agent, autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("CREATE TABLE intruder (x int)")


def test_the_machines_role_on_a_store_not_created_yet_is_told_to_use_the_owner(
    pg_server: PgServer,
) -> None:
    _admin, agent = team(pg_server, "fresh")
    with pytest.raises(StoreError, match=r"needs migrating .*open it once as the schema's owner"):
        Store(agent, counter=EstimateCounter())
    rows = pg_server.execute(
        "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", dbname="fresh_store"
    )
    assert int(rows[0][0]) == 0  # nothing was created
