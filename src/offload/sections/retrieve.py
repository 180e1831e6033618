"""The retrieve tool: its definition (OpenAI, Anthropic, MCP) and the handler behind it.

A model that sees ``Original available via RetrieveContext(reference="ctx:sha256:…")``
calls the tool; the handler answers with the stored original inside a trust fence (see
:mod:`offload.core.fence`), optionally only lines ``start_line``..``end_line``. A reference
whose original expired answers why and how to regenerate it, as an error result the model
can act on. The tool's name is configurable (``[sections] retrieve_tool``).

``mcp`` is imported only by :func:`mcp_tool` and :meth:`Retriever.mcp_server`, so the
OpenAI/Anthropic paths stay light.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from offload.core.fence import fence, new_nonce
from offload.core.text.lines import line_count, raw_lines
from offload.errors import Gone, InvalidInput, OffloadError, ReferenceError_
from offload.store.store import Store

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server
    from mcp.types import Tool

__all__ = [
    "DEFAULT_TOOL_NAME",
    "RetrieveResult",
    "Retriever",
    "anthropic_tool",
    "input_schema",
    "mcp_tool",
    "openai_tool",
]

DEFAULT_TOOL_NAME = "RetrieveContext"
DESCRIPTION = (
    "Read the original text of a context section that was compressed or cut. Pass the "
    'reference shown next to it (reference="ctx:sha256:…"). Give start_line (and '
    "end_line) to read only part of it; line numbers are the ones in the [… lines A-B] "
    "markers."
)


def input_schema() -> dict[str, Any]:
    """The JSON Schema of the tool's arguments."""
    return {
        "type": "object",
        "properties": {
            "reference": {
                "type": "string",
                "description": "The reference shown with the section: ctx:sha256:<hex>.",
            },
            "start_line": {
                "type": "integer",
                "minimum": 1,
                "description": "First line to return (1-based); default 1.",
            },
            "end_line": {
                "type": "integer",
                "minimum": 1,
                "description": "Last line to return (inclusive); default the last line.",
            },
        },
        "required": ["reference"],
        "additionalProperties": False,
    }


def openai_tool(name: str = DEFAULT_TOOL_NAME) -> dict[str, Any]:
    """The tool in OpenAI Chat Completions ``tools`` format."""
    return {
        "type": "function",
        "function": {"name": name, "description": DESCRIPTION, "parameters": input_schema()},
    }


def anthropic_tool(name: str = DEFAULT_TOOL_NAME) -> dict[str, Any]:
    """The tool in Anthropic Messages ``tools`` format."""
    return {"name": name, "description": DESCRIPTION, "input_schema": input_schema()}


def mcp_tool(name: str = DEFAULT_TOOL_NAME) -> Tool:
    """The tool as an MCP ``Tool``."""
    from mcp.types import Tool, ToolAnnotations

    return Tool(
        name=name,
        description=DESCRIPTION,
        input_schema=input_schema(),
        annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    )


@dataclass(frozen=True)
class RetrieveResult:
    """A tool answer: ``text`` for the model, ``is_error`` when it explains a failure."""

    text: str
    is_error: bool = False


class Retriever:
    """The handler of the retrieve tool over one store scope.

    ``scope`` is a boundary: a reference to another scope's entry is answered with an
    error, never its text. The default ``""`` is the scope :meth:`Store.put` and the
    builder use by default; ``None`` reaches every scope (ask for it explicitly).
    """

    def __init__(self, store: Store, *, name: str = DEFAULT_TOOL_NAME, scope: str | None = ""):
        self.store = store
        self.name = name
        self.scope = scope

    def __call__(
        self, reference: str, start_line: int | None = None, end_line: int | None = None
    ) -> RetrieveResult:
        """The original named by ``reference`` (or some of its lines), fenced."""
        try:
            return RetrieveResult(self._read(reference, start_line, end_line))
        except Gone as exc:
            hint = f"; to regenerate it: {exc.regenerate}" if exc.regenerate else ""
            return RetrieveResult(
                f"{reference} is no longer available: {exc.reason} at {exc.when}{hint}. "
                "Its section in the prompt is all there is until then.",
                is_error=True,
            )
        except ReferenceError_ as exc:
            return RetrieveResult(
                f"{exc}. Use a reference exactly as shown in the prompt.", is_error=True
            )
        except InvalidInput as exc:
            return RetrieveResult(f"invalid arguments: {exc}", is_error=True)

    def _read(self, reference: str, start_line: int | None, end_line: int | None) -> str:
        if not isinstance(reference, str):
            raise InvalidInput("reference must be a string like ctx:sha256:<hex>")
        for what, value in (("start_line", start_line), ("end_line", end_line)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise InvalidInput(f"{what} must be an integer")
        entry = self.store.resolve(reference, scope=self.scope)
        text = self.store.body(entry, original=True, touch=True)
        total = line_count(text)
        if start_line is None and end_line is None:
            body, head = text, ""
        else:
            first = 1 if start_line is None else start_line
            last = total if end_line is None else min(end_line, total)
            if first < 1 or first > max(total, 1) or last < first:
                raise InvalidInput(f"lines {first}-{last} are outside the text (lines 1-{total})")
            body = raw_lines(text, first, last)
            head = f"lines {first}-{last} of {total}\n"
        return head + fence(
            body, nonce=new_nonce(), ref=entry.full_ref, topic=entry.topic, stored=entry.created
        )

    def handle(self, arguments: Mapping[str, Any] | str | None) -> RetrieveResult:
        """Answer a tool call's arguments (a mapping, or the JSON string OpenAI sends)."""
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                return RetrieveResult("invalid arguments: not a JSON object", is_error=True)
        if not isinstance(arguments, Mapping):
            return RetrieveResult("invalid arguments: expected an object", is_error=True)
        unknown = sorted(set(arguments) - {"reference", "start_line", "end_line"})
        if unknown:
            return RetrieveResult(
                f"invalid arguments: unknown {', '.join(unknown)}; "
                "give reference (and start_line, end_line)",
                is_error=True,
            )
        if "reference" not in arguments:
            return RetrieveResult("invalid arguments: reference is required", is_error=True)
        return self(arguments["reference"], arguments.get("start_line"), arguments.get("end_line"))

    def mcp_server(self, server_name: str = "offload-sections") -> Server[Any]:
        """A lowlevel MCP server exposing only this tool (for tests and small hosts)."""
        from mcp.server.lowlevel import Server
        from mcp.types import (
            CallToolRequestParams,
            CallToolResult,
            ListToolsResult,
            PaginatedRequestParams,
            TextContent,
        )

        tool = mcp_tool(self.name)

        async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
            return ListToolsResult(tools=[tool])

        async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
            if params.name != self.name:
                result = RetrieveResult(f"unknown tool {params.name!r}", is_error=True)
            else:
                try:
                    result = self.handle(params.arguments or {})
                except OffloadError as exc:  # the store itself failed
                    result = RetrieveResult(str(exc), is_error=True)
            return CallToolResult(
                content=[TextContent(type="text", text=result.text)], is_error=result.is_error
            )

        return Server(server_name, on_list_tools=list_tools, on_call_tool=call_tool)
