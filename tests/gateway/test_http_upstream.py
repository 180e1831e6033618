"""An upstream reached over Streamable HTTP: ``offload mcp --http`` in its own process.

The gateway runs in-process and is reached with the SDK's client; the upstream is a real
HTTP MCP server on 127.0.0.1, killed by PID and restarted on the same port to check that
the gateway reports the loss clearly, keeps serving the others and reconnects.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from gateway_helpers import (
    RawHttp,
    RunGateway,
    eventually,
    inproc_upstream,
    read_indexed,
    text_of,
)
from mcp_types import Implementation

from mcp import Client
from offload.core.fence import neutralise
from offload.gateway.config import ClientRule, ServerConfig
from realparts import free_port, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

_NONCE = re.compile(r"offload:body:[0-9a-f]{24}")


class HttpMem:
    """``offload mcp --http`` on a fixed loopback port, started and killed by PID."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.home = workdir / "home"
        self.log = workdir / "mem-http.log"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.command = (sys.executable, "-m", "offload.cli.main", "mcp", "--http")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def listening(self) -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def start(self) -> None:
        # a second start would orphan the first process (and fail to bind its port)
        assert self.proc is None, f"already running as PID {self.proc.pid}"
        env = {"PATH": os.environ["PATH"], "HOME": str(self.home), "OFFLOAD_HOME": str(self.home)}
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*self.command, "--port", str(self.port), "--scope", "http-test"],
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        proc = self.proc

        def up() -> bool:
            assert proc.poll() is None, self.log.read_text(errors="replace")[-2000:]
            return self.listening()

        wait_until(up, 60, interval=0.05, what=f"offload mcp --http on port {self.port}")

    def kill(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None


@pytest.fixture
def mem_http(tmp_path: Path) -> Iterator[HttpMem]:
    server = HttpMem(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()


async def offload(client: Client, content: str) -> str:
    """Store ``content`` through the gateway; its ref."""
    stored = text_of(await client.call_tool("mem__offload", {"content": content}))
    match = re.match(r"stored: (\S+) \|", stored)
    assert match, stored
    return match.group(1)


async def test_a_large_response_from_an_http_upstream_is_indexed_and_reads_back_exactly(
    run_gateway: RunGateway, mem_http: HttpMem
) -> None:
    servers = [ServerConfig(name="mem", url=mem_http.url)]
    clients = {"raw": ClientRule(index_responses=False)}
    content = "".join(f"{i:05d} the widget frobnicator turns {i % 7} times\n" for i in range(3000))
    async with run_gateway(servers, clients=clients) as gw:
        assert gw.upstreams["mem"].state == "ready", gw.upstreams["mem"].error
        async with Client(gw.server, mode="legacy") as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"mem__peek", "mem__offload", "mem__retrieve", "IndexRead"} <= names
            ref = await offload(client, content)
            result = await client.call_tool("mem__retrieve", {"ref": ref})
            placeholder = text_of(result)
            match = re.match(
                r'\[Response compressed — \d+ bytes, \d+ lines, indexed as "(mem__retrieve:\d+)"\]',
                placeholder,
            )
            assert match, placeholder[:300]
            label = match.group(1)
            paged = await read_indexed(client, label)
        assert content in paged
        # the same call for a client with indexing off: identical but for the fence nonce
        async with Client(
            gw.server, mode="legacy", client_info=Implementation(name="raw", version="1")
        ) as raw:
            direct = text_of(await raw.call_tool("mem__retrieve", {"ref": ref}))
        # ... and IndexRead shows stored lines inert: the upstream's own fence tags defused
        assert _NONCE.sub("NONCE", paged) == _NONCE.sub("NONCE", neutralise(direct))


async def test_a_killed_http_upstream_fails_clearly_and_reconnects_after_restart(
    run_gateway: RunGateway, mem_http: HttpMem
) -> None:
    servers = [
        ServerConfig(name="mem", url=mem_http.url),
        inproc_upstream("steady", "mcp-server-git.json"),
    ]
    async with (
        run_gateway(servers, call_timeout_s=5.0, reconnect_max_s=0.5) as gw,
        Client(gw.server, mode="legacy") as client,
    ):
        ref = await offload(client, "kept across restarts")
        assert not (await client.call_tool("mem__peek", {})).is_error

        mem_http.kill()
        with anyio.fail_after(10):
            failed = await client.call_tool("mem__peek", {})
        assert failed.is_error
        assert "upstream 'mem'" in text_of(failed), text_of(failed)
        steady = await client.call_tool("steady__git_status", {"repo_path": "/r"})
        assert not steady.is_error

        await anyio.to_thread.run_sync(mem_http.start)

        async def peek_works() -> bool:
            return not (await client.call_tool("mem__peek", {})).is_error

        await eventually(peek_works, 30, "mem__peek to succeed after the restart")
        back = text_of(await client.call_tool("mem__retrieve", {"ref": ref}))
        assert "kept across restarts" in back
        assert gw.upstreams["mem"].connects >= 2


async def test_an_http_upstream_that_no_longer_knows_the_session_gets_a_new_one(
    run_gateway: RunGateway, raw_http: list[RawHttp], tmp_path: Path
) -> None:
    # its first call answered 404, as a restarted server answers an unknown session id
    raw_http.append(forgetful := RawHttp(tmp_path, "forget", 1))
    servers = [ServerConfig(name="f", url=forgetful.url)]
    async with (
        run_gateway(servers, call_timeout_s=5.0, reconnect_max_s=0.5) as gw,
        Client(gw.server, mode="legacy") as client,
    ):
        stale = await client.call_tool("f__probe", {})
        assert stale.is_error
        assert "upstream 'f' no longer knows this session" in text_of(stale), text_of(stale)

        async def answers_again() -> bool:
            result = await client.call_tool("f__probe", {})
            return not result.is_error and text_of(result) == "again"

        await eventually(answers_again, 30, "f__probe to answer on a new session")
        assert gw.upstreams["f"].connects == 2


async def test_an_http_upstream_restarted_between_calls_gets_a_new_session(
    run_gateway: RunGateway, mem_http: HttpMem
) -> None:
    servers = [ServerConfig(name="mem", url=mem_http.url)]
    async with (
        run_gateway(servers, call_timeout_s=5.0, reconnect_max_s=0.5) as gw,
        Client(gw.server, mode="legacy") as client,
    ):
        ref = await offload(client, "kept across restarts")
        # killed and back on the same port before any call: the old session id is unknown;
        # the call says so, or the gateway heard it first (its notification stream failed)
        mem_http.kill()
        await anyio.to_thread.run_sync(mem_http.start)
        stale = await client.call_tool("mem__peek", {})
        if stale.is_error:
            said = text_of(stale)
            assert "no longer knows this session" in said or "is unavailable" in said, said

        async def retrieve_works() -> bool:
            result = await client.call_tool("mem__retrieve", {"ref": ref})
            return not result.is_error and "kept across restarts" in text_of(result)

        await eventually(retrieve_works, 30, "mem__retrieve to succeed on a new session")
        assert gw.upstreams["mem"].connects >= 2
