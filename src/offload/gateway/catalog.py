"""Catalog compression: keep the combined catalog under a byte budget (pure).

Phases, applied in order until the estimate fits the threshold:

1. long server instructions are indexed and replaced by a summary and their contents;
2. servers' tool definitions, and their resources, resource templates and prompts, are
   deferred behind search, the parts whose deferral saves most and whose server is least
   used first (each tool definition becomes a searchable document; each resource,
   template and prompt a :class:`DeferredItem` under its label, ``resource:{server}__{uri}``,
   ``template:{server}__{uriTemplate}``, ``prompt:{server}__{prompt}``);
3. the instructions' contents are dropped, the summaries stay;
4. the deferred batches' contents (their tool names) are dropped.

The store writes this implies (instruction and tool documents) are returned as
:attr:`CatalogPlan.documents` for the caller to persist.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import mcp_types as types

from offload.core.text.preview import contents
from offload.core.untrusted import inline

SEP = "__"
TOOL_PREFIX = "tool:"
INSTRUCTIONS_PREFIX = "instructions:"
RESOURCE_PREFIX = "resource:"
TEMPLATE_PREFIX = "template:"
PROMPT_PREFIX = "prompt:"
ITEM_PREFIXES = (RESOURCE_PREFIX, TEMPLATE_PREFIX, PROMPT_PREFIX)
ItemKind = Literal["resource", "template", "prompt"]
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
    cut: str = ""  # why its catalog was cut to what fits the bounds (empty: whole)


@dataclass(frozen=True)
class Budget:
    """The numbers compression works with."""

    threshold: int = 16384
    instructions_threshold: int = 2048
    search_tool: str = "IndexSearch"
    read_tool: str = "IndexRead"
    call_tool: str = "call_tool"


@dataclass(frozen=True)
class DeferredItem:
    """A resource, resource template or prompt held back from the listings.

    A prompt carries its gateway name (``server__prompt``); resources keep their URIs.
    """

    kind: ItemKind
    server: str
    item: types.Resource | types.ResourceTemplate | types.Prompt


@dataclass(frozen=True)
class Deferral:
    """Which servers' tools, and which servers' resources, templates and prompts, a plan
    defers: handed to the next plan so that a catalog that still fits keeps its shape."""

    tools: tuple[str, ...] = ()
    items: tuple[str, ...] = ()


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
    # listed resources, templates and prompts (prompts under gateway names)
    resources: list[types.Resource] = field(default_factory=list)
    templates: list[types.ResourceTemplate] = field(default_factory=list)
    prompts: list[types.Prompt] = field(default_factory=list)
    items: dict[str, DeferredItem] = field(default_factory=dict)  # label -> deferred item
    deferred_item_servers: list[str] = field(default_factory=list)

    @property
    def deferral(self) -> Deferral:
        """What this plan defers, for the next plan (see :func:`plan_catalog`)."""
        return Deferral(tuple(self.deferred_servers), tuple(self.deferred_item_servers))


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


def item_label(kind: ItemKind, server: str, key: str) -> str:
    """The label of a deferred item: ``resource:{server}__{uri}`` (``template:``,
    ``prompt:`` alike; a prompt's key is its upstream name)."""
    prefix = {"resource": RESOURCE_PREFIX, "template": TEMPLATE_PREFIX, "prompt": PROMPT_PREFIX}
    return f"{prefix[kind]}{server}{SEP}{key}"


def renamed_prompt(server: str, prompt: types.Prompt) -> types.Prompt:
    """The upstream ``prompt`` as the gateway lists it (``server__prompt``)."""
    return prompt.model_copy(update={"name": gateway_name(server, prompt.name)})


def server_items(s: ServerCatalog) -> dict[str, DeferredItem]:
    """Every resource, template and prompt of ``s`` under its label, in catalog order."""
    out: dict[str, DeferredItem] = {}
    for r in s.resources:
        out[item_label("resource", s.name, str(r.uri))] = DeferredItem("resource", s.name, r)
    for t in s.templates:
        out[item_label("template", s.name, t.uri_template)] = DeferredItem("template", s.name, t)
    for p in s.prompts:
        out[item_label("prompt", s.name, p.name)] = DeferredItem(
            "prompt", s.name, renamed_prompt(s.name, p)
        )
    return out


def item_document(label: str, d: DeferredItem) -> str:
    """A deferred item as markdown: what it is and the exact request that reads or gets it."""
    item = d.item
    rows = [f"# {d.kind} {item.name}", ""]
    if item.title:
        rows += [item.title, ""]
    rows += [(item.description or "(no description)").strip(), ""]
    if isinstance(item, types.Resource):
        rows.append(f"- uri: {item.uri}")
        read = json.dumps({"uri": str(item.uri)}, ensure_ascii=False)
    elif isinstance(item, types.ResourceTemplate):
        rows.append(f"- uri template: {item.uri_template}")
        read = '{"uri": "<the template with its variables filled in>"}'
    else:
        for arg in item.arguments or ():
            need = ", required" if arg.required else ""
            desc = " ".join((arg.description or "").split())
            rows.append(f"- argument `{arg.name}`{need}" + (f": {desc}" if desc else ""))
        args = {a.name: "..." for a in item.arguments or ()}
        read = json.dumps({"name": item.name, "arguments": args}, ensure_ascii=False)
    if not isinstance(item, types.Prompt) and item.mime_type:
        rows.append(f"- mime type: {item.mime_type}")
    method = "prompts/get" if d.kind == "prompt" else "resources/read"
    rows += ["", f"Through this gateway: {method} {read} (label {label})", ""]
    return "\n".join(rows)


@dataclass
class _State:
    indexed_instructions: bool = False
    deferred: list[str] = field(default_factory=list)
    deferred_items: list[str] = field(default_factory=list)  # servers whose items are deferred
    instruction_contents: bool = True
    batch_contents: bool = True


def _instructions(
    servers: Sequence[ServerCatalog],
    state: _State,
    budget: Budget,
    unavailable: Mapping[str, str],
) -> str:
    rows = [
        "This is an offload gateway: upstream tools are named {server}__{tool} (a bare "
        "tool name, as an upstream's own text names it, calls the one server that has it). "
        f"Oversized tool responses are indexed; read them with {budget.read_tool} "
        f"and search them with {budget.search_tool}."
    ]
    rows += _server_instruction_rows(servers, state, budget)
    by_name = {s.name: s for s in servers}
    if state.deferred:
        rows += _deferred_tool_rows(by_name, state, budget)
    if state.deferred_items:
        rows += _deferred_item_rows(by_name, state, budget)
    cut = [s for s in servers if s.cut]
    if cut:
        rows.append("## Upstream catalogs cut to their bounds")
        rows.extend(f"- {s.name}: {inline(s.cut, 300)}" for s in cut)
    if unavailable:
        rows.append("## Unavailable upstreams")
        rows.extend(f"- {name}: {inline(why, 300)}" for name, why in sorted(unavailable.items()))
    return "\n\n".join(rows)


def _server_instruction_rows(
    servers: Sequence[ServerCatalog], state: _State, budget: Budget
) -> list[str]:
    """Each server's instructions: whole, or (indexed) a summary, contents and read call."""
    rows: list[str] = []
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
    return rows


def _deferred_tool_rows(
    by_name: Mapping[str, ServerCatalog], state: _State, budget: Budget
) -> list[str]:
    """How to find deferred tools, then a line per server whose tools are deferred."""
    rows = [
        f"## Deferred tools\nFind them with {budget.search_tool}(queries=[...]); a hit "
        f"shows the input schema. Call one by name, or through "
        f"{budget.call_tool}(name=..., arguments={{...}})."
    ]
    for name in state.deferred:
        tools = by_name[name].tools
        line = f'- {name}: {len(tools)} tools (source="{TOOL_PREFIX}{name}{SEP}")'
        if state.batch_contents:
            # upstream-written names: each an inert line fragment in our own text
            line += ": " + ", ".join(inline(t.name, 200) for t in tools)
        rows.append(line)
    return rows


def _deferred_item_rows(
    by_name: Mapping[str, ServerCatalog], state: _State, budget: Budget
) -> list[str]:
    """How to find deferred resources and prompts, then a line per server with counts."""
    rows = [
        f"## Deferred resources and prompts\nFind them with {budget.search_tool}"
        "(queries=[...]); a hit lists it for you again (resources/list, prompts/list) "
        "and names the request that reads it. resources/read and prompts/get work for "
        "deferred ones as for listed ones."
    ]
    for name in state.deferred_items:
        s = by_name[name]
        counts = [
            f"{len(s.resources)} resources",
            f"{len(s.templates)} resource templates",
            f"{len(s.prompts)} prompts",
        ]
        prefixes = ", ".join(f'"{p}{name}{SEP}"' for p in ITEM_PREFIXES)
        rows.append(f"- {name}: {', '.join(counts)} (source: one of {prefixes})")
    return rows


def plan_catalog(
    servers: Sequence[ServerCatalog],
    budget: Budget,
    *,
    compress: bool = True,
    strip_output: bool = True,
    gateway_tools: Sequence[types.Tool] = (),
    unavailable: Mapping[str, str] | None = None,
    previous: Deferral | None = None,
) -> CatalogPlan:
    """Apply the compression phases (when ``compress``) until the catalog fits.

    ``previous``: what the last plan deferred. While deferring the same still fits, the
    plan keeps it, so a server that reconnects or a change in usage does not reshuffle
    what the client lists (its tool list and its prompt cache stay). Otherwise parts are
    deferred anew and, once it fits, every part whose listing still fits is listed again.
    """
    unavailable = dict(unavailable or {})
    listed = {
        s.name: [renamed(s.name, t, strip_output=strip_output) for t in s.tools] for s in servers
    }
    prompts = {s.name: [renamed_prompt(s.name, p) for p in s.prompts] for s in servers}
    fixed = wire_size(gateway_tools)
    tool_sizes = {name: wire_size(tools) for name, tools in listed.items()}
    item_sizes = {
        s.name: wire_size(s.resources) + wire_size(s.templates) + wire_size(prompts[s.name])
        for s in servers
    }
    state = _State()

    def estimate() -> int:
        kept = sum(size for name, size in tool_sizes.items() if name not in state.deferred)
        kept += sum(size for n, size in item_sizes.items() if n not in state.deferred_items)
        text = _instructions(servers, state, budget, unavailable)
        return fixed + kept + len(text.encode("utf-8"))

    full_size = estimate()
    size = full_size
    phases: list[int] = []
    if compress and size > budget.threshold:
        size = _compress(
            servers, state, budget, _Sizes(tool_sizes, item_sizes, estimate), phases, previous
        )
    return _plan(servers, state, budget, unavailable, listed, prompts, phases, size, full_size)


@dataclass(frozen=True)
class _Sizes:
    """The wire bytes of each server's tools and of its other items, and the estimate of
    the whole listed catalog as the plan's state stands."""

    tools: Mapping[str, int]
    items: Mapping[str, int]
    estimate: Callable[[], int]


def _compress(
    servers: Sequence[ServerCatalog],
    state: _State,
    budget: Budget,
    sizes: _Sizes,
    phases: list[int],
    previous: Deferral | None,
) -> int:
    """Phases 1-4 on ``state``, in order, until ``estimate()`` fits; the final size."""
    if any(len(s.instructions) > budget.instructions_threshold for s in servers):
        state.indexed_instructions = True
        phases.append(1)
    if previous is not None:
        state.deferred = [s.name for s in servers if s.tools and s.name in previous.tools]
        state.deferred_items = [
            s.name for s in servers if _has_items(s) and s.name in previous.items
        ]
        if sizes.estimate() > budget.threshold:  # it no longer fits: plan anew
            state.deferred, state.deferred_items = [], []
    size = _defer(servers, state, budget, sizes)
    if state.deferred or state.deferred_items:
        phases.append(2)
    if size > budget.threshold and state.indexed_instructions:
        state.instruction_contents = False
        phases.append(3)
        size = sizes.estimate()
    if size > budget.threshold and state.deferred:
        state.batch_contents = False
        phases.append(4)
        size = sizes.estimate()
    return size


def _has_items(s: ServerCatalog) -> bool:
    return bool(s.resources or s.templates or s.prompts)


def _defer(servers: Sequence[ServerCatalog], state: _State, budget: Budget, sizes: _Sizes) -> int:
    """Phase 2: defer parts of the catalog (a server's tools, or its resources, templates
    and prompts together), the ones whose deferral saves most per past use of their server
    first, until the estimate fits; then list again each part deferred that still fits
    (the greedy order can defer a small part before a large one that had to go anyway).
    What ``state`` defers already (the previous plan's choice, when it fits) stays. The
    size it leaves."""
    size = sizes.estimate()
    if size <= budget.threshold:
        return size
    parts = [(s, "tools", sizes.tools[s.name]) for s in servers if s.tools]
    parts += [(s, "items", sizes.items[s.name]) for s in servers if _has_items(s)]
    parts.sort(key=lambda p: (-p[2] / (1 + p[0].calls), p[0].name, p[1]))
    added: list[tuple[str, list[str]]] = []
    for s, what, _size in parts:
        if size <= budget.threshold:
            break
        held = state.deferred if what == "tools" else state.deferred_items
        held.append(s.name)
        added.append((s.name, held))
        size = sizes.estimate()
    for name, held in reversed(added[:-1]):  # the last one added made it fit
        at = held.index(name)
        held.remove(name)
        relisted = sizes.estimate()
        if relisted <= budget.threshold:
            size = relisted
        else:
            held.insert(at, name)
    return size


def _plan(
    servers: Sequence[ServerCatalog],
    state: _State,
    budget: Budget,
    unavailable: Mapping[str, str],
    listed: Mapping[str, list[types.Tool]],
    prompts: Mapping[str, list[types.Prompt]],
    phases: list[int],
    size: int,
    full_size: int,
) -> CatalogPlan:
    documents: dict[str, tuple[str, str]] = {}
    if state.indexed_instructions:
        for s in servers:
            if len(s.instructions) > budget.instructions_threshold:
                documents[f"{INSTRUCTIONS_PREFIX}{s.name}"] = ("instructions", s.instructions)
    plan = CatalogPlan(
        tools=[],
        deferred={},
        deferred_servers=list(state.deferred),
        instructions=_instructions(servers, state, budget, unavailable),
        phases=phases,
        size=size,
        full_size=full_size,
        documents=documents,
        deferred_item_servers=list(state.deferred_items),
    )
    for s in servers:
        if s.name in state.deferred:
            for t in listed[s.name]:
                plan.deferred[t.name] = t
                documents[f"{TOOL_PREFIX}{t.name}"] = ("tool-definition", tool_document(t.name, t))
        else:
            plan.tools.extend(listed[s.name])
        if s.name in state.deferred_items:
            plan.items.update(server_items(s))
        else:
            plan.resources.extend(s.resources)
            plan.templates.extend(s.templates)
            plan.prompts.extend(prompts[s.name])
    return plan
