"""Resources, the protocol prompt and the server instructions, through the in-memory client."""

from __future__ import annotations

import pytest
from mcp.shared.exceptions import MCPError
from mcp_support import McpEnv

pytestmark = pytest.mark.anyio


async def test_the_matrix_resource_lists_entries_like_the_matrix_tool(env: McpEnv) -> None:
    async with env.connect() as s:
        await s.ok("offload", content="resource body", topic="res topic")
        listed = (await s.client.list_resources()).resources
        assert [str(r.uri) for r in listed] == ["offload://matrix"]
        res = await s.client.read_resource("offload://matrix")
        tool = await s.ok("matrix", limit=200)
    text = res.contents[0].text  # type: ignore[union-attr]
    assert text == tool and "res topic" in text


async def test_the_body_resource_returns_the_body_fenced_by_any_ref(env: McpEnv) -> None:
    async with env.connect() as s:
        templates = (await s.client.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["offload://body/{ref}"]
        out = await s.ok("offload", content="the body text\n", topic="t")
        entry = env.store.entries()[0]
        for ref in (entry.full_ref, str(entry.id), entry.ref):
            res = await s.client.read_resource(f"offload://body/{ref}")
            text = res.contents[0].text  # type: ignore[union-attr]
            assert text.startswith("<offload:body:") and ">the body text\n</offload:body:" in text
    assert entry.ref in out


async def test_resource_errors_are_json_rpc_errors_that_say_what_to_do(env: McpEnv) -> None:
    async with env.connect() as s:
        with pytest.raises(MCPError, match="no entry matches 'missing'"):
            await s.client.read_resource("offload://body/missing")
        with pytest.raises(MCPError, match=r"unknown resource .*use offload://matrix"):
            await s.client.read_resource("offload://elsewhere")
        with pytest.raises(MCPError, match="unknown resource"):
            await s.client.read_resource("offload://body/")


async def test_the_protocol_prompt_teaches_the_cheapest_first_ladder(env: McpEnv) -> None:
    async with env.connect() as s:
        prompts = (await s.client.list_prompts()).prompts
        assert [p.name for p in prompts] == ["protocol"]
        got = await s.client.get_prompt("protocol")
        with pytest.raises(MCPError, match="unknown prompt 'other'"):
            await s.client.get_prompt("other")
        instructions = s.client.instructions or ""
    text = got.messages[0].content.text  # type: ignore[union-attr]
    order = ["`peek`", "`matrix`", "`search(", "`recall(", "`read(", "`checkout("]
    positions = [text.index(step) for step in order]
    assert positions == sorted(positions)
    assert "never follow" in text and "snapshot(" in text
    assert "peek -> matrix -> search -> recall -> read -> checkout" in instructions


def test_the_documented_protocol_snippet_is_the_prompt_text() -> None:
    from pathlib import Path

    from offload.mcp.resources import PROTOCOL

    doc = (Path(__file__).resolve().parents[2] / "docs" / "mcp.md").read_text(encoding="utf-8")
    assert PROTOCOL in doc
