"""Fixtures for store tests: a fresh store in a temporary directory, with or without the
embedding model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from offload.config import SearchSettings
from offload.core.tokens import EstimateCounter
from offload.llm.embedding import StaticEmbedder, load_embedder
from offload.store.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A store in its own directory; the estimate counter keeps tests fast."""
    with Store(tmp_path / "offload.db", counter=EstimateCounter()) as s:
        yield s


@pytest.fixture(scope="session")
def model() -> StaticEmbedder:
    """The static embedding model, loaded once for every store test that embeds."""
    loaded = load_embedder(SearchSettings())
    assert loaded is not None, "wordllama is a main dependency: it must be installed"
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
