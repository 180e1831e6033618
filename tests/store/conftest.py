"""Fixtures for store tests: a fresh store in a temporary directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from offload.core.tokens import EstimateCounter
from offload.store.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A store in its own directory; the estimate counter keeps tests fast."""
    with Store(tmp_path / "offload.db", counter=EstimateCounter()) as s:
        yield s
