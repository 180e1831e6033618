"""A request body parsed as the JSON object an API expects, or refused in one line.

Python's ``json`` accepts more than JSON (RFC 8259): the words ``NaN``, ``Infinity`` and
``-Infinity``, and strings holding lone UTF-16 surrogates (``"\\ud800"`` escaped, or their
bytes written out), which are not Unicode text. Accepted, they break later and elsewhere:
an answer that echoes a field (a Responses object echoes ``temperature`` and
``instructions``) cannot be encoded, a stored session title or page-out cannot be written.
Refused here, at the edge, with the same words a store write would use.
"""

from __future__ import annotations

import json
import re
from typing import Any

from offload.errors import InvalidInput

# A lone surrogate's trace in the raw bytes: an escaped high one not followed by an
# escaped low one, an escaped low one not preceded by a high one, or a surrogate's own
# UTF-8 bytes. A trigger only (an escaped backslash before ``u`` looks the same): the
# parsed strings decide.
_LONE_TRACE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
    rb"|\xed[\xa0-\xbf]"
)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _no_constant(word: str) -> Any:
    raise InvalidInput(f"malformed JSON body: {word} is not a JSON number")


def parse_object(raw: bytes) -> dict[str, Any]:
    """``raw`` parsed: a JSON object of valid text; raises :class:`InvalidInput` saying why
    not (not JSON, nested past the stack, a non-number word, a lone surrogate, not an
    object)."""
    try:
        payload = json.loads(raw, parse_constant=_no_constant)
    except InvalidInput:
        raise
    except ValueError as exc:
        raise InvalidInput(f"malformed JSON body: {exc}") from exc
    except RecursionError:  # arrays or objects nested past the interpreter's stack
        raise InvalidInput("malformed JSON body: nested too deeply") from None
    if not isinstance(payload, dict):
        raise InvalidInput("the body must be a JSON object")
    if _LONE_TRACE.search(raw) and lone_surrogate(payload):
        raise InvalidInput(
            "malformed JSON body: a string holds a lone UTF-16 surrogate, which is not"
            " Unicode text; send UTF-8 text"
        )
    return payload


def lone_surrogate(value: Any) -> bool:
    """True when a string anywhere in ``value`` (keys included) holds a lone surrogate
    (walked without recursion: the value may be nested as deep as JSON allows)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
