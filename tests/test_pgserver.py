"""The real PostgreSQL server the tests use (tests/pgserver.py) behaves as the tests assume."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgserver import PgServer, kill_hard, private_server, require_pg

# starts and restarts real PostgreSQL servers: the whole suite runs it, not the fast tier
pytestmark = pytest.mark.slow


def _query(url: str, sql: str) -> list[tuple[object, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        cur = conn.execute(sql.encode())
        return cur.fetchall() if cur.description is not None else []


@pytest.fixture
def own_server() -> Iterator[PgServer]:
    """A private server, for tests that stop or crash it (the session's one stays up)."""
    with private_server() as server:
        yield server


def test_the_session_server_answers_on_a_loopback_url(pg_server: PgServer) -> None:
    url = pg_server.url()
    assert url.startswith("postgresql://postgres@127.0.0.1:")
    rows = _query(url, "SELECT current_setting('listen_addresses'), current_user, version()")
    listen, user, version = rows[0]
    assert listen == "127.0.0.1"
    assert user == "postgres"
    assert str(version).startswith("PostgreSQL ")


def test_the_server_process_never_runs_as_root(pg_server: PgServer) -> None:
    assert pg_server.pid is not None
    uid = os.stat(f"/proc/{pg_server.pid}").st_uid
    assert uid != 0 or os.geteuid() != 0


def test_each_fresh_database_starts_empty_and_isolated(
    pg_database: str, pg_server: PgServer
) -> None:
    _query(pg_database, "CREATE TABLE t (x int)")
    _query(pg_database, "INSERT INTO t VALUES (1)")
    other = pg_server.create_database()
    try:
        tables = _query(other, "SELECT count(*) FROM pg_tables WHERE tablename = 't'")
        assert tables == [(0,)]
    finally:
        pg_server.drop_database(other.rsplit("/", 1)[1])
    assert _query(pg_database, "SELECT x FROM t") == [(1,)]


def test_a_database_copied_from_a_template_carries_its_tables(pg_server: PgServer) -> None:
    template = pg_server.create_database()
    name = template.rsplit("/", 1)[1]
    _query(template, "CREATE TABLE schema_version (v int); INSERT INTO schema_version VALUES (7)")
    copy = pg_server.create_database(template=name)
    try:
        assert _query(copy, "SELECT v FROM schema_version") == [(7,)]
    finally:
        pg_server.drop_database(copy.rsplit("/", 1)[1])
        pg_server.drop_database(name)


def test_a_database_name_that_is_not_a_plain_identifier_is_refused(pg_server: PgServer) -> None:
    with pytest.raises(ValueError, match="plain database name"):
        pg_server.create_database('x"; DROP DATABASE postgres; --')


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_a_restart_keeps_committed_rows_and_the_url(own_server: PgServer, mode: str) -> None:
    import psycopg

    url = own_server.create_database()
    _query(url, "CREATE TABLE t (x int); INSERT INTO t VALUES (1), (2)")
    pid = own_server.pid
    own_server.stop(mode)
    assert own_server.pid is None
    with pytest.raises(psycopg.OperationalError):
        _query(url, "SELECT 1")
    own_server.start()
    assert own_server.pid not in (None, pid)
    assert _query(url, "SELECT x FROM t ORDER BY x") == [(1,), (2,)]


WRITER = textwrap.dedent(
    """
    import sys, psycopg
    conn = psycopg.connect(sys.argv[1])
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    conn.execute("INSERT INTO t VALUES (2)")  # left open: the kill lands mid-transaction
    print("in-transaction", flush=True)
    sys.stdin.read()
    """
)


@pytest.mark.slow
def test_a_writer_killed_mid_transaction_leaves_only_its_committed_rows(
    pg_database: str,
) -> None:
    _query(pg_database, "CREATE TABLE t (x int)")
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, pg_database],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"in-transaction\n"
        assert kill_hard(proc) == -9
    finally:
        if proc.poll() is None:
            kill_hard(proc)
    assert _query(pg_database, "SELECT x FROM t") == [(1,)]


@pytest.mark.slow
def test_cleanup_stops_the_server_by_pid_and_removes_its_directory() -> None:
    server = PgServer(require_pg()).start()
    pid, base = server.pid, server.base_dir
    assert pid is not None
    server.cleanup()
    assert not Path(f"/proc/{pid}").exists()
    assert not base.exists()
