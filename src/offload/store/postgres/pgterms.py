"""A chunk's analysed terms sent to PostgreSQL as a binary ``tsvector``.

Every put of a 100 KB body writes about a hundred chunk vectors (~30k terms). Written as
tsvector text (:func:`offload.store.postgres.pgsql.tsvector_literal`) they cost the client a Python
loop over every term and the server a parse of ~200 KB of text: together most of such a
put's CPU. The binary form (PostgreSQL's ``tsvectorrecv``: a lexeme count, then each
lexeme NUL-terminated with its position count and positions) is built here from C-level
steps only (split, count, sort, join), and the server copies it in.

The positions are the lexeme's count, numbered 1..k, not where the term stood: the terms
of a chunk are grouped by run (:func:`offload.core.text.analysis.index_text`), so their places
never meant anything, and ``ts_rank`` (the only reader) uses a lexeme's position count and
the vector's total, never the values. Both are what the text form gives: at most
:data:`MAX_POSITIONS` per lexeme (PostgreSQL keeps no more), lexemes over
:data:`~offload.store.postgres.pgsql.MAX_LEXEME_BYTES` left out. A chunk of more terms than
positions exist (:data:`~offload.store.postgres.pgsql.MAX_POSITION`) takes the exact positions the
text form would have, clamped the same way.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import Any

from offload.store.postgres.pgsql import MAX_LEXEME_BYTES, MAX_POSITION

# PostgreSQL keeps at most this many positions of one lexeme (MAXNUMPOS)
MAX_POSITIONS = 256
TSVECTOR_OID = 3614


class ChunkTerms:
    """A chunk's analysed terms, sent as a binary tsvector (:func:`register` tells a
    connection how): from their counts when the put has them, the terms themselves (the
    space-separated string, or a function making it) read only without counts or for a
    chunk of more terms than a tsvector has positions."""

    __slots__ = ("_terms", "counts")

    def __init__(
        self, terms: str | Callable[[], str], counts: Mapping[str, int] | None = None
    ) -> None:
        """``terms``, and ``counts`` (:func:`offload.store.write.index.count_terms` of them)."""
        self._terms = terms
        self.counts = counts

    def terms(self) -> str:
        """The terms, space-separated."""
        return self._terms if isinstance(self._terms, str) else self._terms()

    def binary(self, encoding: str = "utf-8") -> bytes:
        """The binary tsvector (see :func:`binary_tsvector`)."""
        if self.counts is None:
            return binary_tsvector(self.terms(), encoding)
        return _from_counts(self.counts, encoding, self.terms)


@lru_cache(maxsize=4 * MAX_POSITIONS)
def _tail(k: int) -> bytes:
    """What follows a lexeme that occurs ``k`` times: its NUL, the count of positions
    (at most MAX_POSITIONS, as PostgreSQL keeps), positions 1..count."""
    n = min(k, MAX_POSITIONS)
    return b"\0" + struct.pack(f">H{n}H", n, *range(1, n + 1))


def binary_tsvector(
    terms: str, encoding: str = "utf-8", counts: Mapping[str, int] | None = None
) -> bytes:
    """``terms`` (analysed, space-separated) as the binary form of a tsvector; ``counts``,
    when given, are how often each of them occurs (counted once per put, not again here)."""
    if counts is None:
        counts = Counter(terms.split(" "))
        counts.pop("", None)
    return _from_counts(counts, encoding, lambda: terms)


def _from_counts(counts: Mapping[str, int], encoding: str, ordered: Callable[[], str]) -> bytes:
    """The binary tsvector of terms counted ``counts``; ``ordered`` gives the terms
    themselves, asked only for a chunk of more terms than positions."""
    # the lexemes in bytes, in one C step (a term holds no space)
    joined = " ".join(counts).encode(encoding) if counts else b""
    lexemes = joined.split(b" ") if joined else []
    values: Iterable[int] = counts.values()
    total = sum(counts.values())
    # no lexeme is longer than all of them together: most chunks skip the length check
    if len(joined) > MAX_LEXEME_BYTES and max(map(len, lexemes)) > MAX_LEXEME_BYTES:
        pairs = zip(lexemes, counts.values(), strict=True)
        kept = [(w, k) for w, k in pairs if len(w) <= MAX_LEXEME_BYTES]
        lexemes, values = [w for w, _ in kept], [k for _, k in kept]
        total = sum(values)
    if total > MAX_POSITION:
        return _exact(ordered().encode(encoding).split(b" "))
    # each lexeme then its tail, interleaved by slice assignment and joined, all in C (the
    # tails are cached by count; the server sorts the lexemes itself). Slices, not
    # zip/chain: -0.5 to -0.8 ms of the client's CPU a 100 KB put.
    n = len(lexemes)
    parts: list[bytes] = [b""] * (2 * n)
    parts[0::2] = lexemes
    parts[1::2] = map(_tail, values)
    return struct.pack(">i", n) + b"".join(parts)


def _exact(words: list[bytes]) -> bytes:
    """The vector with each term's own position (1 on), clamped as the text form is."""
    at: dict[bytes, list[int]] = {}
    kept = (w for w in words if w and len(w) <= MAX_LEXEME_BYTES)
    for pos, w in enumerate(kept, 1):
        at.setdefault(w, []).append(min(pos, MAX_POSITION))
    out = [struct.pack(">i", len(at))]
    for w, ps in at.items():
        unique = sorted(set(ps))[:MAX_POSITIONS]
        out.append(w + b"\0" + struct.pack(f">H{len(unique)}H", len(unique), *unique))
    return b"".join(out)


@lru_cache(maxsize=1)
def _dumper() -> type:
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    class TsvectorDumper(Dumper):
        format = Format.BINARY
        oid = TSVECTOR_OID

        def dump(self, obj: Any) -> bytes:
            # the bytes are read in the connection's client encoding, as text would be
            info = getattr(self.connection, "info", None)
            return bytes(obj.binary(getattr(info, "encoding", "utf-8")))

    return TsvectorDumper


def register(conn: Any) -> None:
    """Teach a psycopg connection to send :class:`ChunkTerms` as binary tsvectors."""
    conn.adapters.register_dumper(ChunkTerms, _dumper())
