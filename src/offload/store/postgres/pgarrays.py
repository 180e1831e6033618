"""A chunk batch's columns sent to PostgreSQL as binary arrays packed in a few C steps.

psycopg dumps a list parameter element by element, a Python dumper call each: the six
columns of a 100 KB put's ~126 chunks cost the client ~2 ms that way. PostgreSQL's binary
array (``array_recv``) is a header (dimensions, flags, element type, size, lower bound)
and each element's length and bytes, so a whole column packs with one ``struct`` call
(integers) or one join (texts, tsvectors). A column holding a NULL or an integer outside
int4 is left to psycopg as a plain list (:func:`int4s`): the server then says what is
wrong, as before.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from offload.store.postgres import pgterms

INT4_OID, TEXT_OID = 23, 25
INT4_ARRAY_OID, TEXT_ARRAY_OID, TSVECTOR_ARRAY_OID = 1007, 1009, 3643
_INT4_MIN, _INT4_MAX = -(2**31), 2**31 - 1
_LENGTH = struct.Struct(">i")


class _Column:
    """One column's values, dumped as a binary array (:func:`register`)."""

    __slots__ = ("values",)

    def __init__(self, values: Sequence[Any]) -> None:
        self.values = values


class Int4Column(_Column):
    """Integers, each within int4, none NULL (see :func:`int4s`)."""


class TextColumn(_Column):
    """Texts, none NULL."""


class TsvectorColumn(_Column):
    """A chunk's terms each (:class:`~offload.store.postgres.pgterms.ChunkTerms`)."""


def int4s(values: Sequence[Any]) -> Int4Column | list[Any]:
    """``values`` packed as one int4 array, or the plain list when one is NULL, not an
    integer or outside int4 (psycopg then dumps it and the server judges it)."""
    if all(type(v) is int for v in values) and (
        not values or (min(values) >= _INT4_MIN and max(values) <= _INT4_MAX)
    ):
        return Int4Column(values)
    return list(values)


def texts(values: Sequence[Any]) -> TextColumn | list[Any]:
    """``values`` packed as one text array, or the plain list when one is not a text."""
    if all(type(v) is str for v in values):
        return TextColumn(values)
    return list(values)


def int4_array(values: Sequence[int]) -> bytes:
    """The binary form of an int4 array of ``values`` (every one an int4)."""
    n = len(values)
    if not n:
        return struct.pack(">iiI", 0, 0, INT4_OID)
    flat = [4] * (2 * n)  # each element: its length (4), then its value
    flat[1::2] = values
    return struct.pack(f">iiIii{2 * n}i", 1, 0, INT4_OID, n, 1, *flat)


def bytes_array(items: Sequence[bytes], element_oid: int) -> bytes:
    """The binary form of an array of ``items``, each already in its element type's
    binary form."""
    if not items:
        return struct.pack(">iiI", 0, 0, element_oid)
    n = len(items)
    head = struct.pack(">iiIii", 1, 0, element_oid, n, 1)
    # each element's length then its bytes, interleaved by slices (as pgterms' lexemes)
    parts: list[bytes] = [b""] * (2 * n)
    parts[0::2] = map(_LENGTH.pack, map(len, items))
    parts[1::2] = items
    return head + b"".join(parts)


@lru_cache(maxsize=1)
def _dumpers() -> dict[type[_Column], type]:
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    def encoding(dumper: Dumper) -> str:
        info = getattr(dumper.connection, "info", None)
        return str(getattr(info, "encoding", "utf-8"))

    class Int4Dumper(Dumper):
        format = Format.BINARY
        oid = INT4_ARRAY_OID

        def dump(self, obj: Any) -> bytes:
            return int4_array(obj.values)

    class TextDumper(Dumper):
        format = Format.BINARY
        oid = TEXT_ARRAY_OID

        def dump(self, obj: Any) -> bytes:
            enc = encoding(self)
            return bytes_array([s.encode(enc) for s in obj.values], TEXT_OID)

    class TsvectorDumper(Dumper):
        format = Format.BINARY
        oid = TSVECTOR_ARRAY_OID

        def dump(self, obj: Any) -> bytes:
            enc = encoding(self)
            return bytes_array([t.binary(enc) for t in obj.values], pgterms.TSVECTOR_OID)

    return {Int4Column: Int4Dumper, TextColumn: TextDumper, TsvectorColumn: TsvectorDumper}


def register(conn: Any) -> None:
    """Teach a psycopg connection to send the column classes as binary arrays."""
    for cls, dumper in _dumpers().items():
        conn.adapters.register_dumper(cls, dumper)
