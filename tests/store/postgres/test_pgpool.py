"""Opening a PostgreSQL store's connections."""

from __future__ import annotations

import sys

import pytest

from cli.cli_support import run
from offload.errors import StoreError
from offload.store.postgres.pgpool import open_pool


def test_a_missing_driver_is_one_error_naming_the_extra_that_installs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if it were not installed
    with pytest.raises(StoreError, match=r"pip install 'offload\[postgres\]'"):
        open_pool("postgresql://nobody@127.0.0.1:1/db", max_size=1, timeout_s=1.0)


def test_the_cli_on_a_postgresql_url_without_the_driver_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.setenv("OFFLOAD_STORE__URL", "postgresql://nobody@127.0.0.1:1/db")
    code, _out, err = run(capsys, "ls")
    assert code == 5 and err.count("\n") == 1 and "offload[postgres]" in err, err
