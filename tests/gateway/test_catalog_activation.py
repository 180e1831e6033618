"""Catalog compression over GitHub's real catalog: deferral, search, activation, call_tool."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from gateway_helpers import RunGateway, inproc_upstream, text_of

from mcp import Client
from offload.config import GatewaySettings, SearchSettings
from offload.gateway.catalog import wire_size
from offload.gateway.config import GatewayConfig
from offload.gateway.server import Gateway
from offload.llm.embedding import load_embedder
from offload.store.store import Store

pytestmark = pytest.mark.anyio


def servers() -> list[Any]:
    return [
        inproc_upstream("github", "github-mcp-server.json"),
        inproc_upstream("git", "mcp-server-git.json"),
    ]


async def test_the_github_catalog_is_deferred_and_the_listing_fits_the_threshold(
    run_gateway: RunGateway,
) -> None:
    async with run_gateway(servers()) as gw, Client(gw.server, mode="legacy") as client:
        tools = (await client.list_tools()).tools
        names = [t.name for t in tools]
        assert not any(n.startswith("github__") for n in names)
        assert "git__git_log" in names and names[-3:] == ["IndexSearch", "IndexRead", "call_tool"]
        instructions = client.instructions or ""
        assert "github: 117 tools" in instructions
        assert wire_size(tools) + len(instructions.encode()) < 16384


async def test_a_tool_found_by_search_is_activated_and_announced_on_the_legacy_session(
    run_gateway: RunGateway,
) -> None:
    changed = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with (
        run_gateway(servers()) as gw,
        Client(gw.server, mode="legacy", message_handler=on_message) as client,
    ):
        before = [t.name for t in (await client.list_tools()).tools]
        found = text_of(
            await client.call_tool(
                "IndexSearch", {"queries": ["list the open pull requests"], "limit": 3}
            )
        )
        assert "tool github__list_pull_requests (deferred, now activated)" in found
        assert '"owner"' in found  # the hit carries the input schema
        with anyio.fail_after(60):  # a ceiling: the wait ends on the event
            await changed.wait()
        after = [t.name for t in (await client.list_tools()).tools]
        assert after[: len(before)] == before  # stable prefix: prompt caches survive
        assert "github__list_pull_requests" in after[len(before) :]
        result = await client.call_tool("github__list_pull_requests", {"owner": "o", "repo": "r"})
        assert json.loads(text_of(result))["tool"] == "list_pull_requests"
        # a second search shows the same tool as listed and repeats nothing it showed before
        again = text_of(
            await client.call_tool(
                "IndexSearch", {"queries": ["list pull requests", "list pull requests"]}
            )
        )
        assert "github__list_pull_requests (listed)" in again
        assert "(already shown as query 1 hit" in again


async def test_activation_reaches_a_2026_client_on_its_subscription_stream(
    run_gateway: RunGateway,
) -> None:
    async with run_gateway(servers()) as gw, Client(gw.server, mode="2026-07-28") as client:
        assert client.protocol_version == "2026-07-28"
        events: list[object] = []
        async with client.listen(tools_list_changed=True) as sub:

            async def collect() -> None:
                async for event in sub:
                    events.append(event)
                    return

            async with anyio.create_task_group() as tg:
                tg.start_soon(collect)
                read = text_of(
                    await client.call_tool(
                        "IndexRead", {"label": "tool:github__merge_pull_request"}
                    )
                )
                assert "# github__merge_pull_request" in read and "now active" in read
                with anyio.fail_after(60):  # a ceiling: the wait ends on the event
                    while not events:
                        await anyio.sleep(0.01)
        names = [t.name for t in (await client.list_tools(cache_mode="refresh")).tools]
        assert names[-1] == "github__merge_pull_request"


async def test_call_tool_invokes_a_deferred_tool_without_activation(
    run_gateway: RunGateway,
) -> None:
    async with run_gateway(servers()) as gw, Client(gw.server, mode="legacy") as client:
        result = await client.call_tool("call_tool", {"name": "github__get_me", "arguments": {}})
        assert json.loads(text_of(result)) == {"arguments": {}, "tool": "get_me"}
        unknown = await client.call_tool("call_tool", {"name": "nope__x"})
        assert unknown.is_error and "unknown tool" in text_of(unknown)


async def test_call_tool_takes_the_bare_name_of_a_tool_one_server_has(
    run_gateway: RunGateway,
) -> None:
    async with run_gateway(servers()) as gw, Client(gw.server, mode="legacy") as client:
        result = await client.call_tool("call_tool", {"name": "get_me", "arguments": {}})
        assert not result.is_error, text_of(result)
        assert json.loads(text_of(result)) == {"arguments": {}, "tool": "get_me"}


async def test_a_source_matching_nothing_lists_the_indexed_labels(run_gateway: RunGateway) -> None:
    async with run_gateway(servers()) as gw, Client(gw.server, mode="legacy") as client:
        result = await client.call_tool("IndexSearch", {"queries": ["x"], "source": "zzz"})
        assert result.is_error
        assert "matches no indexed label" in text_of(result) and '"tool:github__"' in text_of(
            result
        )


async def test_a_client_with_compression_off_sees_the_full_catalog(run_gateway: RunGateway) -> None:
    from mcp_types import Implementation

    from offload.gateway.config import ClientRule

    clients = {"full-client": ClientRule(compress_catalog=False)}
    async with (
        run_gateway(servers(), clients=clients) as gw,
        Client(
            gw.server, mode="legacy", client_info=Implementation(name="full-client", version="1")
        ) as client,
    ):
        names = [t.name for t in (await client.list_tools()).tools]
        assert "github__list_pull_requests" in names and "call_tool" not in names


LONG_INSTRUCTIONS = "# Using the git server\n\n" + "".join(
    f"## Rule {i}\nAlways pass repo_path; step {i} keeps the widget frobnicator aligned.\n\n"
    for i in range(80)
)


def servers_with_instructions() -> list[object]:
    return [
        inproc_upstream("github", "github-mcp-server.json"),
        inproc_upstream("git", "mcp-server-git.json", instructions=LONG_INSTRUCTIONS),
    ]


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # auto: server/discover on 2026-07-28
async def test_a_client_with_compression_off_gets_the_full_upstream_instructions(
    run_gateway: RunGateway, mode: str
) -> None:
    from mcp_types import Implementation

    from offload.gateway.config import ClientRule

    clients = {"full-client": ClientRule(compress_catalog=False)}
    async with run_gateway(servers_with_instructions(), clients=clients) as gw:
        async with Client(gw.server, mode=mode) as default:
            compressed = default.instructions or ""
            modern = default.protocol_version == "2026-07-28"
        assert modern == (mode == "auto")
        info = Implementation(name="full-client", version="1")
        async with Client(gw.server, mode=mode, client_info=info) as full:
            whole = full.instructions or ""
    assert 'IndexRead(label="instructions:git")' in compressed
    assert LONG_INSTRUCTIONS.strip() not in compressed
    assert LONG_INSTRUCTIONS.strip() in whole
    assert "instructions:git" not in whole and "## Deferred tools" not in whole


async def test_a_client_with_compression_on_gets_indexed_instructions_it_can_read(
    run_gateway: RunGateway,
) -> None:
    from mcp_types import Implementation

    from offload.gateway.config import ClientRule

    clients = {"lean": ClientRule(compress_catalog=True)}
    info = Implementation(name="lean", version="1")
    async with (
        run_gateway(servers_with_instructions(), clients=clients, compress_catalog=False) as gw,
        Client(gw.server, mode="legacy") as default,
        Client(gw.server, mode="legacy", client_info=info) as lean,
    ):
        assert LONG_INSTRUCTIONS.strip() in (default.instructions or "")
        assert 'IndexRead(label="instructions:git")' in (lean.instructions or "")
        read = text_of(await lean.call_tool("IndexRead", {"label": "instructions:git"}))
        assert "1\t# Using the git server" in read and "## Rule 40" in read


async def test_activation_is_per_client_another_client_keeps_its_listing(
    run_gateway: RunGateway,
) -> None:
    async with (
        run_gateway(servers()) as gw,
        Client(gw.server, mode="legacy") as a,
        Client(gw.server, mode="legacy") as b,
    ):
        before = [t.name for t in (await b.list_tools()).tools]
        await a.call_tool("IndexRead", {"label": "tool:github__merge_pull_request"})
        assert "github__merge_pull_request" in [t.name for t in (await a.list_tools()).tools]
        assert [t.name for t in (await b.list_tools()).tools] == before
        found = text_of(await b.call_tool("IndexSearch", {"queries": ["merge a pull request"]}))
        assert "github__merge_pull_request (deferred, now activated)" in found


async def test_a_client_keeps_at_most_the_limit_and_the_least_recently_used_go_back(
    run_gateway: RunGateway,
) -> None:
    changes = 0

    async def on_message(message: object) -> None:
        nonlocal changes
        if isinstance(message, types.ToolListChangedNotification):
            changes += 1

    tools = ["get_me", "list_tags", "merge_pull_request", "get_commit", "list_branches"]
    async with (
        run_gateway(servers(), max_active_tools=3) as gw,
        Client(gw.server, mode="legacy", message_handler=on_message) as client,
    ):
        stable = len((await client.list_tools()).tools)

        async def active() -> list[str]:
            return [t.name for t in (await client.list_tools()).tools][stable:]

        for name in tools[:3]:
            await client.call_tool("IndexRead", {"label": f"tool:github__{name}"})
        assert await active() == [
            "github__get_me",
            "github__list_tags",
            "github__merge_pull_request",
        ]
        await client.call_tool("github__get_me", {})  # used: now the most recent
        for name in tools[3:]:
            await client.call_tool("IndexRead", {"label": f"tool:github__{name}"})
        # list_tags and merge_pull_request were least recently used; order stays activation's
        assert await active() == ["github__get_me", "github__get_commit", "github__list_branches"]
        with anyio.fail_after(60):  # a ceiling: the wait ends on the event
            while changes < 5:  # one list_changed per activation that changed the listing
                await anyio.sleep(0.01)


@pytest.mark.slow
async def test_with_the_stores_embedding_model_a_task_in_other_words_finds_its_tool(
    tmp_path: Path,
) -> None:
    # the gateway ranks tools with the store's own model: the lexical ranking alone puts
    # search_repositories below the top 3 for this task (list_issues first)
    model = load_embedder(SearchSettings())
    assert model is not None, "wordllama is a main dependency: it must be installed"
    store = Store(tmp_path / "offload.db", embedder=model)
    upstreams = servers()
    gateway = Gateway(
        GatewaySettings(connect_timeout_s=20.0, call_timeout_s=10.0),
        GatewayConfig(tuple(s[0] for s in upstreams), {}),
        store,
        {s[0].name: s[1] for s in upstreams},
    )
    try:
        async with anyio.create_task_group() as tg:
            await gateway.start(tg)
            try:
                async with Client(gateway.server, mode="legacy") as client:
                    found = text_of(
                        await client.call_tool(
                            "IndexSearch",
                            {
                                "queries": ["look for repositories about rust web frameworks"],
                                "limit": 3,
                            },
                        )
                    )
            finally:
                gateway.stop()
    finally:
        store.close()
    assert "tool github__search_repositories" in found
