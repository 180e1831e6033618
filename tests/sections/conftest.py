"""Fixtures for the sections library: a store in a temporary home, a generated workspace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from offload.config import Settings, load_settings
from offload.sections import Sections


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Default settings with the store in a fresh temporary directory."""
    return load_settings(flags={"store.home": str(tmp_path / "home")})


@pytest.fixture
def sections(settings: Settings) -> Iterator[Sections]:
    """A ``Sections`` over a fresh store, closed afterwards."""
    with Sections(settings) as s:
        yield s
