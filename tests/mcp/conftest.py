"""Fixtures for the MCP server tests (helpers live in ``mcp_support``).

``tests/mcp`` has no ``__init__.py`` on purpose: as a namespace directory it never shadows
the ``mcp`` SDK package. This directory goes on ``sys.path`` so tests can import
``mcp_support``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from mcp_support import McpEnv, make_settings

from offload.store.store import Store


@pytest.fixture
def env(tmp_path: Path) -> Iterator[McpEnv]:
    """A fresh project and store per test."""
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    home = tmp_path / "home"
    settings = make_settings(home)
    store = Store.open(settings)
    try:
        yield McpEnv(project, home, settings, store)
    finally:
        store.close()
