"""Fixtures for store tests: a fresh store on each backend.

Every test that takes ``store`` (or ``store_location``) runs twice: on a SQLite file in a
temporary directory, and on a fresh database of the session's real PostgreSQL server
(``pg_database``, tests/conftest.py), with or without the embedding model. Tests of file-level behaviour (WAL, a full disk, the
SQLite schema itself) are marked ``sqlite_only`` and run on SQLite alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from offload.config import SearchSettings
from offload.core.tokens import EstimateCounter
from offload.llm.embedding import StaticEmbedder, load_embedder
from offload.store.store import Store


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each store test on both backends (SQLite alone for ``sqlite_only`` tests)."""
    if "store_backend" in metafunc.fixturenames:
        only = metafunc.definition.get_closest_marker("sqlite_only") is not None
        # the PostgreSQL runs need the server and double the store tests: the whole suite
        # (and CI) runs them; the fast tier stays on SQLite
        on_pg = pytest.param("postgresql", marks=pytest.mark.slow)
        metafunc.parametrize("store_backend", ["sqlite"] if only else ["sqlite", on_pg])


@pytest.fixture
def store_location(
    store_backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Path | str:
    """Where a fresh store lives: a SQLite file, or a fresh PostgreSQL database's URL."""
    if store_backend == "postgresql":
        url: str = request.getfixturevalue("pg_database")
        return url
    return tmp_path / "offload.db"


@pytest.fixture
def store(store_location: Path | str) -> Iterator[Store]:
    """A fresh store on the test's backend; the estimate counter keeps tests fast."""
    with Store(store_location, counter=EstimateCounter()) as s:
        yield s


@pytest.fixture(scope="session")
def model() -> StaticEmbedder:
    """The static embedding model, loaded once for every store test that embeds."""
    loaded = load_embedder(SearchSettings())
    assert loaded is not None, "wordllama is a main dependency: it must be installed"
    assert isinstance(loaded, StaticEmbedder)  # the default model
    return loaded


@pytest.fixture
def path(tmp_path: Path) -> Path:
    """Where a test's store file goes."""
    return tmp_path / "offload.db"


@pytest.fixture
def hybrid(path: Path, model: StaticEmbedder) -> Iterator[Store]:
    """A store at ``path`` that embeds what it stores (lexical and semantic search)."""
    with Store(path, counter=EstimateCounter(), embedder=model) as s:
        yield s
