"""A tiny stdio MCP server for gateway tests: serves a real catalog's tools and echoes calls.

    python catalog_server.py CATALOG.json [--name NAME] [--instructions FILE] [--extras]
        [--resources N] [--prompts N]

Every catalog tool answers ``{"tool": name, "arguments": {...}}``. ``--extras`` adds tools
that exercise the gateway: ``big_output`` (``lines`` numbered lines), ``fail`` (an error
result), ``crash`` (the process exits mid-call), ``hang`` (never answers), ``garbage``
(writes a line that is not JSON-RPC to stdout, then answers) and ``surrogate`` (a large
text with a lone surrogate in it). ``--resources N`` serves N resources (one per catalog
tool, cycling: ``docs://NAME/tool/I``, its description and schema as markdown, read back as
exactly that text) and a template ``docs://NAME/tool/{index}``; ``--prompts N`` serves N
prompts (``explain_I`` with a ``detail`` argument).
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


def resource_text(tool: types.Tool, index: int) -> str:
    """What resource ``index`` (about ``tool``) reads as."""
    schema = json.dumps(tool.input_schema, indent=1, sort_keys=True)
    return f"# {tool.name} ({index})\n\n{tool.description or ''}\n\n```json\n{schema}\n```\n"


def _resources(name: str, tools: list[types.Tool], count: int) -> dict[str, tuple[Any, str]]:
    out: dict[str, tuple[Any, str]] = {}
    for i in range(count):
        tool = tools[i % len(tools)]
        uri = f"docs://{name}/tool/{i}"
        desc = " ".join((tool.description or "").split())[:300]
        resource = types.Resource(
            uri=uri, name=f"{tool.name}-{i}", description=desc, mime_type="text/markdown"
        )
        out[uri] = (resource, resource_text(tool, i))
    return out


def _prompts(count: int) -> list[types.Prompt]:
    arg = types.PromptArgument(name="detail", description="how much detail", required=False)
    return [
        types.Prompt(
            name=f"explain_{i}", description=f"Explain topic {i} step by step", arguments=[arg]
        )
        for i in range(count)
    ]


def build(
    catalog: Path,
    name: str,
    instructions: str,
    extras: bool,
    resources: int = 0,
    prompts: int = 0,
) -> Server[Any]:
    """The server for ``catalog``."""
    data = json.loads(catalog.read_text(encoding="utf-8"))
    tools = [types.Tool.model_validate(t) for t in data["tools"]]
    docs = _resources(name, tools, resources)
    prompt_list = _prompts(prompts)
    template = types.ResourceTemplate(
        uri_template=f"docs://{name}/tool/{{index}}", name="tool-doc", description="A tool's doc"
    )
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

    async def list_resources(_ctx: Any, _params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[r for r, _text in docs.values()])

    async def list_templates(_ctx: Any, _params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[template])

    async def read_resource(
        _ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        found = docs.get(str(params.uri))
        if found is None:
            raise ValueError(f"no resource {params.uri}")
        part = types.TextResourceContents(
            uri=str(params.uri), text=found[1], mime_type="text/markdown"
        )
        return types.ReadResourceResult(contents=[part])

    async def list_prompts(_ctx: Any, _params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=prompt_list)

    async def get_prompt(_ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        detail = (params.arguments or {}).get("detail", "some")
        text = f"Explain {params.name} with {detail} detail."
        message = types.PromptMessage(
            role="user", content=types.TextContent(type="text", text=text)
        )
        return types.GetPromptResult(description=f"prompt {params.name}", messages=[message])

    more: dict[str, Any] = {}
    if resources:
        more.update(
            on_list_resources=list_resources,
            on_list_resource_templates=list_templates,
            on_read_resource=read_resource,
        )
    if prompts:
        more.update(on_list_prompts=list_prompts, on_get_prompt=get_prompt)
    return Server(
        name,
        instructions=instructions or None,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        **more,
    )


def main() -> None:
    """Parse arguments and serve over stdio."""
    parser = argparse.ArgumentParser()
    parser.add_argument("catalog", type=Path)
    parser.add_argument("--name", default="catalog")
    parser.add_argument("--instructions", type=Path)
    parser.add_argument("--extras", action="store_true")
    parser.add_argument("--resources", type=int, default=0)
    parser.add_argument("--prompts", type=int, default=0)
    args = parser.parse_args()
    text = args.instructions.read_text(encoding="utf-8") if args.instructions else ""
    server = build(args.catalog, args.name, text, args.extras, args.resources, args.prompts)

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)


if __name__ == "__main__":
    main()
