"""Chunk columns packed as binary arrays arrive as psycopg's own arrays would, on a real server."""

from __future__ import annotations

import struct

import psycopg
import pytest

from offload.store.postgres import pgarrays, pgterms
from offload.store.write import index


def test_int4_text_and_tsvector_columns_arrive_as_the_arrays_psycopg_sends(
    pg_database: str,
) -> None:
    ints = [0, 1, -7, 2**31 - 1, -(2**31), 4096]
    words = ['{"":3,"naïve":1,"東京":2}', "", 'quote " and \\ back']
    terms = ["cache hit cache", "naïve 東京 x", "a\\b it's"]
    chunk_terms = [pgterms.ChunkTerms(t, index.count_terms(t)) for t in terms]
    with psycopg.connect(pg_database, autocommit=True) as conn:
        pgarrays.register(conn)
        pgterms.register(conn)
        row = conn.execute(
            "SELECT %b::integer[] = %s::integer[], %b::text[] = %s::text[], "
            "%b::tsvector[]::text[] = %b::tsvector[]::text[], "
            "cardinality(%b::integer[]), cardinality(%b::text[])",
            (
                pgarrays.int4s(ints),
                ints,
                pgarrays.texts(words),
                words,
                pgarrays.TsvectorColumn(chunk_terms),
                chunk_terms,
                pgarrays.int4s([]),
                pgarrays.texts([]),
            ),
        ).fetchone()
    assert row == (True, True, True, 0, 0)


def test_a_column_with_a_null_or_a_wide_integer_is_left_to_psycopg() -> None:
    assert isinstance(pgarrays.int4s([1, 2]), pgarrays.Int4Column)
    for odd in ([1, None], [2**31], [-(2**31) - 1], [True, 1], [1.5]):
        assert pgarrays.int4s(odd) == list(odd)
    assert pgarrays.texts(["a", None]) == ["a", None]


def test_a_null_in_a_column_still_reaches_the_server_which_refuses_it(pg_database: str) -> None:
    with psycopg.connect(pg_database, autocommit=True) as conn:
        pgarrays.register(conn)
        conn.execute("CREATE TEMP TABLE t (n integer NOT NULL)")
        with pytest.raises(psycopg.errors.NotNullViolation):
            conn.execute("INSERT INTO t SELECT unnest(%b::integer[])", (pgarrays.int4s([1, None]),))


def test_the_packed_int4_array_has_the_binary_layout_of_array_recv() -> None:
    got = pgarrays.int4_array([5, -1])
    assert got == struct.pack(">iiIii" + "ii" * 2, 1, 0, 23, 2, 1, 4, 5, 4, -1)
    assert pgarrays.int4_array([]) == struct.pack(">iiI", 0, 0, 23)
