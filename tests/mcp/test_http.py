"""End to end over Streamable HTTP: a real ``offload mcp --http`` on a loopback port;
foreign Origin and Host headers are refused, the optional bearer token is enforced."""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import httpx2
import pytest
from e2e_support import HttpServer
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_support import McpEnv

import loopback
from realparts import MCP_INIT

pytestmark = pytest.mark.slow

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def post(url: str, **headers: str) -> httpx.Response:
    return loopback.post(url, json=MCP_INIT, headers={**HEADERS, **headers}, timeout=10)


@asynccontextmanager
async def http_client(url: str, token: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http)) as c,
    ):
        yield c


@pytest.mark.anyio
async def test_tools_work_over_streamable_http_on_loopback(env: McpEnv) -> None:
    with HttpServer(env.project, env.home) as server:
        async with http_client(server.url) as c:
            assert len((await c.list_tools()).tools) == 19
            res = await c.call_tool("offload", {"content": "over http", "topic": "http topic"})
            assert not res.is_error
            peek = await c.call_tool("peek", {})
            assert "1 entry" in peek.content[0].text  # type: ignore[union-attr]
            matrix = await c.read_resource("offload://matrix")
            assert "http topic" in matrix.contents[0].text  # type: ignore[union-attr]


def test_a_foreign_origin_or_host_is_refused_and_loopback_origins_pass(env: McpEnv) -> None:
    with HttpServer(env.project, env.home) as server:
        assert post(server.url, Origin="http://evil.example").status_code == 403
        assert post(server.url, Origin="http://127.0.0.1.evil.example:80").status_code == 403
        assert post(server.url, Host="evil.example").status_code == 421
        assert post(server.url, Origin=f"http://localhost:{server.port}").status_code == 200
        assert post(server.url).status_code == 200


@pytest.mark.anyio
async def test_a_configured_bearer_token_is_required(env: McpEnv) -> None:
    extra = {"OFFLOAD_MCP__BEARER_TOKEN": "s3cret-token"}
    with HttpServer(env.project, env.home, extra) as server:
        missing = post(server.url)
        assert missing.status_code == 401
        assert "bearer token" in missing.json()["error"]
        assert missing.headers["www-authenticate"].startswith("Bearer")
        assert post(server.url, Authorization="Bearer wrong").status_code == 401
        assert post(server.url, Authorization="Bearer s3cret-token").status_code == 200
        async with http_client(server.url, "s3cret-token") as c:
            assert "0 entries" in (await c.call_tool("peek", {})).content[0].text  # type: ignore[union-attr]


def varied_text(lines: int) -> str:
    """Deterministic prose-like text with many distinct identifiers (costly to gist and index)."""
    rng = random.Random(7)
    alphabet = "abcdefghijklmnopqrstuvwxyzABC_"
    words = ["".join(rng.choices(alphabet, k=rng.randint(3, 12))) for _ in range(5000)]
    return "\n".join(" ".join(rng.choices(words, k=12)) for _ in range(lines))


@pytest.mark.anyio
async def test_a_large_offload_call_does_not_hold_up_other_requests(env: McpEnv) -> None:
    content = varied_text(40_000)  # ~4 MB: gist, hashing, zstd and indexing take seconds
    latencies: list[float] = []
    answered_during = 0
    with HttpServer(env.project, env.home) as server:
        async with http_client(server.url) as big, http_client(server.url) as other:
            done = anyio.Event()

            async def probe() -> None:
                nonlocal answered_during
                while not done.is_set():
                    start = time.perf_counter()
                    assert len((await other.list_tools()).tools) == 19
                    latencies.append(time.perf_counter() - start)
                    answered_during += not done.is_set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(probe)
                start = time.perf_counter()
                res = await big.call_tool("offload", {"content": content})
                big_s = time.perf_counter() - start
                done.set()
    assert not res.is_error, res.content
    # A blocked event loop answers nothing while the call works, then everything at once.
    assert answered_during >= 3, (answered_during, big_s)
    assert max(latencies) < big_s / 3, (max(latencies), big_s)


@pytest.mark.anyio
async def test_a_big_offload_path_reports_progress_over_streamable_http(env: McpEnv) -> None:
    # past the size from which a put is analysed and written a window at a time (1 MiB)
    env.write("big.log", "".join(f"line {i}: parseConfig read {i * 7}\n" for i in range(60_000)))
    heard: list[tuple[float, float | None, str | None]] = []

    async def hear(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))

    with HttpServer(env.project, env.home) as server:
        async with http_client(server.url) as c:
            res = await c.call_tool("offload_path", {"path": "big.log"}, progress_callback=hear)
            assert not res.is_error
    progress = [p for p, _, _ in heard]
    assert heard and progress == sorted(set(progress))
    assert (heard[0][2] or "").startswith("analysing ")
    assert heard[-1][0] == heard[-1][1] and (heard[-1][2] or "").startswith("writing 100%")
