"""The gateway end to end over real stdio upstreams, with the SDK's client in-process."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import anyio
import mcp_types as types
import numpy as np
import pytest
from gateway_helpers import RunGateway, catalog_upstream, inproc_upstream, read_indexed, text_of
from numpy.typing import NDArray

from mcp import Client
from offload.config import load_settings
from offload.gateway.config import ServerConfig
from offload.gateway.server import Gateway
from offload.gateway.toolsearch import ToolIndex
from offload.gateway.toolvectors import NAMESPACE, USERS
from offload.gateway.upstreams import Connector, MessageHandler
from offload.mcp.context import McpContext
from offload.mcp.server import build_server
from offload.store.store import Store
from realparts import wait_until

pytestmark = pytest.mark.anyio


@pytest.mark.slow  # two real upstream MCP server processes (~5 s of CPU)
async def test_small_catalogs_pass_through_with_server_prefixed_names(
    run_gateway: RunGateway,
) -> None:
    servers = [
        catalog_upstream("git", "mcp-server-git.json"),
        catalog_upstream("mem", "server-memory.json"),
    ]
    async with run_gateway(servers) as gw, Client(gw.server, mode="legacy") as client:
        names = [t.name for t in (await client.list_tools()).tools]
        assert "git__git_status" in names and "mem__create_entities" in names
        assert names[-2:] == ["IndexSearch", "IndexRead"]  # nothing deferred: no call_tool
        result = await client.call_tool("git__git_status", {"repo_path": "/x"})
        assert json.loads(text_of(result)) == {
            "arguments": {"repo_path": "/x"},
            "tool": "git_status",
        }


async def test_a_large_response_is_indexed_and_reads_back_exactly(run_gateway: RunGateway) -> None:
    servers = [inproc_upstream("cat", "server-memory.json", extras=True)]
    async with run_gateway(servers) as gw, Client(gw.server, mode="legacy") as client:
        result = await client.call_tool("cat__big_output", {"lines": 2000})
        placeholder = text_of(result)
        match = re.match(
            r'\[Response compressed — (\d+) bytes, 2000 lines, indexed as "(cat__big_output:\d+)"\]',
            placeholder,
        )
        assert match, placeholder[:200]
        label = match.group(2)
        assert "[… preview ends at line" in placeholder
        assert f'To read all of it: IndexRead(label="{label}", limit=2000), about 2 calls' in (
            placeholder
        )
        assert f'IndexSearch(queries=["..."], source="{label}")' in placeholder
        expected = "".join(
            f"line {i:05d}: the quick brown fox jumps over the lazy dog\n" for i in range(1, 2001)
        )
        assert await read_indexed(client, label) + "\n" == expected
        hits = text_of(
            await client.call_tool("IndexSearch", {"queries": ["line 01234"], "source": label})
        )
        assert "01234" in hits and label in hits


async def test_errors_and_small_responses_are_never_compressed(run_gateway: RunGateway) -> None:
    servers = [inproc_upstream("cat", "server-memory.json", extras=True)]
    async with run_gateway(servers) as gw, Client(gw.server, mode="legacy") as client:
        failed = await client.call_tool("cat__fail", {})
        assert failed.is_error and text_of(failed).startswith("error detail")
        small = await client.call_tool("cat__big_output", {"lines": 10})
        assert text_of(small).startswith("line 00001")


@pytest.mark.slow  # a real upstream MCP server process, crashed and started again (~4 s of CPU)
async def test_a_crashed_upstream_reports_clearly_and_reconnects(run_gateway: RunGateway) -> None:
    servers = [
        catalog_upstream("flaky", "server-memory.json", "--extras"),
        inproc_upstream("steady", "mcp-server-git.json"),
    ]
    async with (
        run_gateway(servers, call_timeout_s=2.0) as gw,
        Client(gw.server, mode="legacy") as client,
    ):
        crashed = await client.call_tool("flaky__crash", {})
        assert crashed.is_error and "failed during crash" in text_of(crashed)
        steady = await client.call_tool("steady__git_status", {"repo_path": "/r"})
        assert not steady.is_error
        with anyio.fail_after(15):
            while gw.upstreams["flaky"].connects < 2 or gw.upstreams["flaky"].state != "ready":
                await anyio.sleep(0.05)
        again = await client.call_tool("flaky__big_output", {"lines": 3})
        assert text_of(again).startswith("line 00001")


async def test_a_hanging_upstream_times_out(run_gateway: RunGateway) -> None:
    config, connect = inproc_upstream("slow", "server-memory.json", extras=True)
    servers = [(replace(config, timeout_s=0.5), connect)]
    async with run_gateway(servers) as gw, Client(gw.server, mode="legacy") as client:
        with anyio.fail_after(60):  # a ceiling: the wait ends on the event
            result = await client.call_tool("slow__hang", {})
        assert result.is_error and "did not answer hang within 0.5s" in text_of(result)


async def test_an_upstream_that_never_starts_is_listed_unavailable(run_gateway: RunGateway) -> None:
    from offload.gateway.config import ServerConfig

    servers = [
        ServerConfig(name="ghost", command="/nonexistent/mcp-server"),
        inproc_upstream("git", "mcp-server-git.json"),
    ]
    async with run_gateway(servers) as gw, Client(gw.server, mode="legacy") as client:
        assert "ghost" in (client.instructions or "") and "Unavailable" in (
            client.instructions or ""
        )
        names = [t.name for t in (await client.list_tools()).tools]
        assert "git__git_log" in names
        result = await client.call_tool("ghost__anything", {})
        assert result.is_error and "ghost" in text_of(result)


async def test_the_read_all_call_reads_every_line_in_the_calls_it_names(
    run_gateway: RunGateway,
) -> None:
    servers = [inproc_upstream("cat", "server-memory.json", extras=True)]
    async with run_gateway(servers) as gw, Client(gw.server, mode="legacy") as client:
        placeholder = text_of(await client.call_tool("cat__big_output", {"lines": 1800}))
        call = re.search(
            r'To read all of it: IndexRead\(label="([^"]+)", limit=(\d+)\), about (\d+) calls',
            placeholder,
        )
        assert call, placeholder[-600:]
        label, limit, calls = call.group(1), int(call.group(2)), int(call.group(3))
        rows: list[str] = []
        offset: str | None = "1"
        made = 0
        while offset is not None and made < 10:
            args = {"label": label, "offset": offset, "limit": limit}
            page = text_of(await client.call_tool("IndexRead", args)).split("\n")
            made += 1
            more = re.fullmatch(r'\[\d+ more lines? — continue with offset="(\d+)"\]', page[-1])
            rows.extend(page[1:-1] if more else page[1:])
            offset = more.group(1) if more else None
        assert (made, len(rows), limit) == (calls, 1800, 1800)


async def test_two_gateways_on_one_store_add_their_calls_instead_of_overwriting(
    run_gateway: RunGateway, tmp_path: Path
) -> None:
    # both read the saved count (none) at start, then each saves a batch of 50 calls and
    # the rest on stop: written back as totals, one gateway's save erased the other's calls
    servers = [inproc_upstream("git", "mcp-server-git.json")]
    async with (
        run_gateway(servers) as a,
        run_gateway(servers) as b,
        Client(a.server, mode="legacy") as ca,
        Client(b.server, mode="legacy") as cb,
    ):
        for client, calls in ((ca, 53), (cb, 51)):
            for _ in range(calls):
                await client.call_tool("git__git_status", {"repo_path": "/x"})
        assert b.usage == {"git": 50 + 51}  # a's saved batch and all of its own
    with Store(tmp_path / "offload.db") as store:  # the gateways' store, both stopped
        assert store.tallies("gateway-usage")["calls"] == {"git": 53 + 51}


class Letters:
    """A deterministic stand-in for the contextual tool encoder: letter counts."""

    model_id = "letters"

    def __init__(self) -> None:
        self.embedded = 0

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.embedded += len(texts)
        out = np.ones((len(texts), 26), dtype=np.float32)
        for i, text in enumerate(texts):
            for ch in text.lower():
                if "a" <= ch <= "z":
                    out[i, ord(ch) - 97] += 1
        unit: NDArray[np.float32] = out / np.linalg.norm(out, axis=1, keepdims=True)
        return unit


async def test_a_contextual_tool_encoder_upgrades_the_tool_index_after_the_start(
    run_gateway: RunGateway,
) -> None:
    encoder = Letters()
    servers = [inproc_upstream("git", "mcp-server-git.json")]
    async with run_gateway(servers, tool_encoder=encoder, catalog_threshold=1) as gw:
        first = gw.tool_index
        assert first is not None and first.docs  # searchable from the start
        wait_until(lambda: gw.tool_index is not None and gw.tool_index.strong is encoder, 30)
        upgraded = gw.tool_index
        assert upgraded is not None and upgraded.docs == first.docs
        assert upgraded.search("git_log", 1)[0][0].key == "git__git_log"


async def test_without_a_tool_encoder_the_tool_index_stays_as_built(
    run_gateway: RunGateway,
) -> None:
    servers = [inproc_upstream("git", "mcp-server-git.json")]
    async with run_gateway(servers, catalog_threshold=1) as gw:
        assert gw.tool_index is not None and gw.tool_index.strong is None


def upgraded(gw: Gateway, encoder: Letters) -> bool:
    return gw.tool_index is not None and gw.tool_index.strong is encoder


async def test_a_restarted_gateway_reads_its_tool_vectors_back_from_the_store(
    run_gateway: RunGateway,
) -> None:
    servers = [inproc_upstream("git", "mcp-server-git.json")]
    for run in range(2):
        encoder = Letters()
        async with run_gateway(servers, tool_encoder=encoder, catalog_threshold=1) as gw:
            wait_until(partial(upgraded, gw, encoder), 30)
            # the first run embeds the tools' views; the second reads them from the store
            assert (encoder.embedded > 0) == (run == 0)


async def test_a_running_gateway_records_the_tool_vectors_it_uses_and_releases_them_on_stop(
    run_gateway: RunGateway, tmp_path: Path
) -> None:
    servers = [inproc_upstream("git", "mcp-server-git.json")]
    encoder = Letters()
    async with run_gateway(servers, tool_encoder=encoder, catalog_threshold=1) as gw:
        wait_until(partial(upgraded, gw, encoder), 30)
        (record,) = [v for _, v in gw.store.state_items(f"{USERS}:letters")]
        saved = {k for k, _ in gw.store.state_items(f"{NAMESPACE}:letters")}
        assert saved and set(record["keys"]) == saved
    with Store(tmp_path / "offload.db") as store:
        assert not list(store.state_items(f"{USERS}:letters"))


async def test_a_starting_gateway_plans_its_catalog_once_not_once_per_upstream(
    run_gateway: RunGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    refreshes: list[bool] = []
    real = Gateway.refresh_catalog

    async def counted(self: Gateway, *, notify: bool = True) -> None:
        refreshes.append(notify)
        await real(self, notify=notify)

    monkeypatch.setattr(Gateway, "refresh_catalog", counted)
    servers = [
        inproc_upstream("git", "mcp-server-git.json"),
        inproc_upstream("memory", "server-memory.json"),
        inproc_upstream("github", "github-mcp-server.json", resources=2, prompts=1),
    ]
    async with run_gateway(servers, catalog_threshold=1) as gw:
        assert gw.tool_index is not None
        assert {d.key.split("__")[0] for d in gw.tool_index.docs} >= {"git", "memory", "github"}
        assert len(refreshes) == 1  # every upstream ready before it: one plan, at the start
        # a change once started re-plans as before
        await gw._on_upstream_change(gw.upstreams["git"], "tools")
        assert len(refreshes) == 2


class Held(Letters):
    """Letters whose first call waits until released (an embedding still running)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            self.release.wait(60)
        return super().encode(texts)


