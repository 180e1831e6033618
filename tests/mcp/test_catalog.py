"""The tool catalog: complete, terse, and within its token budget."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp_support import McpEnv

from offload.core.tokens import BpeCounter
from offload.errors import ConfigError
from offload.mcp.catalog import TOOL_NAMES, TOOLS, catalog_json, catalog_tokens, select

CATALOG_BUDGET = 1500
EXPECTED = {
    "peek", "matrix", "search", "recall", "read", "checkout", "checkin", "offload",
    "offload_path", "offload_path_sectioned", "checkout_remote", "pin", "unpin", "reap",
    "forget", "stats", "retrieve", "snapshot", "restore",
}  # fmt: skip


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def test_the_catalog_offers_every_tool_named_like_context_hydra() -> None:
    assert set(TOOL_NAMES) == EXPECTED
    assert len(TOOL_NAMES) == len(set(TOOL_NAMES))


@pytest.mark.anyio
async def test_the_served_catalog_costs_at_most_1500_bpe_tokens(env: McpEnv) -> None:
    async with env.connect() as s:
        listed = (await s.client.list_tools()).tools
    wire = [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in listed]
    served = json.dumps(wire, separators=(",", ":"), ensure_ascii=False)
    counter = BpeCounter()
    assert counter.count(served) <= CATALOG_BUDGET
    # what the module reports is what the wire carries (give or take the SDK's field order)
    assert abs(counter.count(served) - catalog_tokens(TOOLS, counter)) <= 5
    assert {t.name for t in listed} == EXPECTED


def test_schemas_carry_no_titles_and_every_required_field_is_a_property() -> None:
    for tool in TOOLS:
        assert "title" not in _keys(dict(tool.schema)), tool.name
        assert tool.schema["type"] == "object"
        for name in tool.schema.get("required", []):
            assert name in tool.schema["properties"], (tool.name, name)


def test_selecting_a_subset_keeps_catalog_order_and_costs_less() -> None:
    chosen = select(["read", "peek"])
    assert [t.name for t in chosen] == ["peek", "read"]
    assert catalog_tokens(chosen) < catalog_tokens()
    assert json.loads(catalog_json(chosen))[0]["name"] == "peek"


def test_selecting_an_unknown_tool_is_a_config_error_listing_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"unknown MCP tool.*bogus.*choose from peek"):
        select(["peek", "bogus"])


@pytest.mark.anyio
async def test_a_server_limited_by_tools_lists_and_serves_only_those(env: McpEnv) -> None:
    async with env.connect(**{"mcp.tools": ("peek", "recall")}) as s:
        names = [t.name for t in (await s.client.list_tools()).tools]
        assert names == ["peek", "recall"]
        err = await s.fail("matrix")
        assert "unknown tool 'matrix'" in err and "available: peek, recall" in err


def test_docs_mcp_states_the_catalog_costs_that_offload_mcp_catalog_prints() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "mcp.md").read_text(encoding="utf-8")
    counter = BpeCounter()
    whole = catalog_tokens(TOOLS, counter)
    two = catalog_tokens(select(["peek", "read"]), counter)
    assert f"costs **{whole:,} cl100k tokens**" in page
    assert f"`offload mcp --catalog --tools peek,read`: {two:,} tokens" in page
