"""Helpers for gateway tests: upstream configs over real catalogs, a gateway runner."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from offload.config import GatewaySettings
from offload.gateway.config import GatewayConfig, ServerConfig
from offload.gateway.server import Gateway
from offload.store.store import Store

HERE = Path(__file__).parent
CATALOGS = Path("/work/shared/data/catalogs")
CATALOG_SERVER = HERE / "catalog_server.py"
PEERS = HERE.parent / "peers" / "node_modules" / ".bin"


def catalog_upstream(name: str, catalog: str, *extra: str, **fields: Any) -> ServerConfig:
    """A :class:`ServerConfig` running ``catalog_server.py`` over a catalog file."""
    return ServerConfig(
        name=name,
        command=sys.executable,
        args=(str(CATALOG_SERVER), str(CATALOGS / catalog), "--name", name, *extra),
        **fields,
    )


RunGateway = Callable[..., AbstractAsyncContextManager[Gateway]]


def gateway_runner(tmp_path: Path) -> RunGateway:
    """Factory: ``async with run(servers, clients={}, **settings) as gw``."""

    @asynccontextmanager
    async def run(
        servers: list[ServerConfig], clients: dict[str, Any] | None = None, **settings: Any
    ) -> AsyncIterator[Gateway]:
        defaults: dict[str, Any] = {"connect_timeout_s": 20.0, "call_timeout_s": 10.0}
        defaults.update(settings)
        store = Store(tmp_path / "offload.db")
        gateway = Gateway(
            GatewaySettings(**defaults), GatewayConfig(tuple(servers), clients or {}), store
        )
        async with anyio.create_task_group() as tg:
            await gateway.start(tg)
            try:
                yield gateway
            finally:
                gateway.stop()
        store.close()

    return run
