"""One message from an upstream is bounded: past ``[gateway] max_upstream_message_mb`` it is
dropped as it arrives, the call it answered gets a clear error at once, and the gateway
keeps serving (that upstream's connection and the others).

Real parts: hostile upstreams written by hand (no SDK on their side) as real stdio
children (``raw_server.py``) and real HTTP servers on 127.0.0.1 (``raw_http_server.py``),
the gateway reached with the SDK's client; ``offload gateway`` as a real process for its
peak memory.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import pytest
from gateway_helpers import HERE, RawHttp, RunGateway, eventually, text_of
from mcp.client.stdio import StdioServerParameters, stdio_client

from mcp import Client
from offload.gateway.config import ServerConfig
from offload.store.store import Store
from realparts import child_env

pytestmark = pytest.mark.anyio

_LIMIT = "the limit is 8388608 bytes ([gateway] max_upstream_message_mb)"


def raw(name: str, mode: str, mib: int = 0) -> ServerConfig:
    args = (str(HERE / "raw_server.py"), mode, *([str(mib)] if mib else []))
    return ServerConfig(name=name, command=sys.executable, args=args)


@pytest.mark.parametrize("mode", ["huge-result", "huge-result-tail"])
async def test_a_stdio_answer_past_the_bound_ends_its_call_at_once_with_an_error_naming_it(
    run_gateway: RunGateway, mode: str
) -> None:
    # 40 MiB on a bound of 8: dropped as it arrives; its id (first as the Python SDK
    # writes it, last as the TypeScript SDK does) answers the call, not the timeout
    servers = [raw("big", mode, 40), raw("ok", "plain")]
    async with (
        run_gateway(servers, max_upstream_message_mb=8, call_timeout_s=600) as gw,
        Client(gw.server, mode="legacy") as client,
    ):
        result = await client.call_tool("big__probe", {})
        text = text_of(result)
        assert result.is_error
        assert text.startswith(
            "upstream 'big' answered probe, but its answer, a message of 41943"
        ), text
        assert _LIMIT in text and "\n" not in text
        assert not (await client.call_tool("ok__probe", {})).is_error
        again = await client.call_tool("big__probe", {})  # the same connection still answers
        assert again.is_error and _LIMIT in text_of(again)
        assert gw.upstreams["big"].state == "ready" and gw.upstreams["big"].connects == 1


async def test_a_listing_past_the_bound_makes_its_upstream_unavailable_saying_why(
    run_gateway: RunGateway,
) -> None:
    servers = [raw("big", "huge-list", 40), raw("ok", "plain")]
    async with (
        run_gateway(servers, max_upstream_message_mb=8, reconnect_max_s=60) as gw,
        Client(gw.server, mode="legacy") as client,
    ):
        big = gw.upstreams["big"]
        assert big.state == "unavailable" and _LIMIT in big.error, big.error
        assert "\n" not in big.error
        assert not (await client.call_tool("ok__probe", {})).is_error


async def test_an_answer_within_the_bound_is_read_whole(run_gateway: RunGateway) -> None:
    async with (
        run_gateway([raw("big", "huge-result", 3)], max_upstream_message_mb=8) as gw,
        Client(gw.server, mode="legacy") as client,
    ):
        result = await client.call_tool("big__probe", {})
        assert not result.is_error
        assert text_of(result).startswith("[Response compressed — 3145728 bytes")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["json", "sse", "gzip"])
async def test_an_http_answer_past_the_bound_is_an_error_and_the_connection_stays(
    run_gateway: RunGateway, raw_http: list[RawHttp], tmp_path: Path, mode: str
) -> None:
    # the SDK read a JSON answer whole however long, and took an event past its own
    # 1 MiB bound for a lost connection (the upstream reconnected)
    raw_http.append(big := RawHttp(tmp_path, mode, 40))
    servers = [ServerConfig(name="big", url=big.url), raw("ok", "plain")]
    async with (
        run_gateway(servers, max_upstream_message_mb=8, call_timeout_s=600) as gw,
        Client(gw.server, mode="legacy") as client,
    ):
        assert gw.upstreams["big"].state == "ready", gw.upstreams["big"].error
        for _ in range(2):
            result = await client.call_tool("big__probe", {})
            text = text_of(result)
            assert result.is_error and text.startswith("upstream 'big' answered probe, but its"), (
                text
            )
            assert "8388608 bytes ([gateway] max_upstream_message_mb)" in text, text
        assert not (await client.call_tool("ok__probe", {})).is_error
        assert gw.upstreams["big"].state == "ready" and gw.upstreams["big"].connects == 1


@pytest.mark.parametrize("mode", ["gzip-cut", "gzip"])
async def test_a_gzip_answer_cut_before_its_check_is_an_error_and_nothing_is_stored(
    run_gateway: RunGateway, raw_http: list[RawHttp], tmp_path: Path, mode: str
) -> None:
    # a member without its trailer inflated whole and was taken as the answer (and the
    # 1 MiB of it indexed), though nothing vouched for a byte of it
    raw_http.append(peer := RawHttp(tmp_path, mode, 1))
    async with (
        run_gateway([ServerConfig(name="peer", url=peer.url)], call_timeout_s=60) as gw,
        Client(gw.server, mode="legacy") as client,
    ):
        assert gw.upstreams["peer"].state == "ready", gw.upstreams["peer"].error
        result = await client.call_tool("peer__probe", {})
        text = text_of(result)
        if mode == "gzip":  # the same answer whole: read, indexed
            assert not result.is_error and text.startswith("[Response compressed"), text
            return
        assert result.is_error and "\n" not in text, text
        assert "cut off: the body ended inside a gzip member" in text, text
        assert gw.upstreams["peer"].state == "ready"
    with Store(tmp_path / "offload.db") as store:
        assert store.count() == 0


async def test_a_notification_stream_killed_by_an_event_past_the_bound_is_heard_again(
    run_gateway: RunGateway,
    raw_http: list[RawHttp],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # two events of 2 MiB on a bound of 1: the MCP SDK tries the stream twice, then stops
    # listening; the gateway reconnects, lists the upstream's tools again and listens anew
    raw_http.append(hostile := RawHttp(tmp_path, "notify", 2))
    caplog.set_level(logging.WARNING, logger="offload.gateway")
    servers = [ServerConfig(name="big", url=hostile.url)]
    async with (
        run_gateway(servers, max_upstream_message_mb=1, reconnect_max_s=0.5) as gw,
    ):
        big = gw.upstreams["big"]

        async def heard_again() -> bool:
            names = {t.name for t in big.tools}
            return big.connects >= 2 and big.state == "ready" and "fresh" in names

        await eventually(heard_again, 30, "the upstream reconnected with its new tool listed")
    said = [r.getMessage() for r in caplog.records if "notification stream" in r.getMessage()]
    assert said and "stopped listening" in said[0], said
    assert "1048576 bytes ([gateway] max_upstream_message_mb)" in said[0], said


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["json", "sse"])
async def test_an_http_answer_of_a_few_mib_within_the_bound_is_read_whole(
    run_gateway: RunGateway, raw_http: list[RawHttp], tmp_path: Path, mode: str
) -> None:
    raw_http.append(big := RawHttp(tmp_path, mode, 3))  # past the SDK's 1 MiB event bound
    async with (
        run_gateway([ServerConfig(name="big", url=big.url)]) as gw,
        Client(gw.server, mode="legacy") as client,
    ):
        result = await client.call_tool("big__probe", {})
        assert not result.is_error, text_of(result)
        assert text_of(result).startswith("[Response compressed — 3145728 bytes")


def _peak_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return int(next(x for x in status if x.startswith("VmHWM:")).split()[1]) / 1024


def _gateway_pid(parent: int) -> int:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat, cmd = (entry / "stat").read_text(), (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"offload.cli.main" in cmd:
                return int(entry.name)
    raise AssertionError("no offload gateway process")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["stdio", "json"])
async def test_a_300_mib_answer_costs_the_gateway_memory_of_the_bound_not_of_the_answer(
    raw_http: list[RawHttp], tmp_path: Path, kind: str
) -> None:
    # before: a 300 MiB JSON answer was read whole and parsed (the gateway's peak RSS rose
    # by gigabytes); a stdio line was held up to 64 Mi characters, and its call waited
    # for the timeout
    if kind == "stdio":
        table = f"command = {sys.executable!r}\nargs = {json.dumps(raw('b', 'huge-result', 300).args)}\n"
    else:
        raw_http.append(big := RawHttp(tmp_path, "json", 300))
        table = f"url = {big.url!r}\n"
    config = tmp_path / "gateway.toml"
    config.write_text(
        f"[gateway]\nmax_upstream_message_mb = 8\ncall_timeout_s = 600\n\n[servers.big]\n{table}"
    )
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "offload.cli.main", "gateway", "--config", str(config)],
        env=child_env(tmp_path / "home"),
    )
    async with Client(stdio_client(params), mode="legacy") as client:
        pid = _gateway_pid(os.getpid())
        before = _peak_mb(pid)
        result = await client.call_tool("big__probe", {})
        grown = _peak_mb(pid) - before
    assert result.is_error and _LIMIT in text_of(result)
    assert grown < 100, f"the gateway's peak RSS grew by {grown:.0f} MB"