async def test_catalog_changes_during_an_embedding_embed_only_the_newest_catalog_after_it(
    run_gateway: RunGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[int] = []
    real = ToolIndex.with_strong

    def counted(self: ToolIndex, *args: Any, **kwargs: Any) -> ToolIndex:
        built.append(len(self.docs))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ToolIndex, "with_strong", counted)
    encoder = Held()
    servers = [inproc_upstream("git", "mcp-server-git.json")]
    async with run_gateway(servers, tool_encoder=encoder, catalog_threshold=1) as gw:
        try:
            wait_until(encoder.entered.is_set, 60, what="the first embedding")
            await gw.refresh_catalog()  # two changes while it runs
            await gw.refresh_catalog()
            newest = gw.tool_index
            assert newest is not None
        finally:
            encoder.release.set()
        wait_until(lambda: gw.tool_index is not None and gw.tool_index.strong is encoder, 60)
        assert gw.tool_index is not None and gw.tool_index.docs == newest.docs
        assert len(built) == 2  # the running one and the newest, not the one between


def offload_upstream(name: str, store: Store, tmp_path: Path) -> tuple[ServerConfig, Connector]:
    """offload's own MCP server (``offload mcp``), connected in-process."""
    settings = load_settings(env={"OFFLOAD_HOME": str(tmp_path)}, flags={"mcp.scope": "inner"})
    server = build_server(McpContext.build(settings, store, tmp_path))

    def connect(handler: MessageHandler) -> Client:
        return Client(server, mode="legacy", message_handler=handler)

    return ServerConfig(name=name, command="(in-process)"), connect


