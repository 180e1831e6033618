"""The trust fence around any body handed back to a model (a format that is a contract).

``<offload:body:NONCE ref="…" topic="…" stored="…">BODY</offload:body:NONCE>``

NONCE carries 96 random bits, fresh per call; attribute values are escaped; anything inside
the body that looks like an opening or closing tag of *any* offload fence (in any case, with
blanks inside: ``</OFFLOAD:BODY:x>``, ``< offload:body:x ref=…>``) is neutralised, so a stored
document can neither end the fence early and speak as the tool nor open a fake one.
"""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime

# ``<`` that starts something a reader could take for a fence tag; a backslash after it
# defuses the tag (``<\/offload:body:x>``) while it stays readable.
_TAG_START = re.compile(r"<(?=\s*(?:/\s*)?offload\s*:\s*body)", re.IGNORECASE)
# controls, line separators and bidirectional overrides have no place in an attribute
_ATTR_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def new_nonce() -> str:
    """A fresh fence nonce (96 bits, hex)."""
    return secrets.token_hex(12)


def escape_attr(value: str) -> str:
    """Escape a value for a double-quoted attribute."""
    escaped = (
        value.replace("&", "&amp;")
        .replace('"', "&quot;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("\n", "&#10;")
        .replace("\r", "&#13;")
    )
    return _ATTR_CONTROL.sub(lambda m: f"&#{ord(m.group())};", escaped)


def neutralise(body: str) -> str:
    """Defuse every opening or closing fence-like tag inside ``body``."""
    return _TAG_START.sub("<\\\\", body)


def iso(ts: float) -> str:
    """A UTC timestamp as ``2026-07-15T10:00:00Z``."""
    at = datetime.fromtimestamp(ts, UTC)
    return f"{at.year:04d}-{at:%m-%dT%H:%M:%S}Z"  # %Y does not pad years before 1000


def fence(body: str, *, nonce: str, ref: str, topic: str, stored: float | None) -> str:
    """Wrap ``body`` in a trust fence keyed by ``nonce`` (``stored=None``: no time, for
    fences that must be the same bytes whenever their content was stored)."""
    attrs = f'ref="{escape_attr(ref)}" topic="{escape_attr(topic)}"'
    if stored is not None:
        attrs += f' stored="{iso(stored)}"'
    return f"<offload:body:{nonce} {attrs}>{neutralise(body)}</offload:body:{nonce}>"
