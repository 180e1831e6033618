"""Faults that must not cost a client its answer: odd upstreams, a locked store, bad text.

Real parts: upstreams as real stdio children (``raw_server.py`` speaks JSON-RPC by hand,
so it can answer wrongly), a real SQLite store locked by a second real connection.
"""

from __future__ import annotations

import sqlite3
import sys
from dataclasses import replace
from pathlib import Path

import anyio
import pytest
from catalog_server import SURROGATE_TEXT
from gateway_helpers import HERE, RunGateway, inproc_upstream, read_indexed, text_of

from mcp import Client
from offload.config import GatewaySettings, StoreSettings
from offload.gateway.config import GatewayConfig, ServerConfig
from offload.gateway.server import Gateway
from offload.store.store import Store

pytestmark = pytest.mark.anyio


def raw_upstream(mode: str) -> ServerConfig:
    return ServerConfig(
        name="raw", command=sys.executable, args=(str(HERE / "raw_server.py"), mode)
    )


async def test_an_invalid_tool_result_is_an_error_result_not_a_protocol_error(
    run_gateway: RunGateway,
) -> None:
    async with (
        run_gateway([raw_upstream("bad-result")]) as gw,
        Client(gw.server, mode="legacy") as client,
    ):
        for _ in range(2):
            result = await client.call_tool("raw__probe", {})
            assert result.is_error
            assert "upstream 'raw' answered probe with an invalid tool result" in text_of(result)
        assert gw.upstreams["raw"].state == "ready" and gw.upstreams["raw"].connects == 1


async def test_stray_lines_on_an_upstreams_stdout_do_not_break_its_connection(
    run_gateway: RunGateway,
) -> None:
    async with run_gateway([raw_upstream("banner")]) as gw, Client(gw.server, mode="legacy") as c:
        for _ in range(3):
            result = await c.call_tool("raw__probe", {})
            assert (result.is_error, text_of(result)) == (False, "ok")
        assert gw.upstreams["raw"].state == "ready" and gw.upstreams["raw"].connects == 1


async def test_an_upstream_that_never_answers_its_changed_tool_list_is_reconnected(
    run_gateway: RunGateway,
) -> None:
    # it says its tools changed, then never answers tools/list: the refresh is bounded by
    # the call timeout, so the connection is made again (and the gateway can stop)
    config = replace(raw_upstream("relist-hang"), timeout_s=0.5)
    async with run_gateway([config]) as gw, Client(gw.server, mode="legacy") as client:
        upstream = gw.upstreams["raw"]
        assert not (await client.call_tool("raw__probe", {})).is_error
        with anyio.fail_after(30):  # a ceiling: the wait ends on the reconnection
            while upstream.connects < 2:
                await anyio.sleep(0.05)
        assert not (await client.call_tool("raw__probe", {})).is_error


async def test_a_line_past_the_bound_is_dropped_as_it_arrives_and_the_answer_after_it_read(
    run_gateway: RunGateway,
) -> None:
    # 70 Mi characters without a line end: joined and re-split per 64 KB chunk it cost
    # minutes of the event loop's time and held the whole line; now it is dropped
    async with (
        run_gateway([raw_upstream("long-line")]) as gw,
        Client(gw.server, mode="legacy") as client,
    ):
        result = await client.call_tool("raw__probe", {})
        assert not result.is_error and text_of(result) == "after the long line"
        noise = gw.upstreams["raw"].noise
        assert "a line, a message of 73400320 bytes, was dropped: the limit is 67108864" in noise
        assert gw.upstreams["raw"].connects == 1


async def test_an_upstreams_error_message_reaches_the_client_as_one_short_inert_line(
    run_gateway: RunGateway,
) -> None:
    # an error is not a result, so it is never indexed: it was passed on whole and raw
    async with (
        run_gateway([raw_upstream("huge-error")]) as gw,
        Client(gw.server, mode="legacy") as client,
    ):
        result = await client.call_tool("raw__probe", {})
        text = text_of(result)
        assert result.is_error and text.startswith("upstream 'raw' refused probe: denied")
        assert len(text) < 4096 and "\n" not in text
        assert "</offload:body" not in text and "\u202e" not in text
        # its code is JSON-RPC's generic server error, which the SDK also uses for a closed
        # connection: the upstream's own error leaves the connection as it was
        assert gw.upstreams["raw"].state == "ready" and gw.upstreams["raw"].connects == 1


