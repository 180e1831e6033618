"""A team store's password comes from a password file (``PGPASSFILE``) or libpq's
environment as well as from the URL, and never reaches offload's output or errors."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgserver import PgServer, require_pg
from realparts import child_env, wait_until

pytestmark = pytest.mark.slow

PASSWORD = "hunter2-sesame"


@pytest.fixture(scope="module")
def password_server() -> Iterator[PgServer]:
    """A private server where the role ``agent`` must give its password (scram-sha-256)."""
    import psycopg

    server = PgServer(require_pg())
    try:
        server.start()
        hba = server.data_dir / "pg_hba.conf"
        hba.write_text("host all agent 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        server.execute(f"CREATE ROLE agent LOGIN PASSWORD '{PASSWORD}'")
        server.execute("CREATE DATABASE team OWNER agent")
        server.execute("SELECT pg_reload_conf()")

        def password_required() -> bool:
            try:
                psycopg.connect(agent_url(server), connect_timeout=5, password="wrong").close()
            except psycopg.OperationalError:
                return True
            return False

        wait_until(password_required, 30, what="the server to ask agent for a password")
        yield server
    finally:
        server.cleanup()


def agent_url(server: PgServer) -> str:
    return f"postgresql://agent@127.0.0.1:{server.port}/team"


def offload(tmp: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "offload.cli.main", *args],
        env=child_env(tmp / "home", {"OFFLOAD_SEARCH__SEMANTIC": "false", **env}),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def passfile(tmp: Path, server: PgServer, password: str) -> Path:
    path = tmp / "pgpass"
    path.write_text(f"127.0.0.1:{server.port}:team:agent:{password}\n")
    path.chmod(0o600)  # libpq ignores a password file others can read
    return path


def test_a_password_file_logs_the_machine_in(password_server: PgServer, tmp_path: Path) -> None:
    env = {
        "OFFLOAD_STORE__URL": agent_url(password_server),
        "PGPASSFILE": str(passfile(tmp_path, password_server, PASSWORD)),
    }
    added = offload(tmp_path, env, "add", "--scope", "s", "--label", "n", "stored by agent\n")
    assert added.returncode == 0, added.stderr
    read = offload(tmp_path, env, "cat", "n", "--scope", "s")
    assert read.returncode == 0 and "stored by agent" in read.stdout
    shown = offload(tmp_path, env, "config", "show")
    assert PASSWORD not in shown.stdout + shown.stderr


def test_a_password_from_the_environment_logs_the_machine_in(
    password_server: PgServer, tmp_path: Path
) -> None:
    env = {"OFFLOAD_STORE__URL": agent_url(password_server), "PGPASSWORD": PASSWORD}
    added = offload(tmp_path, env, "add", "--scope", "s", "from the environment\n")
    assert added.returncode == 0, added.stderr


def test_a_wrong_password_is_one_line_exit_5_naming_no_password(
    password_server: PgServer, tmp_path: Path
) -> None:
    url = agent_url(password_server).replace("agent@", "agent:not-the-password@")
    done = offload(tmp_path, {"OFFLOAD_STORE__URL": url}, "add", "--scope", "s", "refused\n")
    assert done.returncode == 5
    assert done.stderr.count("\n") == 1 and "password authentication failed" in done.stderr
    assert "not-the-password" not in done.stderr + done.stdout
    assert "agent:***@127.0.0.1" in done.stderr
