"""JSON with comments (Zed's ``settings.json``, VS Code's ``mcp.json``), edited as text
(pure, no I/O).

Both editors write and read JSONC: ``//`` and ``/* */`` comments and trailing commas. An
edit here changes only the span of the entry it sets or removes; every comment, the order
and the layout of the rest stay. The result is parsed back (comments and trailing commas
dropped) and refused unless it holds exactly the expected document.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from offload.errors import InvalidInput

PUNCT = "{}[]:,"
STOP = ' \t\r\n{}[]:,"/'


@dataclass(frozen=True)
class Token:
    kind: str  # "str", "lit", "punct" or "comment"
    start: int
    end: int


def tokens(text: str, name: str) -> list[Token]:
    """The tokens of ``text``, comments included (one pass, linear)."""
    out: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r\n":
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(Token("comment", i, end))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise _bad(name, "an unterminated /* comment")
            out.append(Token("comment", i, end + 2))
            i = end + 2
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                raise _bad(name, "an unterminated string")
            out.append(Token("str", i, j + 1))
            i = j + 1
        elif c in PUNCT:
            out.append(Token("punct", i, i + 1))
            i += 1
        else:
            j = i
            while j < n and text[j] not in STOP:
                j += 1
            if j == i:
                raise _bad(name, f"an unexpected {c!r}")
            out.append(Token("lit", i, j))
            i = j
    return out


def _bad(name: str, detail: str) -> InvalidInput:
    return InvalidInput(f"{name} is not valid JSONC ({detail}); nothing changed, fix or move it")


def loads(text: str, name: str) -> Any:
    """The document in a JSONC text (None when it holds no value)."""
    toks = [t for t in tokens(text, name) if t.kind != "comment"]
    kept = [
        text[t.start : t.end]
        for n, t in enumerate(toks)
        if not (_is(text, t, ",") and n + 1 < len(toks) and text[toks[n + 1].start] in "}]")
    ]
    if not kept:
        return None
    try:
        return json.loads(" ".join(kept))
    except ValueError as exc:
        raise _bad(name, " ".join(str(exc).split())[:120]) from exc
    except RecursionError:  # arrays or objects nested past the interpreter's stack
        raise _bad(name, "nested too deeply") from None


def _is(text: str, tok: Token, char: str) -> bool:
    return tok.kind == "punct" and text[tok.start] == char


@dataclass
class Member:
    """One ``"key": value`` of an object: where its key starts, its value, its comma."""

    key_start: int
    value: Node
    comma: Token | None = None


@dataclass
class Node:
    """A value's span; for an object, its braces and members."""

    start: int
    end: int
    members: dict[str, Member] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    is_object: bool = False


class _Parser:
    def __init__(self, text: str, name: str) -> None:
        self.text, self.name = text, name
        self.toks = [t for t in tokens(text, name) if t.kind != "comment"]
        self.pos = 0

    def next(self) -> Token:
        if self.pos >= len(self.toks):
            raise _bad(self.name, "it ends too early")
        tok = self.toks[self.pos]
        self.pos += 1
        return tok

    def peek(self, char: str) -> bool:
        return self.pos < len(self.toks) and _is(self.text, self.toks[self.pos], char)

    def value(self) -> Node:
        tok = self.next()
        if _is(self.text, tok, "{"):
            return self.obj(tok)
        if _is(self.text, tok, "["):
            depth = 1
            while depth:
                t = self.next()
                depth += _is(self.text, t, "[") - _is(self.text, t, "]")
            return Node(tok.start, t.end)
        return Node(tok.start, tok.end)

    def obj(self, open_: Token) -> Node:
        node = Node(open_.start, open_.end, is_object=True)
        while not self.peek("}"):
            key = self.next()
            if key.kind != "str" or not self.peek(":"):
                raise _bad(self.name, "an object key is not a string followed by ':'")
            self.next()
            member = Member(key.start, self.value())
            if self.peek(","):
                member.comma = self.next()
            name = json.loads(self.text[key.start : key.end])
            node.members[name] = member
            node.order.append(name)
            if member.comma is None and not self.peek("}"):
                raise _bad(self.name, "a ',' is missing between members")
        node.end = self.next().end
        return node


