"""JSON read from another server as RFC 8259 has it.

Python's ``json`` reads more than JSON: the words ``NaN``, ``Infinity`` and ``-Infinity``,
and a number too large for a float (``1e999``) as infinity. Read from an upstream and
written on to a client, such a value comes out as ``NaN`` or ``Infinity``, which is not
JSON and which a client's parser refuses. :func:`loads` refuses it instead, as not JSON.
"""

from __future__ import annotations

import json
import math
from typing import Any


class NotFinite(ValueError):
    """A number in the JSON read that is not a finite number."""


def _no_constant(word: str) -> Any:
    raise NotFinite(f"{word} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotFinite(f"{text[:40]} is past a float's range")
    return value


def loads(data: str | bytes) -> Any:
    """``data`` parsed as JSON; raises ``ValueError`` (:class:`NotFinite` for a number
    that is not finite) or ``RecursionError`` as :func:`json.loads` does."""
    return json.loads(data, parse_constant=_no_constant, parse_float=_finite)
