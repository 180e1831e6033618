"""Catalog compression: keep the combined catalog under a byte budget (pure).

Phases, applied in order until the estimate fits the threshold:

1. long server instructions are indexed and replaced by a summary and their contents;
2. servers' tool definitions are deferred behind search, the servers whose deferral saves
   most and that are least used first (each definition becomes a searchable document);
3. the instructions' contents are dropped, the summaries stay;
4. the deferred batches' contents (their tool names) are dropped.

The store writes this implies (instruction and tool documents) are returned as
:attr:`CatalogPlan.documents` for the caller to persist.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from offload.core.preview import contents

SEP = "__"
TOOL_PREFIX = "tool:"
INSTRUCTIONS_PREFIX = "instructions:"
_SUMMARY_CHARS = 240


@dataclass(frozen=True)
class ServerCatalog:
    """What one upstream contributes to the catalog."""

    name: str
    tools: tuple[types.Tool, ...] = ()
    resources: tuple[types.Resource, ...] = ()
    templates: tuple[types.ResourceTemplate, ...] = ()
    prompts: tuple[types.Prompt, ...] = ()
    instructions: str = ""
    calls: int = 0  # how often its tools were used (feeds the deferral order)


@dataclass(frozen=True)
class Budget:
    """The numbers compression works with."""

    threshold: int = 16384
    instructions_threshold: int = 2048
    search_tool: str = "IndexSearch"
    read_tool: str = "IndexRead"
    call_tool: str = "call_tool"


@dataclass
class CatalogPlan:
    """The result of compression: what is listed, what is deferred, what to store."""

    tools: list[types.Tool]  # stable listed upstream tools, gateway names
    deferred: dict[str, types.Tool]  # gateway name -> definition, in catalog order
    deferred_servers: list[str]
    instructions: str
    phases: list[int]
    size: int  # estimated bytes of the listed catalog
    full_size: int
    documents: dict[str, tuple[str, str]] = field(default_factory=dict)  # label -> (kind, text)


def gateway_name(server: str, tool: str) -> str:
    """``{server}__{tool}``."""
    return f"{server}{SEP}{tool}"


def split_name(name: str) -> tuple[str, str] | None:
    """``(server, tool)`` of a gateway name, or None."""
    server, sep, tool = name.partition(SEP)
    return (server, tool) if sep and server and tool else None


def renamed(server: str, tool: types.Tool, *, strip_output: bool) -> types.Tool:
    """The upstream ``tool`` as the gateway lists it."""
    update: dict[str, Any] = {"name": gateway_name(server, tool.name)}
    if strip_output:
        update["output_schema"] = None
    return tool.model_copy(update=update)


def wire_size(items: Sequence[Any]) -> int:
    """UTF-8 bytes of ``items`` as JSON on the wire (camelCase, no nulls)."""
    dumped = [
        i.model_dump(by_alias=True, mode="json", exclude_none=True)
        if hasattr(i, "model_dump")
        else i
        for i in items
    ]
    return len(json.dumps(dumped, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def tool_document(name: str, tool: types.Tool) -> str:
    """A deferred tool as searchable markdown: description, parameters, input schema."""
    rows = [f"# {name}", ""]
    if tool.title:
        rows += [tool.title, ""]
    rows += [(tool.description or "(no description)").strip(), "", "## Parameters"]
    schema = tool.input_schema or {}
    props = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    if not props:
        rows.append("(none)")
    for pname, spec in props.items():
        spec = spec if isinstance(spec, dict) else {}
        kind = spec.get("type", "any")
        need = ", required" if pname in required else ""
        desc = " ".join(str(spec.get("description", "")).split())
        rows.append(f"- `{pname}` ({kind}{need})" + (f": {desc}" if desc else ""))
    rows += ["", "## Input schema", "```json", json.dumps(schema, indent=1, ensure_ascii=False)]
    rows += ["```", ""]
    return "\n".join(rows)


def _summary(text: str) -> str:
    for line in text.splitlines():
        flat = " ".join(line.strip().lstrip("#").split())
        if flat:
            return flat if len(flat) <= _SUMMARY_CHARS else flat[: _SUMMARY_CHARS - 1] + "…"
    return ""


@dataclass
class _State:
    indexed_instructions: bool = False
    deferred: list[str] = field(default_factory=list)
    instruction_contents: bool = True
    batch_contents: bool = True


def _instructions(
    servers: Sequence[ServerCatalog],
    state: _State,
    budget: Budget,
    unavailable: Mapping[str, str],
) -> str:
    rows = [
        "This is an offload gateway: upstream tools are named {server}__{tool}. "
        f"Oversized tool responses are indexed; read them with {budget.read_tool} "
        f"and search them with {budget.search_tool}."
    ]
    for s in servers:
        text = s.instructions.strip()
        if not text:
            continue
        if state.indexed_instructions and len(text) > budget.instructions_threshold:
            label = f"{INSTRUCTIONS_PREFIX}{s.name}"
            rows.append(f"## {s.name}\n{_summary(text)}")
            if state.instruction_contents:
                toc = contents(text, max_entries=12)
                if toc:
                    rows.append("\n".join(f"- [L{e.line}] {e.title}" for e in toc))
            rows.append(f'(full instructions: {budget.read_tool}(label="{label}"))')
        else:
            rows.append(f"## {s.name}\n{text}")
    if state.deferred:
        rows.append(
            f"## Deferred tools\nFind them with {budget.search_tool}(queries=[...]); a hit "
            f"shows the input schema. Call one by name, or through "
            f"{budget.call_tool}(name=..., arguments={{...}})."
        )
        by_name = {s.name: s for s in servers}
        for name in state.deferred:
            tools = by_name[name].tools
            line = f'- {name}: {len(tools)} tools (source="{TOOL_PREFIX}{name}{SEP}")'
            if state.batch_contents:
                line += ": " + ", ".join(t.name for t in tools)
            rows.append(line)
    if unavailable:
        rows.append("## Unavailable upstreams")
        rows.extend(f"- {name}: {why}" for name, why in sorted(unavailable.items()))
    return "\n\n".join(rows)


def plan_catalog(
    servers: Sequence[ServerCatalog],
    budget: Budget,
    *,
    compress: bool = True,
    strip_output: bool = True,
    gateway_tools: Sequence[types.Tool] = (),
    unavailable: Mapping[str, str] | None = None,
) -> CatalogPlan:
    """Apply the compression phases (when ``compress``) until the catalog fits."""
    unavailable = dict(unavailable or {})
    listed = {
        s.name: [renamed(s.name, t, strip_output=strip_output) for t in s.tools] for s in servers
    }
    fixed = (
        wire_size(gateway_tools)
        + wire_size([r for s in servers for r in s.resources])
        + wire_size([r for s in servers for r in s.templates])
        + wire_size([p for s in servers for p in s.prompts])
    )
    tool_sizes = {name: wire_size(tools) for name, tools in listed.items()}
    state = _State()

    def estimate() -> int:
        kept = sum(size for name, size in tool_sizes.items() if name not in state.deferred)
        text = _instructions(servers, state, budget, unavailable)
        return fixed + kept + len(text.encode("utf-8"))

    full_size = estimate()
    size = full_size
    phases: list[int] = []
    if compress and size > budget.threshold:
        long_ones = [s for s in servers if len(s.instructions) > budget.instructions_threshold]
        if long_ones:
            state.indexed_instructions = True
            phases.append(1)
            size = estimate()
        order = sorted(
            (s for s in servers if s.tools),
            key=lambda s: (-tool_sizes[s.name] / (1 + s.calls), s.name),
        )
        for s in order:
            if size <= budget.threshold:
                break
            state.deferred.append(s.name)
            if 2 not in phases:
                phases.append(2)
            size = estimate()
        if size > budget.threshold and state.indexed_instructions:
            state.instruction_contents = False
            phases.append(3)
            size = estimate()
        if size > budget.threshold and state.deferred:
            state.batch_contents = False
            phases.append(4)
            size = estimate()

    documents: dict[str, tuple[str, str]] = {}
    if state.indexed_instructions:
        for s in servers:
            if len(s.instructions) > budget.instructions_threshold:
                documents[f"{INSTRUCTIONS_PREFIX}{s.name}"] = ("instructions", s.instructions)
    deferred: dict[str, types.Tool] = {}
    tools: list[types.Tool] = []
    for s in servers:
        if s.name in state.deferred:
            for t in listed[s.name]:
                deferred[t.name] = t
                documents[f"{TOOL_PREFIX}{t.name}"] = ("tool-definition", tool_document(t.name, t))
        else:
            tools.extend(listed[s.name])
    return CatalogPlan(
        tools=tools,
        deferred=deferred,
        deferred_servers=list(state.deferred),
        instructions=_instructions(servers, state, budget, unavailable),
        phases=phases,
        size=size,
        full_size=full_size,
        documents=documents,
    )