async def test_the_read_call_an_inner_offload_servers_hit_names_works_by_its_bare_name(
    run_gateway: RunGateway, tmp_path: Path
) -> None:
    inner_store = Store(tmp_path / "inner.db")
    servers = [
        offload_upstream("inner", inner_store, tmp_path),
        inproc_upstream("git", "mcp-server-git.json"),
    ]
    try:
        async with run_gateway(servers) as gw, Client(gw.server, mode="legacy") as client:
            body = "the quokka calibration log\nline two of the quokka log\n"
            stored = await client.call_tool("inner__offload", {"content": body, "topic": "quokka"})
            assert not stored.is_error
            found = text_of(await client.call_tool("inner__search", {"queries": ["quokka"]}))
            hint = re.search(r"\[open a hit: read\((.+?)\); summary", found)
            assert hint, found
            args = {k: json.loads(v) for k, v in re.findall(r'(\w+)=("[^"]*"|[^,\s]+)', hint[1])}
            opened = await client.call_tool("read", args)  # as the hint says, no server__
            assert not opened.is_error, text_of(opened)
            assert "line two of the quokka log" in text_of(opened)
    finally:
        inner_store.close()


async def test_a_bare_name_calls_the_one_server_that_has_it_and_is_refused_when_two_have_it(
    run_gateway: RunGateway,
) -> None:
    servers = [
        inproc_upstream("git", "mcp-server-git.json"),
        inproc_upstream("a", "server-memory.json"),
        inproc_upstream("b", "server-memory.json"),
    ]
    async with run_gateway(servers) as gw, Client(gw.server, mode="legacy") as client:
        one = await client.call_tool("git_status", {"repo_path": "/x"})
        assert not one.is_error, text_of(one)
        assert json.loads(text_of(one)) == {"arguments": {"repo_path": "/x"}, "tool": "git_status"}
        both = await client.call_tool("create_entities", {"entities": []})
        assert both.is_error
        assert "a__create_entities, b__create_entities" in text_of(both)
        none = await client.call_tool("no_such_tool", {})
        assert none.is_error and "unknown tool 'no_such_tool'" in text_of(none)


