"""The trust fence around any body handed back to a model (a format that is a contract).

``<offload:body:NONCE ref="…" topic="…" stored="…">BODY</offload:body:NONCE>``

NONCE carries 96 random bits, fresh per call; attribute values are escaped; any closing
delimiter of *any* offload fence inside the body is neutralised, so a stored document
cannot end the fence early and speak as the tool.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

_CLOSE = "</offload:body"
_NEUTRAL = "<\\/offload:body"


def new_nonce() -> str:
    """A fresh fence nonce (96 bits, hex)."""
    return secrets.token_hex(12)


def escape_attr(value: str) -> str:
    """Escape a value for a double-quoted attribute."""
    return (
        value.replace("&", "&amp;")
        .replace('"', "&quot;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("\n", "&#10;")
        .replace("\r", "&#13;")
    )


def neutralise(body: str) -> str:
    """Defuse every closing fence delimiter inside ``body``."""
    if _CLOSE not in body:
        return body
    return body.replace(_CLOSE, _NEUTRAL)


def iso(ts: float) -> str:
    """A UTC timestamp as ``2026-07-15T10:00:00Z``."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fence(body: str, *, nonce: str, ref: str, topic: str, stored: float) -> str:
    """Wrap ``body`` in a trust fence keyed by ``nonce``."""
    attrs = f'ref="{escape_attr(ref)}" topic="{escape_attr(topic)}" stored="{iso(stored)}"'
    return f"<offload:body:{nonce} {attrs}>{neutralise(body)}</offload:body:{nonce}>"
