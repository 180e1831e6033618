"""Minimal, verified edits of client config files: JSON, TOML and YAML (pure, no I/O).

Each edit takes a file's text (``None`` when the file does not exist yet) and returns the
new text. An edit that changes nothing returns the text unchanged, byte for byte. TOML and
YAML are edited as text (comments and layout of the rest survive) and the result is parsed
again: unless it holds exactly the old document plus the new entry, the edit is refused
with :class:`~offload.errors.InvalidInput` and the caller changes nothing.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Sequence
from typing import Any

import yaml

from offload.core.clients import jsonc as client_jsonc
from offload.errors import InvalidInput

Value = Any  # a JSON-shaped value: str, int, bool, list, dict


def unreadable(name: str, fmt: str, detail: str) -> InvalidInput:
    """The one-line refusal for a config file that cannot be parsed."""
    detail = " ".join(detail.split())[:160]
    return InvalidInput(f"{name} is not valid {fmt} ({detail}); nothing changed, fix or move it")


def parse(text: str | None, fmt: str, name: str) -> Any:
    """The document in ``text`` (``None`` for an absent or empty file). ``fmt``: "json",
    "jsonc" (comments and trailing commas, :mod:`offload.core.clients.jsonc`), "toml" or
    "yaml"."""
    if text is None or not text.strip():
        return None
    if fmt == "jsonc":
        return client_jsonc.loads(text, name)
    try:
        if fmt == "json":
            return json.loads(text)
        if fmt == "toml":
            return tomllib.loads(text)
        return yaml.safe_load(text)
    except (
        ValueError,
        yaml.YAMLError,
    ) as exc:  # JSONDecodeError and TOMLDecodeError are ValueErrors
        raise unreadable(name, fmt.upper(), str(exc)) from exc
    except RecursionError:  # arrays or tables nested past the interpreter's stack
        raise unreadable(name, fmt.upper(), "nested too deeply") from None


def dig(doc: Any, path: Sequence[str]) -> Any:
    """``doc[path[0]][path[1]]...``; ``None`` when any step is missing or not a mapping."""
    for key in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def _mapping(doc: Any, name: str, fmt: str) -> dict[str, Any]:
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise InvalidInput(f"{name}: expected a {fmt} object at the top; nothing changed")
    return doc


def json_set(
    text: str | None, path: Sequence[str], value: Value, name: str, fmt: str = "json"
) -> str:
    """Set ``path`` to ``value`` in a JSON object; intermediate objects are created. Only
    the entry's span of the text is edited (:mod:`offload.core.clients.jsonc`): the rest
    keeps its layout, and with ``fmt`` "jsonc" its comments; a new file is two-space JSON."""
    doc = _mapping(parse(text, fmt, name), name, "JSON")
    if text is not None and dig(doc, path) == value:
        return text
    node = doc
    for key in path[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise InvalidInput(f"{name}: {key!r} is not an object; nothing changed")
        node = child
    node[path[-1]] = value
    if text and text.strip():  # edited in place: the rest keeps its layout and comments
        return _checked(client_jsonc.set_at(text, path, value, name), doc, name)
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def _checked(new: str, expected: Any, name: str) -> str:
    """``new`` if it parses to ``expected``; refused otherwise."""
    try:
        safe = client_jsonc.loads(new, name) == expected
    except InvalidInput:
        safe = False
    if not safe:
        raise InvalidInput(
            f"{name}: cannot edit the offload entry safely (unusual layout); nothing changed, "
            "edit it by hand"
        )
    return new


def present(doc: Any, path: Sequence[str]) -> int:
    """How many leading keys of ``path`` name objects present in ``doc`` (0: only the
    document itself, if that): the parents an entry's removal must leave in place."""
    n = 0
    for i in range(1, len(path)):
        if not isinstance(dig(doc, path[:i]), dict):
            break
        n = i
    return n


def removed(doc: Any, path: Sequence[str], keep: int) -> Any:
    """A copy of ``doc`` without ``path``; parents left empty go too, except the first
    ``keep`` keys of the path (they were there before)."""
    if not isinstance(doc, dict) or not path or path[0] not in doc:
        return doc
    out = dict(doc)
    if len(path) == 1:
        del out[path[0]]
        return out
    child = removed(out[path[0]], path[1:], keep - 1)
    if child == {} and keep <= 0:
        del out[path[0]]
    else:
        out[path[0]] = child
    return out


def json_unset(text: str, path: Sequence[str], keep: int, name: str, fmt: str = "json") -> str:
    """``text`` without ``path`` (see :func:`removed`); unchanged when it is absent."""
    doc = _mapping(parse(text, fmt, name), name, "JSON")
    if dig(doc, path) is None:
        return text
    expected = removed(doc, path, keep)
    return _checked(client_jsonc.unset_at(text, path, keep, name), expected, name)


def _toml_header(line: str) -> str | None:
    """The dotted name of a ``[table]`` header line (quotes and spaces dropped), else None."""
    s = line.strip()
    if not s.startswith("[") or s.startswith("[["):
        return None
    end = s.find("]")
    if end < 0:
        return None
    return "".join(part.strip().strip("\"'") + "." for part in s[1:end].split("."))[:-1]


