"""``offload store migrate --to URL``: a SQLite store copied into PostgreSQL, verified."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli.cli_support import run
from offload.core.tokens import EstimateCounter
from offload.store.store import Store
from realparts import child_env


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OFFLOAD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OFFLOAD_SEARCH__SEMANTIC", "false")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


def test_migrate_copies_a_sqlite_store_into_postgresql_and_verifies_it(
    home: Path, pg_database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for text in ("the frobnicator threshold is 42\n", "a second entry\n" * 30):
        assert run(capsys, "add", "--scope", "p", text)[0] == 0
    assert run(capsys, "add", "--scope", "p", "--label", "named", "a labelled one\n")[0] == 0
    code, out, _ = run(capsys, "store", "migrate", "--to", pg_database, "--json")
    assert code == 0, out
    report = json.loads(out)
    assert (report["entries"], report["added"], report["blocks_verified"]) == (3, 3, 3)
    with Store(pg_database, counter=EstimateCounter()) as team:
        assert team.read("named", "p") == "a labelled one\n"
        hits = team.search("frobnicator threshold", scope="p")
        assert [team.body(h.entry) for h in hits][:1] == ["the frobnicator threshold is 42\n"]
    again = json.loads(run(capsys, "store", "migrate", "--to", pg_database, "--json")[1])
    assert (again["entries"], again["added"]) == (3, 0)


def test_migrate_copies_a_postgresql_store_back_into_a_sqlite_file(
    home: Path,
    pg_database: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OFFLOAD_STORE__URL", pg_database)
    assert run(capsys, "add", "--scope", "p", "--label", "back", "kept on the server\n")[0] == 0
    target = tmp_path / "local" / "offload.db"
    target.parent.mkdir()  # a SQLite target's directory must exist (a typo makes none)
    code, out, _ = run(capsys, "store", "migrate", "--to", f"sqlite://{target}", "--json")
    assert code == 0, out
    assert json.loads(out)["added"] == 1
    with Store(target, counter=EstimateCounter()) as local:
        assert local.read("back", "p") == "kept on the server\n"


def test_migrating_a_store_onto_itself_is_refused_and_changes_nothing(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "add", "one entry\n")[0] == 0
    code, _, err = run(capsys, "store", "migrate", "--to", f"sqlite://{home / 'offload.db'}")
    assert code == 2 and "is the store being migrated" in err


def test_a_sqlite_target_in_a_directory_that_is_not_there_is_refused_and_nothing_made(
    home: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert run(capsys, "add", "one entry\n")[0] == 0
    missing = tmp_path / "no-such-dir" / "deeper"
    code, _, err = run(capsys, "store", "migrate", "--to", f"sqlite://{missing / 'x.db'}")
    assert code == 2 and f"no directory {missing}" in err
    assert not (tmp_path / "no-such-dir").exists()


@pytest.mark.slow
def test_an_unreachable_target_is_exit_5_in_one_line_without_the_password(
    tmp_path: Path,
) -> None:
    from realparts import free_port

    url = f"postgresql://offload:hunter2@127.0.0.1:{free_port()}/nowhere?connect_timeout=2"
    env = child_env(tmp_path / "home", {"OFFLOAD_STORE__BUSY_TIMEOUT_S": "3"})
    subprocess.run(
        [sys.executable, "-m", "offload.cli.main", "add", "x\n"],
        env=env,
        check=True,
        capture_output=True,
    )
    done = subprocess.run(
        [sys.executable, "-m", "offload.cli.main", "store", "migrate", "--to", url],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 5
    assert "hunter2" not in done.stderr + done.stdout
    assert "offload:***@127.0.0.1" in done.stderr
