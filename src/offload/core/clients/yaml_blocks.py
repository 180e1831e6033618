"""Entries one level down in a YAML config, edited as text (pure, no I/O).

Hermes Agent (``mcp_servers:`` a mapping of servers), Goose (``extensions:``) and Continue
(``mcpServers:`` and ``models:``, lists of blocks with a ``name``) keep their entries under
a top-level key. Only that key's block is touched: offload's child (a mapping key, or the
list item whose ``match`` field names it) is dropped and written again at the block's end;
every other line, comment and layout stays. The result is parsed back and refused unless
it holds exactly the old document with offload's entry set (or removed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from offload.core.clients.edits import Value, parse
from offload.errors import InvalidInput

EMPTY = ("", "{}", "[]", "null", "~")  # a parent key's inline value that holds nothing


@dataclass(frozen=True)
class Nested:
    """Where the entry lives: ``parent``'s block, the child ``key`` (a mapping key, or with
    ``match`` the value of that field in a list item)."""

    parent: str
    key: str
    match: str = ""  # "" for a mapping child; the naming field of a list item otherwise


def _top(line: str) -> bool:
    """A line that starts a new top-level key (not a continuation, comment or list item)."""
    return line[:1] not in ("", " ", "\t", "#", "\n", "\r", "-")


def _key_of(line: str) -> str:
    return line.split(":", 1)[0].strip().strip("\"'")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _content(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _block(lines: list[str], parent: str) -> tuple[int, int] | None:
    """The parent's key line and the end of its block (trailing blank lines and comments
    excluded: they belong to what follows)."""
    start = next((i for i, ln in enumerate(lines) if _top(ln) and _key_of(ln) == parent), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if _top(lines[i])), len(lines))
    while end > start + 1 and not _content(lines[end - 1]):
        end -= 1
    return start, end


def _children(lines: list[str], start: int, end: int, spec: Nested) -> tuple[int, list[range]]:
    """The children's indent and the line ranges of the children that are offload's."""
    body = [i for i in range(start + 1, end) if _content(lines[i])]
    indent = _indent(lines[body[0]]) if body else 2
    heads = [
        i
        for i in body
        if _indent(lines[i]) == indent and lines[i].lstrip(" ").startswith("-") == bool(spec.match)
    ]
    ours = []
    for n, head in enumerate(heads):
        stop = heads[n + 1] if n + 1 < len(heads) else end
        if _is_ours(lines[head:stop], indent, spec):
            ours.append(range(head, stop))
    return indent, ours


def _is_ours(block: list[str], indent: int, spec: Nested) -> bool:
    if not spec.match:
        return _key_of(block[0]) == spec.key
    try:
        item = yaml.safe_load("".join(line[indent:] for line in block))
    except yaml.YAMLError:
        return False
    return isinstance(item, list) and bool(item) and _named(item[0], spec)


def _named(item: Any, spec: Nested) -> bool:
    return isinstance(item, dict) and item.get(spec.match) == spec.key


def _render(value: Value, indent: int, spec: Nested) -> list[str]:
    pad = " " * indent
    if spec.match:
        dumped = yaml.safe_dump([value], sort_keys=False, allow_unicode=True)
        return [pad + line for line in dumped.splitlines(keepends=True)]
    dumped = yaml.safe_dump(value, sort_keys=False, allow_unicode=True)
    return [f"{pad}{spec.key}:\n"] + [pad + "  " + ln for ln in dumped.splitlines(keepends=True)]


def current(doc: Any, spec: Nested) -> Value:
    """offload's entry in the parsed document, or None."""
    node = doc.get(spec.parent) if isinstance(doc, dict) else None
    if spec.match:
        found = [x for x in node if _named(x, spec)] if isinstance(node, list) else []
        return found[0] if found else None
    return node.get(spec.key) if isinstance(node, dict) else None


def _expected(doc: dict[str, Any], spec: Nested, value: Value | None, keep: bool) -> Any:
    """The document with offload's entry set to ``value`` (None: removed; the parent goes
    too when it is left empty and ``keep`` is false)."""
    out = dict(doc)
    node = out.get(spec.parent)
    if spec.match:
        items = [x for x in node if not _named(x, spec)] if isinstance(node, list) else []
        children: Any = items + ([value] if value is not None else [])
    else:
        children = {k: v for k, v in (node or {}).items() if k != spec.key}
        if value is not None:
            children[spec.key] = value
    if children or keep:
        out[spec.parent] = children
    else:
        out.pop(spec.parent, None)
    return out


def _mapping(text: str | None, name: str) -> dict[str, Any]:
    doc = parse(text, "yaml", name)
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise InvalidInput(f"{name}: expected a YAML mapping at the top; nothing changed")
    return doc


def _edit(text: str | None, spec: Nested, value: Value | None, keep: bool, name: str) -> str:
    doc = _mapping(text, name)
    node, shape = doc.get(spec.parent), list if spec.match else dict
    if node is not None and not isinstance(node, shape):
        kind = "a list" if spec.match else "a mapping"
        raise InvalidInput(f"{name}: {spec.parent} is not {kind}; nothing changed, edit it by hand")
    lines = (text or "").splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    span = _block(lines, spec.parent)
    if span is None:
        if value is None:
            return text or ""
        head = "".join(lines).rstrip()
        added = [f"{spec.parent}:\n", *_render(value, 2, spec)]
        new = (head + "\n" if head else "") + "".join(added)
    else:
        start, end = span
        inline = lines[start].partition(":")[2].split(" #", 1)[0].strip()
        if inline not in EMPTY:
            raise InvalidInput(
                f"{name}: {spec.parent} is written inline; nothing changed, edit it by hand"
            )
        indent, ours = _children(lines, start, end, spec)
        drop = {i for r in ours for i in r}
        kept = [lines[i] for i in range(start + 1, end) if i not in drop]
        added = _render(value, indent, spec) if value is not None else []
        children = [ln for ln in kept + added if _content(ln)]
        if children:
            parent = [f"{spec.parent}:\n"]
        elif keep:
            parent = [f"{spec.parent}: {'[]' if spec.match else '{}'}\n"]
        else:
            parent = []
        middle = parent + (kept + added if children else [])
        new = "".join(lines[:start] + middle + lines[end:])
    _verify(new, _expected(doc, spec, value, keep), name)
    return new


def _verify(new: str, expected: Any, name: str) -> None:
    try:
        got = parse(new, "yaml", name) or {}
    except InvalidInput:
        got = None
    if got != expected:
        raise InvalidInput(
            f"{name}: cannot edit the offload entry safely (unusual layout); nothing changed, "
            "edit it by hand"
        )


def nested_set(text: str | None, spec: Nested, value: Value, name: str) -> str:
    """``text`` with offload's entry set to ``value``; unchanged when it already is."""
    if text is not None and current(_mapping(text, name), spec) == value:
        return text
    return _edit(text, spec, value, True, name)


def nested_unset(text: str, spec: Nested, keep: bool, name: str) -> str:
    """``text`` without offload's entry; the parent key goes too when left empty, unless
    ``keep`` (it was there before setup)."""
    if current(_mapping(text, name), spec) is None:
        return text
    return _edit(text, spec, None, keep, name)