class _GatedTool(types.Tool):
    """A tool definition whose serialisation (what planning a catalog does to each one)
    waits for the test to say go: if planning held the event loop, the test could not."""

    entered: ClassVar[threading.Event] = threading.Event()
    go: ClassVar[threading.Event] = threading.Event()
    waited_out: ClassVar[list[str]] = []

    def model_dump(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.entered.set()
        if not self.go.wait(5):
            self.waited_out.append(self.name)
            self.go.set()  # one wait shows it; the rest need not wait too
        return super().model_dump(*args, **kwargs)


async def test_a_catalog_is_planned_off_the_event_loop(run_gateway: RunGateway) -> None:
    # tens of thousands of tools take seconds to plan; offload serve answers every other
    # surface on this loop meanwhile
    async with run_gateway([inproc_upstream("git", "mcp-server-git.json")]) as gw:
        upstream = gw.upstreams["git"]
        upstream.tools = [_GatedTool.model_validate(t.model_dump()) for t in upstream.tools]
        async with anyio.create_task_group() as tg:
            tg.start_soon(gw.refresh_catalog)
            # returns on a worker thread; the loop runs this coroutine on only if it is free
            assert await anyio.to_thread.run_sync(_GatedTool.entered.wait, 30)
            _GatedTool.go.set()
    assert _GatedTool.waited_out == []
    assert "git__git_log" in [t.name for t in gw.plan(False, True).tools]
