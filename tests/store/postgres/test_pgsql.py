"""What PostgreSQL's forms of the store's statements are built from (pure: no server needed)."""

from __future__ import annotations

from offload.store.postgres import pgsql
from offload.store.schema import META_WEIGHTS


def test_analysed_terms_become_one_lexeme_each_with_positions_and_quotes_escaped() -> None:
    text, nxt = pgsql.tsvector_literal("it's a\\b x")
    assert text == "'it''s':1 'a\\\\b':2 'x':3" and nxt == 4
    long_term = "z" * 3000  # PostgreSQL refuses lexemes of 2 KB: left out, not an error
    assert pgsql.tsvector_literal(f"a {long_term} b")[0] == "'a':1 'b':2"


def test_a_match_of_quoted_terms_becomes_a_tsquery_of_the_same_terms() -> None:
    match = '"caroline" OR "it""s" OR "a|b"'
    assert pgsql.tsquery_literal(match) == "'caroline' | 'it\"s' | 'a|b'"
    assert pgsql.tsquery_terms(match) == ["'caroline'", "'it\"s'", "'a|b'"]


def test_metadata_columns_keep_their_relative_weights() -> None:
    weights = dict(zip(pgsql.META_COLUMNS, META_WEIGHTS, strict=True))
    rank = dict(zip("DCBA", pgsql.META_RANK_WEIGHTS, strict=True))
    top = max(META_WEIGHTS)
    for col, w in weights.items():
        assert abs(rank[pgsql.META_LETTERS[col]] - w / top) < 1e-9
    vec = pgsql.meta_tsvector(("topic", "", "tag", "", "src"))
    assert vec == (
        f"'topic':1{pgsql.META_LETTERS['topic']} 'tag':2{pgsql.META_LETTERS['tags']} "
        f"'src':3{pgsql.META_LETTERS['source']}"
    )


def test_bm25_term_statistics_are_computed_once_per_query_not_per_row() -> None:
    sql = pgsql.top("search_body")
    assert sql.startswith("WITH nd AS MATERIALIZED (") and "w AS MATERIALIZED (" in sql


def test_a_selective_partition_becomes_a_tsquery_of_and_or_and_not() -> None:
    rare, common = '"rare7" OR "bravo"', '"common"'
    assert pgsql.match_tsquery(f"({rare}) AND ({common})") == "('rare7' | 'bravo') & ('common')"
    assert pgsql.match_tsquery(f"({rare}) NOT ({common})") == "('rare7' | 'bravo') & !('common')"
    assert pgsql.match_tsquery(rare) == "'rare7' | 'bravo'"
    assert pgsql.match_tsquery('"a) AND (b"') == "'a) AND (b'"  # inside quotes: a term
    # every term of the partition is scored, each once
    terms, lexemes, where, limit = pgsql.top_params((f'({rare}) NOT ({common} OR "bravo")', 9))
    assert terms == ["rare7", "bravo", "common"] and lexemes == ["'rare7'", "'bravo'", "'common'"]
    assert where == "('rare7' | 'bravo') & !('common' | 'bravo')" and limit == 9


def test_a_terms_row_count_is_bounded_work_and_a_row_count_is_the_estimate() -> None:
    doc = pgsql.vocab_row("search_body")
    assert f"LIMIT {pgsql.DF_EXACT_UP_TO}" in doc and "most_common_elems" in doc
    assert pgsql.vocab_row_params(("it's",)) == ("it's", "'it''s'")
    assert "reltuples" in pgsql.row_count("search_body")


def test_the_chunk_count_is_exact_in_a_small_store_and_the_estimate_in_a_large_one() -> None:
    sql = pgsql.chunk_count()
    assert f"reltuples >= {pgsql.EXACT_ROWS_UP_TO}" in sql
    assert "ELSE (SELECT count(*) FROM chunks)" in sql
