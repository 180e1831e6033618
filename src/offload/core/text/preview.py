"""Previews and tables of contents of bulky content (pure, deterministic).

``preview`` shows the first lines of a text within a byte budget, or, for JSON too big for
the budget, a structure-aware summary (keys, types, sizes, first and last array items, items
that look like errors). ``contents`` finds where the structure is (markdown headings, JSON
keys and array batches, log sections, top-level code definitions), with line numbers counted
on the original text under the line rule of ``core.text.lines``.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from offload.core.text.lines import line_content, line_count, split_lines
from offload.core.text.markdown import atx_heading, is_atx_heading
from offload.core.text.numbers import whole_number
from offload.core.untrusted import inline
from offload.errors import InvalidInput

Kind = Literal["json", "markdown", "log", "code", "text"]

#: Appended to a first line cut mid-way because it alone is over the budget.
CUT_MARKER = "…"
#: Array items per contents entry for large JSON arrays.
JSON_BATCH = 50
_TITLE_MAX = 80
_SAMPLE_LINES = 2000

_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*")
_NOT_PARAGRAPH = re.compile(r" {0,3}(?:[-*+>|]|\d+[.)]|`{3}|~{3})")
_MD_LIST = re.compile(r"\s*(?:[-*+]|\d+\.)\s+\S")
# Link text stops at the next bracket and the target at the next parenthesis, so a scan
# never rereads the rest of a line from every ``[`` (linear).
_MD_LINK = re.compile(r"\[[^\[\]]+\]\([^()\s]+\)")
_CODE_DEF = re.compile(
    r"(?:async\s+def|def|class|function|async\s+function|func|fn"
    r"|pub(?:\([^)]*\))?\s+(?:async\s+)?fn"
    r"|export\s+(?:default\s+)?(?:async\s+)?(?:function|class))\b"
)
_CODE_IMPORT = re.compile(
    r"(?:import\s+\S|from\s+\S+\s+import\s|#include\s*[<\"]|package\s+\w|use\s+[\w:]+;"
    r"|(?:const|let|var)\s+\w+\s*=\s*require\()"
)
_TS_ISO = re.compile(r"\W{0,3}(\d{4}-\d{2}-\d{2})[T ](\d{2}):\d{2}")
_TS_SYSLOG = re.compile(r"([A-Z][a-z]{2} +\d{1,2}) (\d{2}):\d{2}:\d{2}")
_LOG_LEVEL = re.compile(
    r"\W{0,3}(?:TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|FATAL|CRITICAL)\b[\]:\s]"
)
_SECTION = re.compile(r"\s*([=\-*#])\1{2,}\s+(\S.*?)\s+\1{3,}\s*")
_TRACEBACK = "Traceback (most recent call last)"
_EXCEPTION = re.compile(r"[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)\b")
# The closing quote is optional so an unterminated string is consumed once instead of
# rescanned from every later quote (valid JSON tokenises the same).
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"?|[{}\[\],:]', re.S)
_NON_SPACE = re.compile(r"\S")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")


@dataclass(frozen=True)
class TocEntry:
    """One contents entry: the 1-based line where it starts, a one-line title, a level."""

    line: int
    title: str
    level: int = 1


@dataclass(frozen=True)
class Preview:
    """The start (or, for JSON, a structural summary) of a text.

    ``end_line`` is the last line the preview shows (0 for a structural summary, which
    follows no line order); ``cut_mid_line`` says the first line alone was over the budget
    and was cut (marked with ``CUT_MARKER``).
    """

    text: str
    end_line: int
    total_lines: int
    kind: Kind = "text"
    structural: bool = False
    cut_mid_line: bool = False

    @property
    def complete(self) -> bool:
        """True when the preview is the whole text."""
        return not self.structural and not self.cut_mid_line and self.end_line >= self.total_lines

    @property
    def next_line(self) -> int:
        """The line a reader continues from (1 when the preview followed no line order)."""
        if self.structural or self.complete:
            return 1
        return self.end_line if self.cut_mid_line else self.end_line + 1


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _clip(text: str, limit: int) -> str:
    """Flatten to one line and cut to ``limit`` characters, marking the cut."""
    flat = _CONTROL.sub(" ", text).strip()
    if len(flat) <= limit:
        return flat
    return flat[: max(0, limit - 1)].rstrip() + "…"


@lru_cache(maxsize=4)
def _parse_json(text: str) -> tuple[bool, Any]:
    """(True, value) when ``text`` is a JSON object or array; cached for the three readers."""
    head = text.lstrip()[:1]
    if head not in ("{", "["):
        return False, None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False, None
    return isinstance(value, dict | list), value


def _iter_sample(text: str, limit: int) -> Iterator[str]:
    """Line contents of the first ``limit`` lines, without splitting the whole text."""
    start = 0
    for _ in range(limit):
        if start >= len(text):
            return
        nl = text.find("\n", start)
        end = len(text) if nl < 0 else nl + 1
        yield line_content(text[start:end])
        start = end


def detect_kind(text: str) -> Kind:
    """Guess what ``text`` is, from its first lines (JSON from the whole text)."""
    if _parse_json(text)[0]:
        return "json"
    nonempty = 0
    log_lines = 0
    headings = fences = lists = links = code = 0
    in_fence = False
    for line in _iter_sample(text, _SAMPLE_LINES):
        if not line.strip():
            continue
        nonempty += 1
        if _TS_ISO.match(line) or _TS_SYSLOG.match(line) or _LOG_LEVEL.match(line):
            log_lines += 1
        if _FENCE.match(line):
            fences += 1
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        if is_atx_heading(line):
            headings += 1
        elif _CODE_DEF.match(line) or _CODE_IMPORT.match(line):
            code += 1
        if _MD_LIST.match(line):
            lists += 1
        if _MD_LINK.search(line):
            links += 1
    if nonempty == 0:
        return "text"
    if log_lines >= 2 and log_lines * 10 >= nonempty * 3:
        return "log"
    if code >= 2 and fences == 0 and code * 3 >= headings:
        return "code"
    if fences >= 2 or headings >= 2 or (headings == 1 and (lists or links or nonempty <= 3)):
        return "markdown"
    if code >= 2:
        return "code"
    return "text"


# ----------------------------------------------------------------------------- preview


def preview(text: str, max_bytes: int = 2048) -> Preview:
    """A preview of ``text`` within ``max_bytes`` UTF-8 bytes.

    Text: the first whole lines that fit (terminator of the last one dropped); if the first
    line alone is over the budget it is cut at a character boundary and marked. JSON over
    the budget: a structural summary. Never more than ``max(max_bytes, 3)`` bytes.
    """
    if max_bytes < 1:
        raise InvalidInput(f"max_bytes must be 1 or more, got {max_bytes}")
    total = line_count(text)
    kind = detect_kind(text)
    if len(text) <= max_bytes and _nbytes(text) <= max_bytes:
        return Preview(text, total, total, kind)
    if kind == "json":
        summary = _json_summary(_parse_json(text)[1], max_bytes)
        return Preview(summary, 0, total, kind, structural=True)

    used = 0
    end = 0
    shown = 0
    while end < len(text):
        nl = text.find("\n", end)
        stop = len(text) if nl < 0 else nl + 1
        size = _nbytes(text[end:stop])
        if used + size > max_bytes:
            break
        used += size
        end = stop
        shown += 1
    if shown:
        body = text[:end]
        body = body[:-2] if body.endswith("\r\n") else body[:-1] if body.endswith("\n") else body
        return Preview(body, shown, total, kind)

    first = text[: max_bytes + 1].split("\n", 1)[0]
    budget = max(0, max_bytes - _nbytes(CUT_MARKER))
    # Dropping an incomplete trailing sequence keeps the cut on a character boundary.
    cut = first.encode("utf-8", "surrogatepass")[:budget].decode("utf-8", "ignore")
    return Preview(cut + CUT_MARKER, 1, total, kind, cut_mid_line=True)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _type_name(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"


def _compact(value: Any, chars: int) -> str:
    dumped = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return _clip(dumped, chars)


def _describe(value: Any, chars: int) -> str:
    if isinstance(value, dict):
        keys = ", ".join(value)
        return f"object, {_plural(len(value), 'key')}" + (
            f": {_clip(keys, chars)}" if value else ""
        )
    if isinstance(value, list):
        return f"array of {_items(value)}"
    if isinstance(value, str) and len(value) > chars:
        return f"string, {len(value)} chars: {_compact(value, chars)}"
    return _compact(value, chars)


def _items(values: list[Any]) -> str:
    kinds: dict[str, int] = {}
    for item in values:
        name = _type_name(item)
        kinds[name] = kinds.get(name, 0) + 1
    if len(kinds) == 1:
        (name,) = kinds
        return _plural(len(values), name)
    mix = ", ".join(f"{count} {name}" for name, count in sorted(kinds.items()))
    return f"{_plural(len(values), 'item')}" + (f" ({mix})" if mix else "")


def _path_step(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _status(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return whole_number(value)
    return None


def looks_like_error(value: Any) -> bool:
    """An object with a non-empty error/errors/exception, an HTTP status 400–599, or an
    error-or-worse level."""
    if not isinstance(value, dict):
        return False
    for key in ("error", "errors", "exception"):
        if key in value and value[key] not in (None, False, "", [], {}):
            return True
    for key in ("status", "statusCode", "status_code"):
        status = _status(value.get(key))
        if status is not None and 400 <= status <= 599:
            return True
    for key in ("level", "severity", "levelname"):
        level = value.get(key)
        if isinstance(level, str) and level.lower() in {"error", "fatal", "critical", "err"}:
            return True
    return False


def find_errors(
    value: Any, limit: int = 5, max_nodes: int = 50_000
) -> tuple[list[tuple[str, Any]], int]:
    """Up to ``limit`` (path, item) pairs that look like errors, in document order, and how
    many were found in all (within ``max_nodes`` visited values)."""
    found: list[tuple[str, Any]] = []
    count = 0
    stack: list[tuple[str, Any]] = [("$", value)]
    visited = 0
    while stack and visited < max_nodes:
        path, node = stack.pop()
        visited += 1
        if looks_like_error(node):
            count += 1
            if len(found) < limit:
                found.append((path, node))
            continue  # its nested parts describe the same error
        children: list[tuple[str, Any]] = []
        if isinstance(node, dict):
            children = [(_path_step(path, k), v) for k, v in node.items()]
        elif isinstance(node, list):
            children = [(_path_step(path, i), v) for i, v in enumerate(node)]
        stack.extend(reversed(children))
    return found, count


def _render_json(value: Any, chars: int, max_keys: int, max_errors: int) -> str:
    out: list[str] = []

    def ends(values: list[Any], indent: str) -> None:
        if values:
            out.append(f"{indent}[0] {_compact(values[0], chars)}")
        if len(values) > 1:
            out.append(f"{indent}[{len(values) - 1}] {_compact(values[-1], chars)}")

    if isinstance(value, dict):
        out.append(f"JSON object with {_plural(len(value), 'key')}:")
        for key, item in list(value.items())[:max_keys]:
            out.append(
                f"  {_clip(json.dumps(key, ensure_ascii=False), chars)}: {_describe(item, chars)}"
            )
            if isinstance(item, list):
                ends(item, "    ")
        if len(value) > max_keys:
            out.append(f"  … {len(value) - max_keys} more keys")
    else:
        out.append(f"JSON array of {_items(value)}:")
        ends(value, "  ")
    if max_errors:
        errors, count = find_errors(value, max_errors)
        if count:
            out.append(f"{_plural(count, 'item')} that look like errors:")
            out.extend(f"  {path} {_compact(item, chars)}" for path, item in errors)
            if count > len(errors):
                out.append(f"  … {count - len(errors)} more")
    return "\n".join(out)


_JSON_LEVELS = (
    (800, 80, 8),
    (500, 60, 6),
    (300, 60, 5),
    (160, 40, 3),
    (100, 25, 3),
    (60, 15, 2),
    (40, 8, 1),
    (24, 4, 1),
    (12, 2, 0),
)


def _json_summary(value: Any, max_bytes: int) -> str:
    summary = ""
    for chars, max_keys, max_errors in _JSON_LEVELS:
        summary = _render_json(value, chars, max_keys, max_errors)
        if _nbytes(summary) <= max_bytes:
            return summary
    # Still too big for a tiny budget: keep the whole lines that fit, then cut.
    kept: list[str] = []
    used = 0
    for row in summary.split("\n"):
        size = _nbytes(row) + (1 if kept else 0)
        if used + size > max_bytes:
            break
        kept.append(row)
        used += size
    if kept:
        return "\n".join(kept)
    budget = max(0, max_bytes - _nbytes(CUT_MARKER))
    cut = summary.encode("utf-8")[:budget].decode("utf-8", "ignore")
    return cut + CUT_MARKER


# ---------------------------------------------------------------------------- contents


def contents(text: str, max_entries: int = 40) -> list[TocEntry]:
    """Where the structure of ``text`` is; ``[]`` when it has none.

    Capped at ``max_entries`` by even sampling that keeps the first and last entries.
    """
    if max_entries < 1:
        return []
    kind = detect_kind(text)
    if kind == "json":
        entries = _json_contents(text, _parse_json(text)[1])
    else:
        lines = [line_content(raw) for raw in split_lines(text)]
        if kind == "markdown":
            entries = _markdown_contents(lines)
        elif kind == "code":
            entries = _code_contents(lines)
        elif kind == "log":
            entries = _log_contents(lines)
        else:
            entries = _section_contents(lines)
    return sample_entries(entries, max_entries)


def sample_entries(entries: list[TocEntry], max_entries: int) -> list[TocEntry]:
    """At most ``max_entries`` entries, evenly spread, first and last kept."""
    count = len(entries)
    if count <= max_entries:
        return entries
    if max_entries == 1:
        return entries[:1]
    picks = sorted({round(i * (count - 1) / (max_entries - 1)) for i in range(max_entries)})
    return [entries[i] for i in picks]


def _closes_fence(line: str, fence: tuple[str, int]) -> bool:
    """A closing fence: the opening character, at least as many, nothing else on the line."""
    match = _FENCE.match(line)
    if match is None or match.group(1)[0] != fence[0] or len(match.group(1)) < fence[1]:
        return False
    return not line.strip().strip(fence[0])


def _markdown_contents(lines: list[str]) -> list[TocEntry]:
    entries: list[TocEntry] = []
    fence: tuple[str, int] | None = None
    start = 0
    if lines and lines[0].strip() == "---":  # YAML front matter is not a heading
        for i in range(1, len(lines)):
            if lines[i].strip() in ("---", "..."):
                start = i + 1
                break
    prev_paragraph = False
    for i in range(start, len(lines)):
        line = lines[i]
        match = _FENCE.match(line)
        if fence is not None:
            if _closes_fence(line, fence):
                fence = None
            prev_paragraph = False
            continue
        if match:
            fence = (match.group(1)[0], len(match.group(1)))
            prev_paragraph = False
            continue
        atx = atx_heading(line)
        if atx is not None:
            if atx[1]:
                entries.append(TocEntry(i + 1, _clip(atx[1], _TITLE_MAX), atx[0]))
            prev_paragraph = False
            continue
        underline = _SETEXT.fullmatch(line)
        if underline and prev_paragraph:
            level = 1 if underline.group(1)[0] == "=" else 2
            entries.append(TocEntry(i, _clip(lines[i - 1], _TITLE_MAX), level))
            prev_paragraph = False
            continue
        prev_paragraph = bool(line.strip()) and not _NOT_PARAGRAPH.match(line)
    return entries


def _code_contents(lines: list[str]) -> list[TocEntry]:
    entries = []
    for number, line in enumerate(lines, 1):
        if _CODE_DEF.match(line):
            title = line.strip().rstrip("{:").rstrip()
            entries.append(TocEntry(number, _clip(title, _TITLE_MAX), 1))
    return entries


def _section_contents(lines: list[str]) -> list[TocEntry]:
    entries = []
    for number, line in enumerate(lines, 1):
        match = _SECTION.fullmatch(line)
        if match:
            entries.append(TocEntry(number, _clip(match.group(2), _TITLE_MAX), 1))
        elif line.lstrip().startswith(_TRACEBACK):
            title = "Traceback"
            for later in lines[number : number + 300]:
                if later[:1] not in (" ", "\t", "") and _EXCEPTION.match(later):
                    title = f"Traceback: {later}"
                    break
            entries.append(TocEntry(number, _clip(title, _TITLE_MAX), 1))
    return entries


def _log_contents(lines: list[str]) -> list[TocEntry]:
    hours: list[TocEntry] = []
    previous: tuple[str, str] | None = None
    for number, line in enumerate(lines, 1):
        match = _TS_ISO.match(line) or _TS_SYSLOG.match(line)
        if match is None:
            continue
        key = (match.group(1), match.group(2))
        if key != previous:
            hours.append(TocEntry(number, f"{key[0]} {key[1]}:00", 1))
            previous = key
    if len(hours) < 2:
        hours = []  # one hour throughout is no structure
    merged: dict[int, TocEntry] = {entry.line: entry for entry in hours}
    for entry in _section_contents(lines):
        merged[entry.line] = entry  # a named section says more than an hour mark
    return [merged[line] for line in sorted(merged)]


def _item_name(item: Any) -> str:
    if isinstance(item, dict):
        for key in ("name", "title", "id", "key", "label"):
            value = item.get(key)
            if isinstance(value, str | int) and not isinstance(value, bool):
                return str(value)
    return ""


def _batches(
    prefix: str, items: list[Any], starts: list[int], line_of: Any, level: int
) -> list[TocEntry]:
    entries = []
    for first in range(0, min(len(items), len(starts)), JSON_BATCH):
        last = min(first + JSON_BATCH, len(items)) - 1
        names = [_item_name(items[first]), _item_name(items[last])]
        hint = " … ".join(n for n in names if n) if names[0] or names[1] else ""
        title = f"{prefix} {first}-{last}" + (f": {hint}" if hint else "")
        entries.append(TocEntry(line_of(starts[first]), _clip(title, _TITLE_MAX), level))
    return entries


def _json_contents(text: str, value: Any) -> list[TocEntry]:
    if line_count(text) <= 1:
        return []  # every entry would claim line 1
    newlines = [m.start() for m in re.finditer("\n", text)]

    def line_of(pos: int) -> int:
        return bisect_left(newlines, pos) + 1

    keys, top_items, key_items = _json_positions(text)
    entries: list[TocEntry] = []
    if isinstance(value, dict):
        for key, pos in keys:
            entries.append(TocEntry(line_of(pos), _clip(key, _TITLE_MAX), 1))
            item = value.get(key)
            starts = key_items.get(key, [])
            if isinstance(item, list) and len(item) > JSON_BATCH:
                entries.extend(_batches(f"{key}", item, starts, line_of, 2))
    elif isinstance(value, list):
        if len(value) > JSON_BATCH:
            entries = _batches("items", value, top_items, line_of, 1)
        else:
            for index, (item, pos) in enumerate(zip(value, top_items, strict=False)):
                if isinstance(item, dict | list):
                    name = _item_name(item)
                    title = f"item {index}" + (f": {name}" if name else "")
                    entries.append(TocEntry(line_of(pos), _clip(title, _TITLE_MAX), 1))
    if len({entry.line for entry in entries}) <= 1 and len(entries) > 1:
        return []
    return entries


def _json_positions(
    text: str,
) -> tuple[list[tuple[str, int]], list[int], dict[str, list[int]]]:
    """Character offsets of: top-level keys; items of a top-level array; items of arrays
    that are values of top-level keys. ``text`` must be valid JSON."""
    keys: list[tuple[str, int]] = []
    top_items: list[int] = []
    key_items: dict[str, list[int]] = {}
    stack: list[str] = []
    expect_key = False
    current_key = ""

    def item_start(after: int, into: list[int]) -> None:
        found = _NON_SPACE.search(text, after)
        if found is not None and found.group() != "]":
            into.append(found.start())

    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token[0] == '"':
            if expect_key and len(stack) == 1:
                current_key = json.loads(token)
                keys.append((current_key, match.start()))
            expect_key = False
        elif token in "{[":
            stack.append(token)
            expect_key = token == "{"
            if token == "[" and len(stack) == 1:
                item_start(match.end(), top_items)
            elif token == "[" and len(stack) == 2 and stack[0] == "{":
                item_start(match.end(), key_items.setdefault(current_key, []))
        elif token in "}]":
            stack.pop()
            expect_key = False
        elif token == ",":
            if stack and stack[-1] == "{":
                expect_key = True
            elif len(stack) == 1:
                item_start(match.end(), top_items)
            elif len(stack) == 2 and stack[0] == "{":
                item_start(match.end(), key_items.setdefault(current_key, []))
    return keys, top_items, key_items


def render_contents(entries: list[TocEntry] | tuple[TocEntry, ...]) -> str:
    """``## Contents`` and one ``- [L<line>] <title>`` row per entry, indented by level;
    ``""`` for no entries."""
    if not entries:
        return ""
    base = min(entry.level for entry in entries)
    rows = ["## Contents"]
    # titles come from the content: one inert line each
    rows.extend(
        f"{'  ' * (e.level - base)}- [L{e.line}] {inline(e.title, line_break=' ')}" for e in entries
    )
    return "\n".join(rows) + "\n"
