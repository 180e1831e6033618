"""The gateway's own tools: search the index, read from it, call a deferred tool.

``IndexSearch`` ranks indexed responses and instructions (the store's BM25 search) and
deferred tool definitions (``toolsearch``), fused by reciprocal rank. ``IndexRead`` pages
through one indexed body by lines. Stored lines reach the model inert (``core.untrusted``:
fence-like tags defused, control characters escaped). Their results are never indexed again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from offload.config import GatewaySettings
from offload.core.fence import neutralise
from offload.core.text.lines import continuation, read_lines
from offload.core.untrusted import inline, printable
from offload.errors import InvalidInput, NotFound, OtherScope
from offload.gateway.catalog import TOOL_PREFIX, DeferredItem, item_document
from offload.gateway.responses import KIND, READ_CAP_BYTES
from offload.gateway.toolsearch import ToolIndex
from offload.store.models import Filters, Hit
from offload.store.store import Store

MAX_LIMIT = 20
MAX_QUERIES = 10  # as the MCP server's search takes
DEFAULT_LIMIT = 5
CONTEXT_CHARS = 3000
READ_LIMIT = 200
MAX_LINE_CHARS = 2000
_RRF_K = 60
_SEARCHED_KINDS = (KIND, "instructions")


def definitions(settings: GatewaySettings, *, with_call_tool: bool) -> list[types.Tool]:
    """The gateway tools as listed to the client."""
    tools = [search_definition(settings.search_tool), read_definition(settings.read_tool)]
    if with_call_tool:
        tools.append(call_definition(settings.call_tool_name, settings.search_tool))
    return tools


def search_definition(name: str) -> types.Tool:
    """The search tool: indexed responses, instructions and deferred tools."""
    return types.Tool(
        name=name,
        description=(
            "Search indexed tool responses, server instructions and deferred tool "
            "definitions. Hits come best first with line numbers and context; tool hits "
            "carry their input schema and make the tool callable."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "queries": {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": 1,
                    "maxItems": MAX_QUERIES,
                    "description": "One or more searches, e.g. a task description or words "
                    "expected in the content",
                },
                "source": {
                    "type": "string",
                    "description": 'Only labels starting with this, e.g. "filesystem__read_file:3" '
                    'or "tool:github__"',
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_LIMIT,
                    "default": DEFAULT_LIMIT,
                    "description": "Hits per query",
                },
            },
            "required": ["queries"],
        },
    )


def read_definition(name: str) -> types.Tool:
    """The read tool: an indexed body by label, as numbered lines."""
    return types.Tool(
        name=name,
        description=(
            "Read an indexed body by label as numbered lines, up to ~64 KB per call; the "
            "last line says how to continue."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "label": {"type": "string", "description": 'e.g. "filesystem__read_file:3"'},
                "offset": {
                    "type": ["string", "integer"],
                    "description": 'First line, e.g. "61" (or "12-3": line 12, part 3)',
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "default": READ_LIMIT,
                    "description": "Lines to read",
                },
            },
            "required": ["label"],
        },
    )


def call_definition(name: str, search_tool: str) -> types.Tool:
    """The call tool: any upstream tool by its gateway name, deferred ones included."""
    return types.Tool(
        name=name,
        description=(
            "Call any upstream tool by its gateway name, including deferred tools "
            f"found with {search_tool}."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "e.g. github__list_issues"},
                "arguments": {"type": "object", "description": "The tool's arguments"},
            },
            "required": ["name"],
        },
    )


@dataclass(frozen=True)
class ToolOutcome:
    """A gateway tool's text, the deferred tools and the deferred items (resources,
    templates, prompts; by label) it activated."""

    text: str
    activated: tuple[str, ...] = ()
    items: tuple[str, ...] = ()


def _limit(value: Any, default: int, maximum: int | None, what: str) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{what} must be a whole number of 1 or more, got {value!r}")
    return min(value, maximum) if maximum else value


def _numbered(text: str, first_line: int, match_line: int) -> str:
    lines = text.splitlines()
    width = len(str(first_line + max(0, len(lines) - 1)))
    # keep the context near the match when the chunk is longer than the budget
    start = 0
    total = sum(len(line) + 1 for line in lines)
    if total > CONTEXT_CHARS:
        start = max(0, match_line - first_line - 5)
    rows: list[str] = []
    used = 0
    for i in range(start, len(lines)):
        row = f"{first_line + i:>{width}}  {lines[i]}"
        if used + len(row) > CONTEXT_CHARS and rows:
            rows.append(f"{'':>{width}}  […]")
            break
        rows.append(row[: CONTEXT_CHARS - used] if not rows else row)
        used += len(row) + 1
    return "\n".join(rows)


def _queries(given: Any) -> list[str]:
    """IndexSearch's ``queries``: one string or a non-empty list of non-blank strings."""
    queries = [given] if isinstance(given, str) else given
    if (
        not isinstance(queries, list)
        or not queries
        or not all(isinstance(q, str) and q.strip() for q in queries)
    ):
        raise InvalidInput(
            'queries must be a non-empty list of strings, e.g. ["open pull requests"]'
        )
    if len(queries) > MAX_QUERIES:  # each is a search of the store and of the tools
        raise InvalidInput(f"at most {MAX_QUERIES} queries per call; split the rest")
    return queries


