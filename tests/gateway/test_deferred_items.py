"""Deferred resources, resource templates and prompts: a large list is
held back behind search like tools, found and listed again per client, and reading or
getting a deferred one still answers exactly what the upstream answers."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from gateway_helpers import CATALOG_SERVER, RunGateway, inproc_upstream, text_of
from mcp.client.stdio import StdioServerParameters
from test_e2e_peers import EVERYTHING, FILESYSTEM, gateway_params, write_config

from mcp import Client
from offload.gateway.catalog import Budget, ServerCatalog, item_document, plan_catalog, wire_size
from realparts import CATALOGS, git_repo, require

pytestmark = pytest.mark.anyio

URI = "docs://docs/tool/137"  # one of the 300 resources the docs upstream serves


def docs_upstream() -> object:
    return inproc_upstream("docs", "server-memory.json", resources=300, prompts=40)


def small_tools() -> object:
    return inproc_upstream("git", "mcp-server-git.json")


def test_a_long_resource_list_is_deferred_and_the_listing_fits_the_threshold() -> None:
    resources = tuple(
        types.Resource(uri=f"docs://d/{i}", name=f"doc-{i}", description="a document " * 8)
        for i in range(400)
    )
    prompts = tuple(types.Prompt(name=f"p{i}", description="a prompt") for i in range(30))
    template = types.ResourceTemplate(uri_template="docs://d/{i}", name="doc")
    tool = types.Tool(name="t", input_schema={"type": "object"})
    servers = [
        ServerCatalog(
            "d", tools=(tool,), resources=resources, templates=(template,), prompts=prompts
        )
    ]
    plan = plan_catalog(servers, Budget(threshold=8192))
    assert plan.phases == [2] and plan.deferred_item_servers == ["d"]
    assert plan.resources == [] and plan.templates == [] and plan.prompts == []
    assert [t.name for t in plan.tools] == ["d__t"]  # the small part stays listed
    assert len(plan.items) == 431 and plan.size <= 8192 < plan.full_size
    assert "- d: 400 resources, 1 resource templates, 30 prompts" in plan.instructions
    prompt = plan.items["prompt:d__p7"]
    assert prompt.item.name == "d__p7"  # prompts keep their gateway names
    doc = item_document("resource:d__docs://d/5", plan.items["resource:d__docs://d/5"])
    assert "- uri: docs://d/5" in doc and 'resources/read {"uri": "docs://d/5"}' in doc
    # under the threshold nothing is deferred
    relaxed = plan_catalog(servers, Budget(threshold=10**6))
    assert (
        relaxed.items == {} and len(relaxed.resources) == 400 and relaxed.prompts[0].name == "d__p0"
    )


async def test_a_deferred_resource_is_found_listed_for_that_client_and_read_unchanged(
    run_gateway: RunGateway,
) -> None:
    changed = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.ResourceListChangedNotification):
            changed.set()

    async with (
        run_gateway([docs_upstream(), small_tools()], catalog_threshold=12000) as gw,
        Client(gw.server, mode="legacy", message_handler=on_message) as client,
        Client(gw.server, mode="legacy") as other,
    ):
        assert (await client.list_resources()).resources == []
        assert (await client.list_prompts()).prompts == []
        assert "docs: 300 resources, 1 resource templates, 40 prompts" in (
            client.instructions or ""
        )
        names = [t.name for t in (await client.list_tools()).tools]
        assert "docs__read_graph" in names  # its tools still fit: the long lists wait
        search = {"queries": ["docs tool 137"], "limit": 1}
        found = text_of(await client.call_tool("IndexSearch", search))
        assert f"resource {URI} (deferred, now listed for you)" in found
        assert f'resources/read {{"uri": "{URI}"}}' in found
        with anyio.fail_after(60):  # a ceiling: the wait ends on the event
            await changed.wait()
        assert [str(r.uri) for r in (await client.list_resources()).resources] == [URI]
        assert (await other.list_resources()).resources == []  # only the client that asked
        # reading answers the upstream's own bytes, listed or not
        direct = await gw.upstreams["docs"].request("read", lambda c: c.read_resource(URI))
        via = await other.read_resource(URI)
        assert via.model_dump_json() == direct.model_dump_json()
        assert text_of_resource(via).startswith("# ")


async def test_a_deferred_prompt_is_found_by_search_and_read_and_got_unchanged(
    run_gateway: RunGateway,
) -> None:
    changed = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.PromptListChangedNotification):
            changed.set()

    async with (
        run_gateway([docs_upstream()], catalog_threshold=4096) as gw,
        Client(gw.server, mode="legacy", message_handler=on_message) as client,
    ):
        label = "prompt:docs__explain_12"
        read = text_of(await client.call_tool("IndexRead", {"label": label}))
        assert read.splitlines()[0].startswith(f"[{label} — lines 1-")
        assert "argument `detail`" in read and '"name": "docs__explain_12"' in read
        with anyio.fail_after(60):  # a ceiling: the wait ends on the event
            await changed.wait()
        assert [p.name for p in (await client.list_prompts()).prompts] == ["docs__explain_12"]
        args = {"detail": "full"}
        via = await client.get_prompt("docs__explain_30", args)  # deferred, never listed
        direct = await gw.upstreams["docs"].request(
            "get", lambda c: c.get_prompt("explain_30", args)
        )
        assert via.model_dump_json() == direct.model_dump_json()
        found = text_of(await client.call_tool("IndexSearch", {"queries": ["explain topic 33"]}))
        assert "prompt docs__explain_33 (deferred, now listed for you)" in found
        tools = (await client.list_tools()).tools
        assert wire_size(tools) + len((client.instructions or "").encode()) < 4096


def text_of_resource(result: types.ReadResourceResult) -> str:
    part = result.contents[0]
    assert isinstance(part, types.TextResourceContents)
    return part.text


@pytest.mark.slow
async def test_real_upstreams_resources_and_prompts_are_deferred_and_read_byte_for_byte(
    tmp_path: Path,
) -> None:
    require(
        FILESYSTEM.exists() and EVERYTHING.exists(), "npm MCP peers missing (npm ci in tests/peers)"
    )
    require(shutil.which("mcp-server-git") is not None, "mcp-server-git missing")
    repo = git_repo(tmp_path / "repo", 3)
    files = tmp_path / "files"
    files.mkdir()
    (files / "a.txt").write_text("alpha\n")
    docs = [str(CATALOG_SERVER), str(CATALOGS / "server-memory.json"), "--name", "docs"]
    config = write_config(
        tmp_path,
        {
            "git": {"command": "mcp-server-git", "args": ["--repository", str(repo)]},
            "fs": {"command": str(FILESYSTEM), "args": [str(files)]},
            "ev": {"command": str(EVERYTHING), "args": ["stdio"]},
            "docs": {
                "command": sys.executable,
                "args": [*docs, "--resources", "400", "--prompts", "60"],
            },
        },
        extra="[gateway]\ncatalog_threshold = 6000",
    )
    uri = "demo://resource/static/document/architecture.md"
    ev_params = StdioServerParameters(command=str(EVERYTHING), args=["stdio"])
    async with Client(ev_params, mode="legacy") as ev:
        direct_read = await ev.read_resource(uri)
        direct_prompt = await ev.get_prompt("simple-prompt")
    params = gateway_params(config, tmp_path / "home")
    async with Client(params, mode="legacy") as client:
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        instructions = client.instructions or ""
        assert "docs: 400 resources, 1 resource templates, 60 prompts" in instructions
        assert "ev: 7 resources, 2 resource templates, 4 prompts" in instructions
        assert listed == set() and prompts == set()  # everything waits behind search
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"IndexSearch", "IndexRead", "call_tool"} <= names
        # the deferred list is searchable and a deferred resource reads as the upstream's
        found = text_of(await client.call_tool("IndexSearch", {"queries": ["docs tool 321"]}))
        assert "resource docs://docs/tool/321 (deferred, now listed for you)" in found
        docs_read = await client.read_resource("docs://docs/tool/250")
        part = docs_read.contents[0]
        assert isinstance(part, types.TextResourceContents)
        assert part.text.startswith("# ") and "(250)" in part.text.splitlines()[0]
        via_read = await client.read_resource(uri)
        via_prompt = await client.get_prompt("ev__simple-prompt")
        via_docs_prompt = await client.get_prompt("docs__explain_59", {"detail": "all"})
    # the deferred resource and prompt of a real upstream, exactly as it answers them
    assert via_read.model_dump_json() == direct_read.model_dump_json()
    assert via_prompt.model_dump_json() == direct_prompt.model_dump_json()
    assert "Explain explain_59 with all detail." in str(via_docs_prompt.messages[0].content)
