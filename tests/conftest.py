"""Shared fixtures. Keep each fixture small; real parts come from ``tests/realparts.py``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from realparts import LlamaServer, require_llama


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