def _indent_at(text: str, pos: int) -> str:
    line = text[text.rfind("\n", 0, pos) + 1 : pos]
    return line[: len(line) - len(line.lstrip(" \t"))]


def _render(value: Any, indent: str) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False).replace("\n", "\n" + indent)


def _chain(root: Node, path: Sequence[str]) -> list[Member]:
    """The members along ``path`` as far as they exist (each in an object)."""
    out: list[Member] = []
    node = root
    for key in path:
        if not node.is_object or key not in node.members:
            break
        out.append(node.members[key])
        node = node.members[key].value
    return out


def _root(text: str, name: str) -> Node:
    parser = _Parser(text, name)
    root = parser.value()
    if not root.is_object:
        raise InvalidInput(f"{name}: expected a JSON object at the top; nothing changed")
    return root


def set_at(text: str, path: Sequence[str], value: Any, name: str) -> str:
    """``text`` with ``path`` set to ``value`` (objects on the way created)."""
    root = _root(text, name)
    chain = _chain(root, path)
    if len(chain) == len(path):
        leaf = chain[-1].value
        indent = _indent_at(text, chain[-1].key_start)
        return text[: leaf.start] + _render(value, indent) + text[leaf.end :]
    parent = chain[-1].value if chain else root
    if not parent.is_object:
        raise InvalidInput(f"{name}: {path[len(chain) - 1]!r} is not an object; nothing changed")
    nested = value
    for key in reversed(path[len(chain) + 1 :]):
        nested = {key: nested}
    key = json.dumps(path[len(chain)], ensure_ascii=False)
    if parent.order:
        last = parent.members[parent.order[-1]]
        indent = _indent_at(text, last.key_start)
        member = f"{key}: {_render(nested, indent)}"
        if last.comma is not None:  # a trailing comma stays trailing
            at = last.comma.end
            return text[:at] + f"\n{indent}{member}," + text[at:]
        at = last.value.end
        return text[:at] + f",\n{indent}{member}" + text[at:]
    outer = _indent_at(text, parent.start)
    indent = outer + "  "
    member = f"{key}: {_render(nested, indent)}"
    inside = text[parent.start + 1 : parent.end - 1].strip()  # comments, if any
    body = f"\n{indent}{member}" + (f"\n{indent}{inside}" if inside else "") + f"\n{outer}"
    return text[: parent.start + 1] + body + text[parent.end - 1 :]


def unset_at(text: str, path: Sequence[str], keep: int, name: str) -> str:
    """``text`` without ``path``; objects left empty by that go too, except the first
    ``keep`` keys of the path."""
    root = _root(text, name)
    chain = _chain(root, path)
    if len(chain) < len(path):
        return text
    j = len(chain) - 1
    while j - 1 >= keep and len(chain[j - 1].value.order) == 1:
        j -= 1
    container = chain[j - 1].value if j else root
    key = path[j]
    return _drop(text, container, key)


def _drop(text: str, obj: Node, key: str) -> str:
    """``text`` without the member ``key`` of ``obj`` (its line, when it has one alone)."""
    member = obj.members[key]
    start = member.key_start
    line_start = text.rfind("\n", 0, start) + 1
    if not text[line_start:start].strip():
        start = line_start
    end = member.comma.end if member.comma else member.value.end
    rest = text[end:]
    newline = rest.find("\n")
    if newline >= 0 and not rest[:newline].strip():
        end += newline + 1
    out = text[:start] + text[end:]
    index = obj.order.index(key)
    if member.comma is None and index > 0:  # the last one: the previous comma goes too
        comma = obj.members[obj.order[index - 1]].comma
        if comma is not None:
            out = out[: comma.start] + out[comma.end :]
    return out
