"""The translation of the store's statements to PostgreSQL (pure: no server needed)."""

from __future__ import annotations

from offload.store.postgres import pgsql
from offload.store.schema import META_WEIGHTS


def test_parameters_become_psycopg_placeholders_and_percent_signs_are_doubled() -> None:
    st = pgsql.translate("SELECT id FROM entries WHERE source = ? AND topic != '5%'")
    assert st.postgres == "SELECT id FROM entries WHERE source = %s AND topic != '5%%'"
    assert st.params is None and not st.returns_id


def test_inserts_into_tables_with_ids_return_the_new_id() -> None:
    st = pgsql.translate("INSERT INTO entries (kind) VALUES (?)")
    assert st.returns_id and st.postgres.endswith(" RETURNING id")
    assert not pgsql.translate("INSERT INTO labels (label, entry_id) VALUES (?, ?)").returns_id


def test_sqlite_only_constructs_are_rewritten() -> None:
    assert pgsql.translate("INSERT OR IGNORE INTO terms (term) VALUES (?)").postgres == (
        "INSERT INTO terms (term) VALUES (%s) ON CONFLICT DO NOTHING"
    )
    sql = pgsql.translate(
        "SELECT id, start, end FROM chunks WHERE block_id IN (SELECT value FROM json_each(?))"
    ).postgres
    assert sql == (
        'SELECT id, start, "end" FROM chunks WHERE block_id IN (SELECT value FROM offload_ids(%s))'
    )
    sql = pgsql.translate(
        "SELECT term FROM terms WHERE instr(term, ?) > 0 OR substr(term, -2) = ?"
    ).postgres
    assert "strpos(term, %s)" in sql and "right(term, 2)" in sql
    assert pgsql.translate("PRAGMA quick_check").noop


def test_only_an_upsert_into_counters_has_its_bare_value_qualified() -> None:
    upsert = pgsql.translate(
        "INSERT INTO counters (name, value) VALUES (?, 1) "
        "ON CONFLICT(name) DO UPDATE SET value = value + 1 RETURNING value"
    ).postgres
    assert "SET value = counters.value + 1" in upsert
    bump = "UPDATE entry_map_generation SET value = value + 1 WHERE id = 0"
    assert pgsql.translate(bump).postgres == bump


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


def test_a_list_of_words_is_read_as_json_text_not_as_ids() -> None:
    sql = pgsql.translate("SELECT term FROM terms WHERE term IN (SELECT value FROM json_each(?))")
    assert sql.postgres == (
        "SELECT term FROM terms WHERE term IN (SELECT json_array_elements_text(%s::json))"
    )


def test_a_list_of_labels_is_read_as_json_text_not_as_ids() -> None:
    sql = pgsql.translate(
        "SELECT label FROM labels WHERE label IN (SELECT value FROM json_each(?))"
    )
    assert sql.postgres == (
        "SELECT label FROM labels WHERE label IN (SELECT json_array_elements_text(%s::json))"
    )


def test_a_join_on_a_correlated_limited_subquery_becomes_a_lateral_join() -> None:
    sql = pgsql.translate(
        "SELECT e.id AS src, n.id AS nid FROM entries e JOIN entries n ON n.id IN "
        "(SELECT p.id FROM entries p WHERE p.scope = e.scope AND p.id < e.id "
        "ORDER BY p.id DESC LIMIT ?) WHERE e.id IN (SELECT value FROM json_each(?))"
    ).postgres
    assert sql == (
        "SELECT e.id AS src, n.id AS nid FROM entries e CROSS JOIN LATERAL "
        "(SELECT p.id FROM entries p WHERE p.scope = e.scope AND p.id < e.id "
        "ORDER BY p.id DESC LIMIT %s) n WHERE e.id IN (SELECT value FROM offload_ids(%s))"
    )


def test_bm25_term_statistics_are_computed_once_per_query_not_per_row() -> None:
    sql = pgsql.translate(
        "SELECT rowid, bm25(search_body) AS s FROM search_body "
        "WHERE search_body MATCH ? ORDER BY s LIMIT ?"
    ).postgres
    assert sql.startswith("WITH nd AS MATERIALIZED (") and "w AS MATERIALIZED (" in sql


def test_a_selective_partition_becomes_a_tsquery_of_and_or_and_not() -> None:
    rare, common = '"rare7" OR "bravo"', '"common"'
    assert pgsql.match_tsquery(f"({rare}) AND ({common})") == "('rare7' | 'bravo') & ('common')"
    assert pgsql.match_tsquery(f"({rare}) NOT ({common})") == "('rare7' | 'bravo') & !('common')"
    assert pgsql.match_tsquery(rare) == "'rare7' | 'bravo'"
    assert pgsql.match_tsquery('"a) AND (b"') == "'a) AND (b'"  # inside quotes: a term
    # every term of the partition is scored, each once
    st = pgsql.translate(
        "SELECT rowid, bm25(search_body) AS s FROM search_body "
        "WHERE search_body MATCH ? ORDER BY s LIMIT ?"
    )
    assert st.params is not None
    terms, lexemes, where, limit = st.params((f'({rare}) NOT ({common} OR "bravo")', 9))
    assert terms == ["rare7", "bravo", "common"] and lexemes == ["'rare7'", "'bravo'", "'common'"]
    assert where == "('rare7' | 'bravo') & !('common' | 'bravo')" and limit == 9


def test_a_terms_row_count_is_bounded_work_and_a_row_count_is_the_estimate() -> None:
    doc = pgsql.translate("SELECT doc FROM temp.search_body_rows WHERE term = ?")
    assert f"LIMIT {pgsql.DF_EXACT_UP_TO}" in doc.postgres and "most_common_elems" in doc.postgres
    assert doc.params is not None and doc.params(("it's",)) == ("it's", "'it''s'")
    rows = pgsql.translate("SELECT count(*) AS n FROM search_body").postgres
    assert "reltuples" in rows


def test_the_chunk_count_is_exact_in_a_small_store_and_the_estimate_in_a_large_one() -> None:
    sql = pgsql.translate("SELECT count(*) FROM chunks").postgres
    assert f"reltuples >= {pgsql.EXACT_ROWS_UP_TO}" in sql
    assert "ELSE (SELECT count(*) FROM chunks)" in sql
