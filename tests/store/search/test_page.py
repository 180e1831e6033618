"""A page of hits: the lines each hit shows."""

from __future__ import annotations

from offload.store.search.page import best_lines


def test_a_chunk_holding_no_query_term_shows_its_first_line_with_text() -> None:
    assert best_lines("\n  \nthe body text\nmore", {"zebra"}, 10, 80) == [(12, "the body text")]


def test_a_blank_chunk_still_gives_one_line() -> None:
    assert best_lines("", {"zebra"}, 1, 80) == [(1, "")]


def test_the_line_holding_the_most_query_terms_comes_first() -> None:
    text = "intro\nthe canary failed\ncanary deploy failed here"
    terms = {"canari", "deploy", "fail"}
    assert best_lines(text, terms, 1, 80)[0] == (3, "canary deploy failed here")
