"""Parsing references: entry id, label, ``ctx:sha256:<hex>``, or a bare hex prefix (>= 8).

Pure: says what a reference *looks like*; the store decides what it names. A reference
never becomes a filesystem path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from offload.core.hashing import CTX_PREFIX, encode
from offload.errors import InvalidInput

MIN_PREFIX = 8
MAX_REF_LEN = 512
_HEX = re.compile(r"[0-9a-f]+")
_ID = re.compile(r"(?:id:|#)?(\d{1,7})")

RefKind = Literal["id", "hash", "prefix", "label"]


@dataclass(frozen=True)
class ParsedRef:
    """What a reference string looks like.

    ``hex`` kinds may also be tried as labels by the resolver when no hash matches.
    """

    raw: str
    kind: RefKind
    value: str

    @property
    def entry_id(self) -> int:
        """The numeric id (only for ``kind == "id"``)."""
        return int(self.value)


def parse_ref(ref: str) -> ParsedRef:
    """Classify a reference string; raises InvalidInput when it cannot be one."""
    if not isinstance(ref, str):
        raise InvalidInput("a reference must be a string")
    raw = ref.strip()
    if not raw:
        raise InvalidInput("empty reference; give an entry id, label, or ctx:sha256:<hex>")
    if len(raw) > MAX_REF_LEN:
        raise InvalidInput(f"reference is {len(raw)} characters; at most {MAX_REF_LEN}")
    if not raw.isascii():
        encode(raw)  # a lone surrogate names nothing and no database can bind it
    if raw.lower().startswith(CTX_PREFIX):
        digest = raw[len(CTX_PREFIX) :].lower()
        if not _HEX.fullmatch(digest) or len(digest) > 64:
            raise InvalidInput(f"{raw!r} is not ctx:sha256:<hex>")
        if len(digest) < MIN_PREFIX:
            raise InvalidInput(f"{raw!r}: give at least {MIN_PREFIX} hex characters")
        return ParsedRef(raw, "hash" if len(digest) == 64 else "prefix", digest)
    m = _ID.fullmatch(raw)
    if m:
        return ParsedRef(raw, "id", m.group(1))
    lowered = raw.lower()
    if len(raw) >= MIN_PREFIX and _HEX.fullmatch(lowered) and len(raw) <= 64:
        return ParsedRef(raw, "hash" if len(raw) == 64 else "prefix", lowered)
    return ParsedRef(raw, "label", raw)