async def test_a_garbage_answer_gives_the_first_call_an_error_result_naming_it(
    run_gateway: RunGateway,
) -> None:
    async with (
        run_gateway([raw_upstream("garbage")], call_timeout_s=2.0) as gw,
        Client(gw.server, mode="legacy") as client,
    ):
        result = await client.call_tool("raw__probe", {})
        assert result.is_error
        text = text_of(result)
        assert "did not answer probe within 2s" in text and "not JSON-RPC" in text


async def test_a_lone_surrogate_in_a_large_response_is_stored_replaced_never_lost(
    run_gateway: RunGateway,
) -> None:
    servers = [inproc_upstream("cat", "server-memory.json", extras=True)]
    async with run_gateway(servers) as gw, Client(gw.server, mode="legacy") as client:
        result = await client.call_tool("cat__surrogate", {})
        placeholder = text_of(result)
        assert not result.is_error, placeholder
        assert "[1 lone surrogate(s) in the response were stored as U+FFFD]" in placeholder
        label = placeholder.split('indexed as "', 1)[1].split('"', 1)[0]
        expected = SURROGATE_TEXT.replace("\ud800", "\ufffd")
        assert await read_indexed(client, label) + "\n" == expected


async def test_a_locked_store_never_makes_a_healthy_upstream_unavailable(tmp_path: Path) -> None:
    store = Store(tmp_path / "offload.db", StoreSettings(busy_timeout_s=0.05))
    config, connect = inproc_upstream("gh", "github-mcp-server.json", extras=True)
    gateway = Gateway(GatewaySettings(), GatewayConfig((config,), {}), store, {"gh": connect})
    locker = sqlite3.connect(tmp_path / "offload.db", isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")  # another writer holds the lock past every retry
    try:
        async with anyio.create_task_group() as tg:
            await gateway.start(tg)
            try:
                async with Client(gateway.server, mode="legacy") as client:
                    await locked_then_released(gateway, client, locker)
            finally:
                gateway.stop()
    finally:
        locker.close()
        store.close()


async def locked_then_released(
    gateway: Gateway, client: Client, locker: sqlite3.Connection
) -> None:
    assert gateway.upstreams["gh"].state == "ready"
    assert gateway.plan(True, True).deferred  # its catalog documents could not be stored
    whole = text_of(await client.call_tool("gh__big_output", {"lines": 2000}))
    assert whole.count("\n") == 2000  # the output comes back whole, not as an error
    locker.execute("ROLLBACK")
    indexed = text_of(await client.call_tool("gh__big_output", {"lines": 2000}))
    assert indexed.startswith("[Response compressed")
    assert gateway.upstreams["gh"].state == "ready" and gateway.upstreams["gh"].connects == 1


async def test_an_upstream_listing_tools_without_end_is_cut_to_the_count_bound(
    run_gateway: RunGateway, caplog: pytest.LogCaptureFixture
) -> None:
    async with (
        run_gateway([raw_upstream("many-tools")], max_upstream_tools=150) as gw,
        Client(gw.server, mode="legacy") as client,
    ):
        upstream = gw.upstreams["raw"]
        # the first 150 as listed; no page asked for past the one that filled the count
        assert [t.name for t in upstream.tools] == [f"t{i:06d}" for i in range(150)]
        assert "kept 150 of at least 200 tools" in upstream.catalog_cut
        assert "max_upstream_tools is 150" in upstream.catalog_cut
        instructions = client.instructions or ""
        assert "catalogs cut" in instructions and "kept 150 of at least 200" in instructions
    assert any("kept 150 of" in r.getMessage() for r in caplog.records)


async def test_an_upstream_catalog_past_the_byte_bound_keeps_the_first_tools_that_fit(
    run_gateway: RunGateway,
) -> None:
    async with run_gateway([raw_upstream("huge-tools")], max_upstream_catalog_mb=1) as gw:
        upstream = gw.upstreams["raw"]
        kept = [t.name for t in upstream.tools]
        assert kept == [f"h{i:02d}" for i in range(len(kept))] and 8 <= len(kept) < 11
        assert f"kept {len(kept)} of 30 tools" in upstream.catalog_cut
        assert "max_upstream_catalog_mb (1 MiB" in upstream.catalog_cut