def _toml_value(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
        )
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string


def without(doc: dict[str, Any], path: Sequence[str]) -> dict[str, Any]:
    """A copy of ``doc`` without ``path`` (and without parents left empty by that)."""
    if not path or path[0] not in doc:
        return doc
    out = dict(doc)
    if len(path) == 1:
        del out[path[0]]
        return out
    child = out[path[0]]
    if isinstance(child, dict):
        rest = without(child, path[1:])
        if rest:
            out[path[0]] = rest
        else:
            del out[path[0]]
    return out


def toml_set_table(
    text: str | None, path: Sequence[str], table: dict[str, Value], name: str
) -> str:
    """Make ``[path]`` exactly ``table``: drop the old table and its sub-tables, append ours."""
    doc = _mapping(parse(text, "toml", name), name, "TOML")
    if text is not None and dig(doc, path) == table:
        return text
    dotted = ".".join(path)

    def ours(line: str) -> bool | None:
        header = _toml_header(line)
        return None if header is None else header == dotted or header.startswith(dotted + ".")

    head = _drop_blocks(text or "", ours).rstrip()
    block = f"[{dotted}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in table.items())
    new = f"{head}\n\n{block}" if head else block
    _verify(new, "toml", path, table, doc, name)
    return new


def toml_unset_table(text: str, path: Sequence[str], name: str) -> str:
    """``text`` without ``[path]`` and its sub-tables; unchanged when there is none."""
    doc = _mapping(parse(text, "toml", name), name, "TOML")
    if dig(doc, path) is None:
        return text
    dotted = ".".join(path)

    def ours(line: str) -> bool | None:
        header = _toml_header(line)
        return None if header is None else header == dotted or header.startswith(dotted + ".")

    new = _drop_blocks(text, ours).rstrip() + "\n"
    _verify_removed(new, "toml", path, doc, name)
    return new


def _drop_blocks(text: str, starts: Callable[[str], bool | None]) -> str:
    """``text`` without the blocks that ``starts`` opens (True: one of ours begins, False:
    another begins, None: the current block goes on). Comments and blank lines at the end
    of a dropped block belong to what follows, and are kept."""
    kept: list[str] = []
    pending: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        begins = starts(line)
        if begins is not None:
            if skipping and not begins:
                kept.extend(pending)
            pending = []
            skipping = begins
        if not skipping:
            kept.append(line)
        elif not line.strip() or line.lstrip().startswith("#"):
            pending.append(line)
        else:
            pending = []
    return "".join(kept)


