"""Reading an upstream's chat answer whatever it holds: the Anthropic and Responses routes
convert it field by field, and an upstream (a buggy server, a model's odd output) may put
a number where a list goes or a list where a string goes. What is not the shape chat says
reads as absent or as text, never as a failed request."""

from __future__ import annotations

import json
from typing import Any


def listed(value: Any) -> list[dict[str, Any]]:
    """The objects of ``value`` when it is a list (others in it skipped), else none."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def member(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """``obj[key]`` when it is an object, else an empty one."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def first_choice(obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A chat answer's first choice and its message (empty when it has none)."""
    choices = listed(obj.get("choices"))
    choice = choices[0] if choices else {}
    message = choice.get("message")
    return choice, message if isinstance(message, dict) else {}


def text_of(value: Any) -> str:
    """Text an answer gives: a string as it is, a list of text parts joined, anything
    else as its JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, list) and all(isinstance(p, dict) for p in value):
        return "".join(p["text"] for p in value if isinstance(p.get("text"), str))
    return json.dumps(value, ensure_ascii=False)
