"""The cooperative MCP server, independent of its transport.

:func:`build_server` turns an :class:`McpContext` (settings + store + scope) into an
SDK lowlevel ``Server``; ``offload.mcp.stdio`` and ``offload.mcp.http`` only carry it.
Tool errors are ``is_error`` results whose text says what to do next: every
:class:`OffloadError` is mapped there, anything else is a bug and left to the SDK.

Handlers and resource reads run in a worker thread: gists, hashing, compression and SQLite
are CPU and disk work, and ``offload serve`` answers every other surface on this event loop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext

from offload import __version__
from offload.errors import OffloadError
from offload.mcp import format as fmt
from offload.mcp import progress, resources, tools_read, tools_write
from offload.mcp.args import Args
from offload.mcp.catalog import TOOLS, ToolDef, select
from offload.mcp.context import McpContext

Handler = Callable[[McpContext, Args], Awaitable[str]]
#: What a call of a tool this server does not have is counted as: the counts (and the
#: ``offload_mcp_tool_calls_total{tool}`` series of ``/metrics``) name only tools the
#: server offers, so a client cannot add a series per made-up name.
UNKNOWN_TOOL = "unknown"

HANDLERS: dict[str, Handler] = {
    "peek": tools_read.peek,
    "matrix": tools_read.matrix,
    "search": tools_read.search,
    "recall": tools_read.recall,
    "read": tools_read.read,
    "checkout": tools_read.checkout,
    "checkin": tools_read.checkin,
    "offload": tools_write.offload,
    "offload_path": tools_write.offload_path,
    "offload_path_sectioned": tools_write.offload_path_sectioned,
    "checkout_remote": tools_read.checkout_remote,
    "pin": tools_write.pin,
    "unpin": tools_write.unpin,
    "reap": tools_write.reap,
    "forget": tools_write.forget,
    "stats": tools_read.stats,
    "retrieve": tools_read.retrieve,
    "snapshot": tools_write.snapshot,
    "restore": tools_write.restore,
}
assert set(HANDLERS) == {t.name for t in TOOLS}, "every catalog tool needs a handler"
assert UNKNOWN_TOOL not in HANDLERS, "the unknown tools' count must not pass for a tool's"


def _run_handler(handler: Handler, ctx: McpContext, args: Args) -> str:
    """Run one (async) handler to completion on this worker thread's own event loop; the
    few handlers that await (the local model) do so there."""
    return anyio.run(handler, ctx, args)


def _text_result(text: str, *, error: bool) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)


async def call_tool(
    ctx: McpContext,
    tools: Mapping[str, ToolDef],
    name: str,
    arguments: Mapping[str, Any] | None,
    notify: progress.MakeNotifier | None = None,
) -> types.CallToolResult:
    """Run one tool call; deliberate errors become ``is_error`` results. ``notify``: makes
    the call's progress notifier, when the client asked to hear progress."""
    tool = tools.get(name)
    if tool is None:
        text = f"error: unknown tool {name!r}; available: {', '.join(tools)}"
        error = True
    else:
        try:
            args = Args(name, arguments, tool.schema.get("properties", {}), notify=notify)
            text = await anyio.to_thread.run_sync(_run_handler, HANDLERS[name], ctx, args)
            error = False
        except OffloadError as exc:
            text = fmt.error_text(exc, ctx.root_names)
            error = True
    size_in = len(json.dumps(arguments or {}, default=str))  # ASCII-escaped: any input is safe
    counted_as = name if tool is not None else UNKNOWN_TOOL
    ctx.stats.record(counted_as, size_in, len(text.encode("utf-8", "surrogatepass")), error=error)
    return _text_result(text, error=error)


def _notifier(rctx: ServerRequestContext[Any]) -> progress.MakeNotifier:
    """What makes this request's progress notifier. Sending is the SDK's: on JSON-RPC it is
    ``notifications/progress`` with the request's ``progressToken``, in process the client's
    callback, and nothing when the client asked for no progress."""
    loop = asyncio.get_running_loop()
    report = rctx.session.report_progress

    async def send(done: float, total: float, message: str) -> None:
        await report(done, total, message)

    def make(size: int) -> progress.Notifier:
        return progress.Notifier(send, loop, size=size)

    return make


def build_server(ctx: McpContext) -> Server[Any]:
    """The SDK server for ``ctx``, offering the tools ``[mcp] tools`` selects (all by default)."""
    chosen = select(ctx.settings.mcp.tools)
    by_name = {t.name: t for t in chosen}
    listed = [
        types.Tool(name=t.name, description=t.description or None, input_schema=dict(t.schema))
        for t in chosen
    ]

    async def on_list_tools(
        rctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def on_call_tool(
        rctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await call_tool(ctx, by_name, params.name, params.arguments, _notifier(rctx))

    async def on_list_resources(
        rctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return resources.list_resources()

    async def on_list_resource_templates(
        rctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return resources.list_templates()

    async def on_read_resource(
        rctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        return await anyio.to_thread.run_sync(resources.read_resource, ctx, str(params.uri))

    async def on_list_prompts(
        rctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return resources.list_prompts()

    async def on_get_prompt(
        rctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        return resources.get_prompt(params.name)

    return Server(
        "offload",
        version=__version__,
        instructions=resources.INSTRUCTIONS,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        on_list_resources=on_list_resources,
        on_list_resource_templates=on_list_resource_templates,
        on_read_resource=on_read_resource,
        on_list_prompts=on_list_prompts,
        on_get_prompt=on_get_prompt,
    )
