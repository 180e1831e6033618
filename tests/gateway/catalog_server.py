"""A tiny stdio MCP server for gateway tests: serves a real catalog's tools and echoes calls.

    python catalog_server.py CATALOG.json [--name NAME] [--instructions FILE] [--extras]

Every catalog tool answers ``{"tool": name, "arguments": {...}}``. ``--extras`` adds tools
that exercise the gateway: ``big_output`` (``lines`` numbered lines), ``fail`` (an error
result), ``crash`` (the process exits mid-call), ``hang`` (never answers), ``garbage``
(writes a line that is not JSON-RPC to stdout, then answers) and ``surrogate`` (a large
text with a lone surrogate in it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

EXTRAS = [
    types.Tool(
        name="big_output",
        description="Return many numbered lines of text",
        input_schema={"type": "object", "properties": {"lines": {"type": "integer"}}},
    ),
    types.Tool(name="fail", description="Return an error result", input_schema={"type": "object"}),
    types.Tool(
        name="crash", description="Exit the process mid-call", input_schema={"type": "object"}
    ),
    types.Tool(name="hang", description="Never answer", input_schema={"type": "object"}),
    types.Tool(
        name="garbage", description="Write non-JSON to stdout", input_schema={"type": "object"}
    ),
    types.Tool(
        name="surrogate", description="Large text, lone surrogate", input_schema={"type": "object"}
    ),
]
SURROGATE_TEXT = "".join(f"row {i:05d} of the report\n" for i in range(3000)) + "bad \ud800 end\n"


def build(catalog: Path, name: str, instructions: str, extras: bool) -> Server[Any]:
    """The server for ``catalog``."""
    data = json.loads(catalog.read_text(encoding="utf-8"))
    tools = [types.Tool.model_validate(t) for t in data["tools"]]
    if extras:
        tools += EXTRAS

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = dict(params.arguments or {})
        if params.name == "big_output":
            count = int(args.get("lines", 1000))
            text = "".join(
                f"line {i:05d}: the quick brown fox jumps over the lazy dog\n"
                for i in range(1, count + 1)
            )
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
        if params.name == "fail":
            big = "error detail " * 5000
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=big)], is_error=True
            )
        if params.name == "crash":
            os._exit(3)
        if params.name == "hang":
            await anyio.sleep_forever()
        if params.name == "garbage":
            sys.stdout.write("this is not JSON-RPC {\n")
            sys.stdout.flush()
        if params.name == "surrogate":
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=SURROGATE_TEXT)]
            )
        text = json.dumps({"tool": params.name, "arguments": args}, sort_keys=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    return Server(
        name, instructions=instructions or None, on_list_tools=list_tools, on_call_tool=call_tool
    )


def main() -> None:
    """Parse arguments and serve over stdio."""
    parser = argparse.ArgumentParser()
    parser.add_argument("catalog", type=Path)
    parser.add_argument("--name", default="catalog")
    parser.add_argument("--instructions", type=Path)
    parser.add_argument("--extras", action="store_true")
    args = parser.parse_args()
    text = args.instructions.read_text(encoding="utf-8") if args.instructions else ""
    server = build(args.catalog, args.name, text, args.extras)

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)


if __name__ == "__main__":
    main()