def _hit_key(item: str | Hit, items: Mapping[str, DeferredItem]) -> tuple[str, int | None]:
    """What one hit is, to show it once across queries: a deferred item's label, a tool's
    definition label, or a stored chunk."""
    if isinstance(item, str):
        return (item if item in items else f"{TOOL_PREFIX}{item}", None)
    return (_label(item), item.chunk_id)


def _label(hit: Hit) -> str:
    # the gateway stores every body with source == its label
    return hit.entry.source or (hit.entry.labels[0] if hit.entry.labels else hit.entry.ref)


class IndexTools:
    """IndexSearch and IndexRead over one store scope and the deferred tool definitions."""

    def __init__(self, store: Store, settings: GatewaySettings) -> None:
        self.store = store
        self.settings = settings

    # -- IndexSearch -------------------------------------------------------------------------

    def search(
        self,
        args: Mapping[str, Any],
        *,
        tool_index: ToolIndex,
        tools: Mapping[str, types.Tool],
        active: Callable[[str], bool],
        items: Mapping[str, DeferredItem] | None = None,
    ) -> ToolOutcome:
        """Run every query; tool hits among ``tools`` (deferred definitions) and hits of
        deferred ``items`` (by label, ranked in ``tool_index`` too) activate."""
        items = items or {}
        queries = _queries(args.get("queries"))
        source = args.get("source")
        if source is not None and not isinstance(source, str):
            raise InvalidInput("source must be a label prefix string")
        limit = _limit(args.get("limit"), DEFAULT_LIMIT, MAX_LIMIT, "limit")
        tool_keys = [k for k in tools if not source or f"{TOOL_PREFIX}{k}".startswith(source)]
        tool_keys += [k for k in items if not source or k.startswith(source)]
        filters = Filters(scope=self.settings.scope, kinds=_SEARCHED_KINDS, source_prefix=source)
        if source and not tool_keys and self.store.count(filters) == 0:
            raise InvalidInput(self._nothing_matches(source, tools))

        shown: dict[tuple[str, int | None], str] = {}
        activated: list[str] = []
        listed_items: list[str] = []
        out: list[str] = []
        for qi, query in enumerate(queries, 1):
            # the query may quote what an upstream wrote: shown as one inert line too
            out.append(f"## Query {qi}: {json.dumps(inline(query, 500), ensure_ascii=False)}")
            ranked, by_words = self._ranked(query, limit, filters, tool_index, tool_keys)
            if not ranked:
                out.append("(no hits)")
                continue
            # a tool ranked by meaning alone is activated only when nothing holds the
            # query's words: a search for a response's contents does not churn the list
            guessing = not by_words and not any(isinstance(item, Hit) for item in ranked)
            for hi, item in enumerate(ranked, 1):
                key = _hit_key(item, items)
                where = f"query {qi} hit {hi}"
                if key in shown:
                    out.append(f"{hi}. (already shown as {shown[key]})")
                    continue
                shown[key] = where
                if isinstance(item, str) and item in items:
                    was_active = active(item)
                    if not was_active:
                        listed_items.append(item)
                    out.append(self._item_hit(hi, item, items[item], was_active))
                elif isinstance(item, str):
                    was_active = active(item)
                    activates = not was_active and (item in by_words or guessing)
                    if activates:
                        activated.append(item)
                    out.append(self._tool_hit(hi, item, tools[item], was_active, activates))
                else:
                    out.append(self._store_hit(hi, item))
        return ToolOutcome(
            "\n".join(out), tuple(dict.fromkeys(activated)), tuple(dict.fromkeys(listed_items))
        )

    def _ranked(
        self,
        query: str,
        limit: int,
        filters: Filters,
        tool_index: ToolIndex,
        tool_keys: Sequence[str],
    ) -> tuple[list[str | Hit], set[str]]:
        """The tool and store hits for ``query``, merged by rank (reciprocal rank fusion;
        at the same rank a tool holding the query's words, then a store hit, then a tool
        ranked by meaning alone), and which tool hits hold the query's words."""
        tool_hits = (
            [d.key for d, _ in tool_index.search(query, limit, keys=tool_keys)] if tool_keys else []
        )
        by_words = tool_index.word_matched(query, tool_hits) if tool_hits else set()
        store_hits = self.store.search(query, filters, limit=limit)
        items: list[str | Hit] = [*tool_hits, *store_hits]
        order: dict[int, tuple[float, int]] = {}
        for rank, key in enumerate(tool_hits):
            order[rank] = (-1.0 / (_RRF_K + rank), 0 if key in by_words else 2)
        for rank, _hit in enumerate(store_hits):
            order[len(tool_hits) + rank] = (-1.0 / (_RRF_K + rank), 1)
        ranked = sorted(range(len(items)), key=lambda i: (*order[i], i))
        return [items[i] for i in ranked[:limit]], by_words

    def _tool_hit(
        self, rank: int, key: str, tool: types.Tool, was_active: bool, activates: bool
    ) -> str:
        """A tool hit: listed already, activated by this search, or (ranked by meaning
        alone beside hits holding the query's words) left deferred: then only the call
        tool calls it, and reading its definition activates it."""
        # an upstream writes the name, description and schema: each is one inert line
        # here (no line of its own, no fence-like tag, no control or bidi character)
        desc = inline(tool.description or "", 600)
        schema = inline(json.dumps(tool.input_schema, ensure_ascii=False, separators=(",", ":")))
        key = inline(key, 300)
        through = f'{self.settings.call_tool_name}(name="{key}", arguments={{...}})'
        read = f'{self.settings.read_tool}(label="{TOOL_PREFIX}{key}")'
        if was_active or activates:
            state = "listed" if was_active else "deferred, now activated"
            how = f"call: {key}({{...}}) or {through}; full definition: {read}"
        else:
            state = "deferred"
            how = f"call: {through}; {read} lists it for you"
        return f"{rank}. tool {key} ({state})\n   {desc}\n   input schema: {schema}\n   {how}"

    def _item_hit(self, rank: int, label: str, d: DeferredItem, was_active: bool) -> str:
        state = "listed" if was_active else "deferred, now listed for you"
        item = d.item
        desc = inline(item.description or "", 600)
        if isinstance(item, types.Resource):
            what, how = f"resource {item.uri}", f'resources/read {{"uri": "{item.uri}"}}'
        elif isinstance(item, types.ResourceTemplate):
            what, how = f"resource template {item.uri_template}", "resources/read with its URI"
        else:
            what, how = f"prompt {item.name}", f'prompts/get {{"name": "{item.name}", ...}}'
        return (
            f"{rank}. {inline(what, 400)} ({state})\n"
            f"   {inline(item.name, 200)}: {desc}\n"
            f"   read: {inline(how, 600)}; definition: "
            f'{self.settings.read_tool}(label="{inline(label, 600)}")'
        )

    def _store_hit(self, rank: int, hit: Hit) -> str:
        label = _label(hit)
        body = _numbered(hit.text, hit.start_line, hit.match_line) if hit.text else hit.snippet
        body = printable(neutralise(body))  # stored lines: no fence-like tags, no controls
        return (
            f"{rank}. {label} L{hit.start_line}-{hit.end_line} (match at L{hit.match_line}, "
            f"{hit.entry.lines} lines in all)\n{body}\n"
            f'   more: {self.settings.read_tool}(label="{label}", offset="{hit.start_line}")'
        )

    def _nothing_matches(self, source: str, tools: Mapping[str, types.Tool]) -> str:
        entries = self.store.entries(
            Filters(scope=self.settings.scope, kinds=_SEARCHED_KINDS), limit=30
        )
        labels = sorted({lb for e in entries for lb in e.labels})
        servers = sorted({k.partition("__")[0] for k in tools})
        parts = [f"source {source!r} matches no indexed label"]
        parts.append("indexed labels: " + (", ".join(labels) if labels else "(none yet)"))
        if servers:
            parts.append("tool definitions: " + ", ".join(f'"{TOOL_PREFIX}{s}__"' for s in servers))
        return "; ".join(parts)

    # -- IndexRead ---------------------------------------------------------------------------

    def _how_to_find(self, label: str) -> str:
        """What a gateway client can call to find a label it misread: the search tool,
        whose ``source`` that no label starts with lists the indexed labels."""
        stem = inline(label.split(":", 1)[0], 80).replace('"', "'")
        return (
            f"it is not among this gateway's responses; {self.settings.search_tool}"
            f'(queries=["…"], source="{stem}") searches them, and lists the indexed labels '
            "when none starts with that source"
        )

    def read(
        self, args: Mapping[str, Any], items: Mapping[str, DeferredItem] | None = None
    ) -> tuple[ToolOutcome, str | None]:
        """Numbered lines of one body; returns the tool key when ``label`` names a tool.
        A label among ``items`` reads that deferred item's definition (and lists it)."""
        label = args.get("label")
        if not isinstance(label, str) or not label.strip():
            raise InvalidInput('label is required, e.g. "filesystem__read_file:3"')
        label = label.strip()
        offset = args.get("offset", 1)
        if offset is None:
            offset = 1
        limit = _limit(args.get("limit"), READ_LIMIT, None, "limit")
        item = (items or {}).get(label)
        if item is not None:
            text = item_document(label, item)
        else:
            try:
                entry = self.store.resolve(label, self.settings.scope)
            except OtherScope:  # the gateway reads only its own scope, and offers no other
                raise NotFound(label, self._how_to_find(label)) from None
            except NotFound as exc:
                raise exc.with_hint(self._how_to_find(label)) from None
            text = self.store.body(entry)
        window = read_lines(
            text, offset, limit, cap_bytes=READ_CAP_BYTES, max_line_chars=MAX_LINE_CHARS
        )
        head = (
            f"[{inline(label, 300)} — lines {window.first_line}-{window.last_line} "
            f"of {window.total_lines}]"
        )
        # stored lines reach the model as data: no fence-like tags, no control sequences
        # (tabs and line breaks stay; other controls are shown escaped, e.g. \x1b)
        parts = [head, printable(neutralise(window.text.rstrip("\n")))]
        tail = continuation(window)
        if tail:
            parts.append(tail)
        tool = label[len(TOOL_PREFIX) :] if label.startswith(TOOL_PREFIX) else None
        return ToolOutcome("\n".join(parts), items=(label,) if item else ()), tool
