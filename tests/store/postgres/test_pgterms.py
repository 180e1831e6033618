"""Chunk terms sent to PostgreSQL as binary tsvectors: the same ranking as the text form."""

from __future__ import annotations

import random
import struct

import psycopg

from offload.store.postgres import pgsql, pgterms
from offload.store.write import index


def _decoded(data: bytes) -> dict[bytes, list[int]]:
    """A binary tsvector read back: each lexeme's positions."""
    (n,) = struct.unpack_from(">i", data)
    at, out = 4, {}
    for _ in range(n):
        end = data.index(b"\0", at)
        word = data[at:end]
        (k,) = struct.unpack_from(">H", data, end + 1)
        out[word] = list(struct.unpack_from(f">{k}H", data, end + 3))
        at = end + 3 + 2 * k
    assert at == len(data)
    return out


def test_each_lexeme_gets_as_many_positions_as_it_occurs_at_most_256() -> None:
    terms = " ".join(["it's"] * 3 + ["a\\b", "x"] + ["many"] * 300 + ["z" * 3000, ""])
    got = _decoded(pgterms.binary_tsvector(terms))
    assert got == {b"it's": [1, 2, 3], b"a\\b": [1], b"x": [1], b"many": list(range(1, 257))}


def test_a_lexeme_too_long_is_left_out_of_a_vector_built_from_counts() -> None:
    counts = {"cache": 2, "z" * 2100: 1, "hit": 300, "ok": 1}
    got = _decoded(pgterms.binary_tsvector(" ".join(counts), counts=counts))
    assert got == {b"cache": [1, 2], b"hit": list(range(1, 257)), b"ok": [1]}


def test_a_chunk_of_more_terms_than_positions_keeps_the_text_forms_clamped_positions() -> None:
    terms = " ".join(["a", "b"] * 9000)
    got = _decoded(pgterms.binary_tsvector(terms))
    assert got[b"a"] == list(range(1, 512, 2)) and len(got[b"b"]) == 256


def _random_terms(rng: random.Random) -> str:
    alphabet = ["cache", "it's", "a\\b", "x", "naïve", "q'\\'", "z" * 2100, "", "日本"]
    words = [rng.choice(alphabet) + str(rng.randrange(5)) * rng.randrange(2) for _ in range(80)]
    if rng.random() < 0.1:
        words += ["hot"] * rng.randrange(250, 400)
    if rng.random() < 0.05:
        words += [f"w{i % 50}" for i in range(17000)]
    return " ".join(words)


def test_the_server_ranks_every_lexeme_of_a_binary_vector_as_it_ranks_the_text_form(
    pg_database: str,
) -> None:
    rng = random.Random(5)
    texts = [_random_terms(rng) for _ in range(200)]
    with psycopg.connect(pg_database, autocommit=True) as conn:
        pgterms.register(conn)
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE ts_rank(o, q, 1) <> ts_rank(n, q, 1) "
            "OR length(o) <> length(n) OR ts_rank(o, q) <> ts_rank(n, q)), count(*), "
            "count(DISTINCT u.i) FILTER (WHERE tsvector_to_array(o) <> tsvector_to_array(n)) "
            "FROM unnest(%s::text[], %b::tsvector[]) WITH ORDINALITY AS u(t, n, i), "
            "LATERAL (SELECT t::tsvector AS o) v, "
            "LATERAL (SELECT (%s || replace(replace(w, '\\', '\\\\'), %s, %s) || %s)::tsquery "
            "AS q FROM unnest(tsvector_to_array(o)) w) l",
            (
                [pgsql.tsvector_literal(t)[0] for t in texts],
                [pgterms.ChunkTerms(t) for t in texts],
                *("'", "'", "''", "'"),
            ),
        ).fetchone()
    assert row is not None
    mismatched, compared, other_lexemes = row
    assert mismatched == 0 and other_lexemes == 0 and compared > 1000


def test_a_vector_from_the_puts_own_counts_is_the_vector_from_the_terms() -> None:
    rng = random.Random(9)
    for _ in range(200):
        terms = " ".join(t for t in _random_terms(rng).split(" ") if t)  # index_text's form
        counts = index.count_terms(terms)
        for encoding in ("utf-8", "utf-16-le"):
            assert pgterms.binary_tsvector(terms, encoding, counts) == pgterms.binary_tsvector(
                terms, encoding
            )


def test_a_vector_from_counts_asks_for_the_terms_only_when_positions_run_out() -> None:
    asked: list[int] = []

    def terms_of(terms: str) -> pgterms.ChunkTerms:
        def made() -> str:
            asked.append(1)
            return terms

        return pgterms.ChunkTerms(made, index.count_terms(terms))

    short = " ".join(["cache", "hit"] * 40)
    assert terms_of(short).binary() == pgterms.binary_tsvector(short)
    assert asked == []
    # more terms than a tsvector has positions: the exact positions need them in order
    long = " ".join(f"w{i % 50}" for i in range(17000))
    assert terms_of(long).binary() == pgterms.binary_tsvector(long)
    assert asked == [1]
