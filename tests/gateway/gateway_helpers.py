"""Helpers for gateway tests: upstream configs over real catalogs, a gateway runner."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import mcp_types as types

from mcp import Client
from offload.config import GatewaySettings
from offload.gateway.config import GatewayConfig, ServerConfig
from offload.gateway.server import Gateway
from offload.gateway.toolsearch import Encoder
from offload.gateway.upstreams import Connector, MessageHandler
from offload.store.store import Store
from realparts import CATALOGS, stop_process, wait_until

HERE = Path(__file__).parent
CATALOG_SERVER = HERE / "catalog_server.py"
PEERS = HERE.parent / "peers" / "node_modules" / ".bin"
_MORE = re.compile(r'\[\d+ more lines? — continue with offset="(\d+)"\]')


async def eventually(
    call: Callable[[], Coroutine[Any, Any, bool]], timeout: float, what: str
) -> None:
    """``wait_until`` from a worker thread, its predicate run on the event loop."""
    await anyio.to_thread.run_sync(
        lambda: wait_until(lambda: anyio.from_thread.run(call), timeout, interval=0.1, what=what)
    )


def text_of(result: types.CallToolResult) -> str:
    """The text of a tool result's first content block."""
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def read_indexed(client: Client, label: str) -> str:
    """Page ``IndexRead`` from the first line to the end; the lines joined by newlines."""
    rows: list[str] = []
    offset: str | None = "1"
    while offset is not None:
        page = text_of(await client.call_tool("IndexRead", {"label": label, "offset": offset}))
        lines = page.split("\n")
        tail = _MORE.fullmatch(lines[-1])
        rows.extend(row.split("\t", 1)[1] for row in (lines[1:-1] if tail else lines[1:]))
        offset = tail.group(1) if tail else None
    return "\n".join(rows)


def catalog_upstream(name: str, catalog: str, *extra: str, **fields: Any) -> ServerConfig:
    """A :class:`ServerConfig` running ``catalog_server.py`` over a catalog file."""
    return ServerConfig(
        name=name,
        command=sys.executable,
        args=(str(CATALOG_SERVER), str(CATALOGS / catalog), "--name", name, *extra),
        **fields,
    )


def inproc_upstream(
    name: str,
    catalog: str,
    *,
    extras: bool = False,
    instructions: str = "",
    resources: int = 0,
    prompts: int = 0,
) -> tuple[ServerConfig, Connector]:
    """The same catalog server, connected in-process (no subprocess start-up cost)."""
    from catalog_server import build

    server = build(CATALOGS / catalog, name, instructions, extras, resources, prompts)

    def connect(handler: MessageHandler) -> Client:
        return Client(server, mode="legacy", message_handler=handler)

    return ServerConfig(name=name, command="(in-process)"), connect


RunGateway = Callable[..., AbstractAsyncContextManager[Gateway]]


def gateway_runner(tmp_path: Path) -> RunGateway:
    """Factory: ``async with run(servers, clients={}, tool_encoder=None, **settings) as gw``."""

    @asynccontextmanager
    async def run(
        servers: list[ServerConfig | tuple[ServerConfig, Connector]],
        clients: dict[str, Any] | None = None,
        tool_encoder: Encoder | None = None,
        **settings: Any,
    ) -> AsyncIterator[Gateway]:
        defaults: dict[str, Any] = {"connect_timeout_s": 20.0, "call_timeout_s": 10.0}
        defaults.update(settings)
        store = Store(tmp_path / "offload.db")
        configs = [s[0] if isinstance(s, tuple) else s for s in servers]
        connectors = {s[0].name: s[1] for s in servers if isinstance(s, tuple)}
        gateway = Gateway(
            GatewaySettings(**defaults),
            GatewayConfig(tuple(configs), clients or {}),
            store,
            connectors,
            tool_encoder,
        )
        async with anyio.create_task_group() as tg:
            await gateway.start(tg)
            try:
                yield gateway
            finally:
                gateway.stop()
        store.close()

    return run


class RawHttp:
    """``raw_http_server.py`` (a hostile Streamable HTTP upstream) on a loopback port of
    the system's choosing, killed by PID."""

    def __init__(self, tmp_path: Path, mode: str, mib: int) -> None:
        port_file = tmp_path / f"port-{mode}-{mib}"
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "raw_http_server.py"), mode, str(mib), str(port_file)]
        )
        wait_until(port_file.exists, 30, what="the raw HTTP upstream to listen")
        self.url = f"http://127.0.0.1:{port_file.read_text()}/mcp"

    def stop(self) -> None:
        stop_process(self.proc, 5)
