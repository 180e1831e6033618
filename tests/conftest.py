"""Shared fixtures. Keep each fixture small; real parts come from ``tests/realparts.py``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from pgserver import PgServer, require_pg
from realparts import LlamaServer, require_llama
from serving import ScriptedUpstream

# Property tests run as in CI everywhere (hypothesis's own "ci" profile): derandomized, so
# the examples are the same in every run and no result depends on a seed; no deadline and no
# too-slow health check, since a loaded machine is not a failure; no example database, so a
# run never depends on what an earlier one left behind. Tests bound their own max_examples.
settings.load_profile("ci")


PG_FIXTURES = frozenset({"pg_server", "pg_database"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test on the session's PostgreSQL server slow.

    Starting the server and a database per test costs more than the rest of a test file;
    the whole suite (and CI) runs these, the fast tier does not. ``tryfirst`` so the mark
    is there before ``-m`` deselects.
    """
    for item in items:
        if PG_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """Run ``@pytest.mark.anyio`` tests on asyncio only."""
    return "asyncio"


@pytest.fixture(scope="session")
def start_llama(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[int], LlamaServer]]:
    """Factory: a started real llama.cpp server with the given n_ctx, one per size per session.

    Servers start lazily on first request and stop (by PID) at the end of the session.
    """
    servers: dict[int, LlamaServer] = {}
    log_dir: Path | None = None

    def start(n_ctx: int = 4096) -> LlamaServer:
        nonlocal log_dir
        model = require_llama()
        if n_ctx not in servers:
            if log_dir is None:
                log_dir = tmp_path_factory.mktemp("llama-logs")
            servers[n_ctx] = LlamaServer(model, n_ctx, log_dir=log_dir).start()
        return servers[n_ctx]

    try:
        yield start
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture(scope="session")
def llama_server(start_llama: Callable[[int], LlamaServer]) -> LlamaServer:
    """A started real llama.cpp server (SmolLM2-135M, n_ctx 4096), shared by the session."""
    return start_llama(4096)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A started real PostgreSQL server on a loopback port, shared by the session.

    Skips locally (fails under ``CI=true``) without the server binaries; stopped by PID and
    its temp dir removed at the end of the session, whatever happened.
    """
    server = PgServer(require_pg())
    try:
        yield server.start()
    finally:
        server.cleanup()


@pytest.fixture
def pg_database(pg_server: PgServer) -> Iterator[str]:
    """The ``postgresql://`` URL of a fresh empty database, dropped after the test."""
    url = pg_server.create_database()
    try:
        yield url
    finally:
        if pg_server.pid is not None:
            pg_server.drop_database(url.rsplit("/", 1)[1])


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """One store that several processes (or several ``Store`` objects standing for them)
    share: a SQLite file, or a PostgreSQL database (slow tier)."""
    if request.param == "postgresql":
        url: str = request.getfixturevalue("pg_database")
        return url
    return tmp_path / "shared.db"


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    """A scripted OpenAI-compatible upstream on loopback, one per test module (a module
    that needs another shape of upstream defines its own ``upstream``)."""
    server = ScriptedUpstream().start()
    try:
        yield server
    finally:
        server.stop()