def _yaml_blocks(text: str) -> list[tuple[int, int]]:
    """(start, end) line spans of the top-level items of a block-style YAML sequence."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith("-")]
    return [(s, starts[n + 1] if n + 1 < len(starts) else len(lines)) for n, s in enumerate(starts)]


def _yaml_top(line: str) -> bool:
    """A line that starts a top-level key of a YAML mapping (not a continuation, a comment,
    a blank line or a sequence item written at the key's indent)."""
    return line[:1] not in ("", " ", "\t", "#", "\n", "\r", "-")


def _yaml_key_spans(lines: list[str], key: str) -> list[tuple[int, int]]:
    """(start, end) line spans of the top-level ``key``'s blocks; comments and blank lines
    at a block's end are not in its span (they belong to what follows)."""
    spans = []
    for start, line in enumerate(lines):
        if not _yaml_top(line) or line.split(":", 1)[0].strip().strip("\"'") != key:
            continue
        end = next((i for i in range(start + 1, len(lines)) if _yaml_top(lines[i])), len(lines))
        while end > start + 1 and (
            not lines[end - 1].strip() or lines[end - 1].lstrip()[:1] == "#"
        ):
            end -= 1
        spans.append((start, end))
    return spans


def _lines(text: str | None) -> list[str]:
    lines = (text or "").splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    return lines


def yaml_key_text(text: str | None, key: str) -> str:
    """The text of the top-level ``key``'s block in ``text`` (its comments inside, not the
    ones after it); "" when there is none. Revert writes it back as it was."""
    lines = _lines(text)
    spans = _yaml_key_spans(lines, key)
    return "".join(lines[spans[0][0] : spans[0][1]]) if spans else ""


def _yaml_render(key: str, value: Value) -> str:
    """``key: value`` in block style (a mapping or a list one entry a line, as a person
    writes it); a scalar or an empty collection on the key's line."""
    if isinstance(value, (dict, list)) and value:
        dumped = yaml.safe_dump(
            value, sort_keys=False, allow_unicode=True, default_flow_style=False, width=2**16
        )
        return f"{key}:\n" + "".join("  " + ln for ln in dumped.splitlines(keepends=True))
    return f"{key}: {json.dumps(value, ensure_ascii=False)}\n"


def _holds(block: str, key: str, value: Value) -> bool:
    try:
        return bool(block) and yaml.safe_load(block) == {key: value}
    except yaml.YAMLError:
        return False


def yaml_set_key(text: str | None, key: str, value: Value, name: str, block: str = "") -> str:
    """Set a top-level ``key: value`` in a YAML mapping, keeping every other line: the new
    block takes the old one's place (the end of the file when there was none). ``block``:
    the exact text to write (a block revert saved), used when it holds ``key: value``."""
    doc = _mapping(parse(text, "yaml", name), name, "YAML")
    if text is not None and doc.get(key) == value:
        return text
    lines = _lines(text)
    spans = _yaml_key_spans(lines, key)
    rendered = block if _holds(block, key, value) else _yaml_render(key, value)
    if not rendered.endswith("\n"):
        rendered += "\n"
    if spans:
        drop = {i for start, end in spans for i in range(start, end)}
        first = spans[0][0]
        new = "".join(
            (rendered if i == first else "") + ("" if i in drop else line)
            for i, line in enumerate(lines)
        )
    else:
        head = "".join(lines).rstrip()
        new = f"{head}\n{rendered}" if head else rendered
    _verify(new, "yaml", [key], value, doc, name)
    return new


def yaml_unset_key(text: str, key: str, name: str) -> str:
    """``text`` without the top-level ``key``; unchanged when it is absent."""
    doc = _mapping(parse(text, "yaml", name), name, "YAML")
    if key not in doc:
        return text
    lines = _lines(text)
    drop = {i for start, end in _yaml_key_spans(lines, key) for i in range(start, end)}
    new = "".join(line for i, line in enumerate(lines) if i not in drop).rstrip() + "\n"
    _verify_removed(new, "yaml", [key], doc, name)
    return new


def yaml_unset_item(text: str, match: tuple[str, str], name: str) -> str:
    """``text`` without the items of its top-level YAML sequence whose ``match[0]`` is
    ``match[1]``; unchanged when there is none."""
    doc = parse(text, "yaml", name)
    key, wanted = match
    if not isinstance(doc, list) or not any(dig(x, [key]) == wanted for x in doc):
        return text
    lines = text.splitlines(keepends=True)
    drop: set[int] = set()
    for start, end in _yaml_blocks(text):
        block = yaml.safe_load("".join(lines[start:end]))
        if isinstance(block, list) and block and dig(block[0], [key]) == wanted:
            drop.update(range(start, end))
    new = "".join(line for i, line in enumerate(lines) if i not in drop).rstrip() + "\n"
    try:
        safe = (parse(new, "yaml", name) or []) == [x for x in doc if dig(x, [key]) != wanted]
    except InvalidInput:
        safe = False
    if not safe:
        raise InvalidInput(f"{name}: cannot remove the {wanted!r} entry safely; edit it by hand")
    return new


def yaml_set_item(
    text: str | None, match: tuple[str, str], item: dict[str, Value], name: str
) -> str:
    """Make the item of a YAML sequence whose ``match[0]`` is ``match[1]`` exactly ``item``."""
    doc = parse(text, "yaml", name)
    if doc is None:
        doc = []
    if not isinstance(doc, list):
        raise InvalidInput(f"{name}: expected a YAML list at the top; nothing changed")
    if text is not None and item in doc:
        return text
    key, wanted = match
    lines = (text or "").splitlines(keepends=True)
    drop: set[int] = set()
    for start, end in _yaml_blocks(text or ""):
        block = yaml.safe_load("".join(lines[start:end]))
        if isinstance(block, list) and block and dig(block[0], [key]) == wanted:
            drop.update(range(start, end))
    head = "".join(line for i, line in enumerate(lines) if i not in drop).rstrip()
    rendered = "".join(
        f"{'- ' if n == 0 else '  '}{k}: {json.dumps(v, ensure_ascii=False)}\n"
        for n, (k, v) in enumerate(item.items())
    )
    new = f"{head}\n{rendered}" if head else rendered
    expected = [x for x in doc if dig(x, [key]) != wanted] + [item]
    try:
        safe = parse(new, "yaml", name) == expected
    except InvalidInput:
        safe = False
    if not safe:
        raise InvalidInput(f"{name}: cannot add the {wanted!r} entry safely; nothing changed")
    return new


def _verify(
    new: str, fmt: str, path: Sequence[str], value: Value, old: dict[str, Any], name: str
) -> None:
    """Refuse unless ``new`` parses to ``old`` with ``path`` set to ``value`` and nothing else."""
    refusal = InvalidInput(
        f"{name}: cannot set {'.'.join(path)} safely (unusual layout); nothing changed, "
        "edit it by hand"
    )
    try:
        got = _mapping(parse(new, fmt, name), name, fmt.upper())
    except InvalidInput as exc:
        raise refusal from exc
    if dig(got, path) != value or without(got, path) != without(old, path):
        raise refusal


def _verify_removed(
    new: str, fmt: str, path: Sequence[str], old: dict[str, Any], name: str
) -> None:
    """Refuse unless ``new`` parses to ``old`` without ``path`` and nothing else."""
    try:
        got = parse(new, fmt, name) or {}
    except InvalidInput:
        got = None
    if got != without(old, path) and got != removed(old, path, len(path)):
        raise InvalidInput(
            f"{name}: cannot remove {'.'.join(path)} safely (unusual layout); edit it by hand"
        )
