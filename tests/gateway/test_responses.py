"""Response indexing rules: thresholds, opt-outs, errors, never growing a response."""

from __future__ import annotations

import json
from pathlib import Path

import mcp_types as types

from offload.config import GatewaySettings
from offload.gateway.config import ServerConfig, ToolRule
from offload.gateway.responses import index_response, threshold_for
from offload.store.store import Store


def result(text: str, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)


def test_thresholds_come_from_tool_then_server_then_global_with_opt_outs() -> None:
    s = GatewaySettings(response_threshold=1000)
    server = ServerConfig(
        name="a",
        command="x",
        response_threshold=500,
        tools={"big": ToolRule(response_threshold=9000), "raw": ToolRule(index_responses=False)},
    )
    assert threshold_for(s, server, "big") == 9000
    assert threshold_for(s, server, "other") == 500
    assert threshold_for(s, server, "raw") is None
    off = ServerConfig(
        name="b", command="x", index_responses=False, tools={"on": ToolRule(index_responses=True)}
    )
    assert threshold_for(s, off, "any") is None and threshold_for(s, off, "on") == 1000


def test_a_json_response_gets_a_structural_preview_and_contents(tmp_path: Path) -> None:
    items = [
        {"name": f"item{i}", "value": i, "status": "ok" if i != 77 else "error"} for i in range(300)
    ]
    text = json.dumps({"items": items, "total": 300}, indent=2)
    with Store(tmp_path / "s.db") as store:
        out, info = index_response(
            result(text),
            store=store,
            settings=GatewaySettings(),
            label_base="svc__list",
            threshold=1000,
        )
        assert info is not None and info.label == "svc__list:1"
        shown = out.content[0].text  # type: ignore[union-attr]
        assert shown.startswith(
            f'[Response compressed — {len(text.encode())} bytes, {text.count(chr(10)) + 1} lines, indexed as "svc__list:1"]'
        )
        assert "## Contents" in shown and "- [L" in shown and "items" in shown
        assert store.body(store.resolve("svc__list:1", "gateway")) == text
        # run numbers are never reused, also for the same content
        _, again = index_response(
            result(text),
            store=store,
            settings=GatewaySettings(),
            label_base="svc__list",
            threshold=1000,
        )
        assert again is not None and again.label == "svc__list:2"


def test_errors_non_text_and_already_compressed_results_stay(tmp_path: Path) -> None:
    big = "x" * 50_000
    with Store(tmp_path / "s.db") as store:
        settings = GatewaySettings()
        err = result(big, error=True)
        assert (
            index_response(err, store=store, settings=settings, label_base="a__b", threshold=10)[0]
            is err
        )
        image = types.CallToolResult(
            content=[types.ImageContent(type="image", data="aGk=", mime_type="image/png")]
        )
        assert (
            index_response(image, store=store, settings=settings, label_base="a__b", threshold=1)[0]
            is image
        )
        stub = result("[Response compressed — 1 bytes" + big)
        assert (
            index_response(stub, store=store, settings=settings, label_base="a__b", threshold=10)[0]
            is stub
        )


def test_a_response_is_left_alone_when_the_placeholder_would_not_be_smaller(tmp_path: Path) -> None:
    text = "short line\n" * 30  # 330 bytes: a placeholder with calls is longer
    with Store(tmp_path / "s.db") as store:
        original = result(text)
        out, info = index_response(
            original, store=store, settings=GatewaySettings(), label_base="a__b", threshold=100
        )
        assert out is original and info is None
