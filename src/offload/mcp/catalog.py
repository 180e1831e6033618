"""The tool catalog: names, terse descriptions and hand-written JSON schemas.

Every token here is paid by every agent on every turn, so schemas carry no titles and
descriptions only where a name does not speak for itself. Names match context-hydra's so
agent protocols written for it keep working. :func:`catalog_tokens` measures the cost.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from offload.core.tokens import TokenCounter, default_counter
from offload.errors import ConfigError

_S: dict[str, Any] = {"type": "string"}
_I: dict[str, Any] = {"type": "integer"}
_N: dict[str, Any] = {"type": "number"}
_B: dict[str, Any] = {"type": "boolean"}
_LIST: dict[str, Any] = {"type": "array", "items": _S}


def _obj(required: Sequence[str] = (), **props: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = list(required)
    return schema


def _ref() -> dict[str, Any]:
    return _obj(["ref"], ref=_S)


@dataclass(frozen=True)
class ToolDef:
    """One tool as the client sees it."""

    name: str
    description: str
    schema: Mapping[str, Any]


TOOLS: tuple[ToolDef, ...] = (
    ToolDef("peek", "Counts only (cold/hot/pinned, kinds, tokens). Cheapest start.", _obj()),
    ToolDef(
        "matrix",
        "Index by salience, one line per entry: ref | topic [tags] | kind | salience | "
        "status | ~tokens.",
        _obj(offset=_I, limit=_I),
    ),
    ToolDef(
        "search",
        "Ranked full-text search over bodies; several queries per call. Hits: ref, lines, "
        "snippet. No queries: list entries matching the filters. explain: why each hit "
        "ranks where it does.",
        _obj(
            queries=_LIST,
            kind=_S,
            status={"enum": ["cold", "hot"]},
            min_salience=_N,
            source={"type": "string", "description": "prefix"},
            all_scopes=_B,
            limit=_I,
            explain=_B,
        ),
    ),
    ToolDef("recall", "An entry's summary and metadata.", _obj(["ref"], ref=_S, all_scopes=_B)),
    ToolDef(
        "read",
        "Numbered lines of a body (default 200, ~64 KB per call); ends with the call to continue. "
        "original: a compressed entry's original. max_tokens: stop before a line past it.",
        _obj(
            ["ref"],
            ref=_S,
            offset={"type": ["integer", "string"]},
            limit=_I,
            original=_B,
            max_tokens=_I,
            all_scopes=_B,
        ),
    ),
    ToolDef("checkout", "Full body, fenced; marks it hot. Keep the nonce for checkin.", _ref()),
    ToolDef("checkin", "Mark a checked-out entry cold.", _obj(["ref", "nonce"], ref=_S, nonce=_S)),
    ToolDef(
        "offload",
        "Store content; returns its ref. summary defaults to an extractive gist; compress "
        "stores a local-model compression (original kept); when: the date it tells of "
        "(ISO, e.g. 2023-05-08), if not today.",
        _obj(
            ["content"],
            content=_S,
            when=_S,
            kind=_S,
            topic=_S,
            summary=_S,
            tags=_LIST,
            salience=_N,
            pin=_B,
            compress=_B,
        ),
    ),
    ToolDef(
        "offload_path",
        "Store a text file by path; the server reads it (allowed roots only).",
        _obj(["path"], path=_S, kind=_S, topic=_S, tags=_LIST),
    ),
    ToolDef(
        "offload_path_sectioned",
        "Store a markdown file, one entry per heading section (level: 1-6, default 2); "
        "re-running replaces the file's sections.",
        _obj(["path"], path=_S, level=_I, tags=_LIST),
    ),
    ToolDef(
        "checkout_remote",
        "A body distilled by the local model, fenced.",
        _obj(["ref"], ref=_S, focus=_S, all_scopes=_B),
    ),
    ToolDef("pin", "Salience 1, never reaped.", _ref()),
    ToolDef("unpin", "", _ref()),
    ToolDef(
        "reap",
        "Forget unpinned entries idle over older_than (30m, 12h, 7d) and/or at most max_salience.",
        _obj(
            older_than=_S,
            max_salience=_N,
            status={"enum": ["cold", "hot", "any"]},
            dry_run=_B,
        ),
    ),
    ToolDef("forget", "Remove an entry; a tombstone says why.", _ref()),
    ToolDef("stats", "This session's operation counts and volumes.", _obj()),
    ToolDef(
        "retrieve",
        "The full original by any ref, fenced.",
        _obj(["ref"], ref=_S, all_scopes=_B),
    ),
    ToolDef(
        "snapshot",
        "Save working state under a name so a later session can restore it.",
        _obj(["task"], name=_S, task=_S, decisions=_LIST, threads=_LIST, refs=_LIST),
    ),
    ToolDef("restore", "Load a snapshot (default: the latest).", _obj(name=_S)),
)

TOOL_NAMES: tuple[str, ...] = tuple(t.name for t in TOOLS)


def select(names: Iterable[str]) -> tuple[ToolDef, ...]:
    """The tools named (all when empty), in catalog order; unknown names are an error."""
    wanted = [n.strip() for n in names if n.strip()]
    if not wanted:
        return TOOLS
    unknown = sorted(set(wanted) - set(TOOL_NAMES))
    if unknown:
        raise ConfigError(
            f"unknown MCP tool(s): {', '.join(unknown)}; choose from {', '.join(TOOL_NAMES)}"
        )
    return tuple(t for t in TOOLS if t.name in wanted)


def wire(tool: ToolDef) -> dict[str, Any]:
    """The tool as serialized in a ``tools/list`` result."""
    out: dict[str, Any] = {"name": tool.name}
    if tool.description:
        out["description"] = tool.description
    out["inputSchema"] = dict(tool.schema)
    return out


def catalog_json(tools: Sequence[ToolDef] = TOOLS) -> str:
    """The serialized catalog (compact JSON, as on the wire)."""
    return json.dumps([wire(t) for t in tools], separators=(",", ":"), ensure_ascii=False)


def catalog_tokens(tools: Sequence[ToolDef] = TOOLS, counter: TokenCounter | None = None) -> int:
    """What the catalog costs in real BPE tokens (cl100k, offline)."""
    return (counter or default_counter()).count(catalog_json(tools))
