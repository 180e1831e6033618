"""store.search.explain: each hit says which path scored it and what each part added; the
parts recompose its score, and the explained page is the searched page."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from offload.core.tokens import EstimateCounter
from offload.store.models import Filters
from offload.store.search.explain import Explanation, explanation_lines
from offload.store.search.state import (
    CONTEXT,
    LEXICAL,
    NARROW,
    NEIGHBOURS,
    PGSQL,
    POSTINGS,
)
from offload.store.store import Store
from wordcorpus import built_view

QUESTIONS = ("parser failed on a tab", "socket retry", "token budget session", "gateway")


def _fill(store: Store) -> None:
    texts = [f"the session config logged line {i} in the session log" for i in range(40)]
    texts += [
        "the config parser failed on a tab in the header line",
        "the socket closed before the retry finished",
        "a retry of the socket after the parser failed",
        "the token budget ran out in the middle of the session",
        "the gateway dropped the upstream catalog after a restart",
    ]
    store.put_many(texts, scope="c")
    store.put("the budget of the gateway", scope="c", topic="gateway budget")
    store.put("a parser note kept apart", scope="tiny", topic="parser")


def _explained(store: Store, text: str, **kw: object) -> list[Explanation]:
    pairs = store.explain(text, limit=5, **kw)  # type: ignore[arg-type]
    hits = store.search(text, limit=5, **kw)  # type: ignore[arg-type]
    assert [(h.entry.id, h.score) for h, _ in pairs] == [(h.entry.id, h.score) for h in hits]
    return [e for _, e in pairs]


def _assert_parts_recompose(explained: list[Explanation]) -> None:
    assert explained
    for rank, e in enumerate(explained, 1):
        assert e.rank == rank
        assert e.composed() == pytest.approx(e.score, rel=1e-9) and not e.case_checked
        assert e.lexical == pytest.approx(e.body + e.meta, rel=1e-9)
    assert [e.score for e in explained] == sorted((e.score for e in explained), reverse=True)


def test_the_parts_recompose_each_score_on_the_database_path(store: Store) -> None:
    _fill(store)
    on_sqlite = isinstance(store.conn, sqlite3.Connection)
    for q in QUESTIONS:
        explained = _explained(store, q)
        _assert_parts_recompose(explained)
        assert {e.path for e in explained} == {LEXICAL if on_sqlite else PGSQL}
        assert {e.neighbourhood_step for e in explained} == {CONTEXT if on_sqlite else NEIGHBOURS}


def test_the_parts_recompose_each_score_on_the_in_memory_postings(
    store_location: Path | str,
) -> None:
    # on PostgreSQL the in-memory scores are brought to ts_rank's scale: still recomposed
    with Store(store_location, counter=EstimateCounter(), resident_mb=64) as store:
        _fill(store)
        built_view(store)
        for q in QUESTIONS:
            explained = _explained(store, q)
            _assert_parts_recompose(explained)
            assert {e.path for e in explained} == {POSTINGS}


@pytest.mark.sqlite_only
def test_a_narrow_filter_is_named_as_the_path(store: Store) -> None:
    _fill(store)
    (e,) = _explained(store, "parser", filters=Filters(scope="tiny"))
    assert e.path == NARROW and "narrow filter" in e.why
    assert dict(e.fields) == {"topic": ("parser",), "body": ("parser",)}


@pytest.mark.sqlite_only
def test_a_third_hit_says_what_placed_it_below_the_second(store: Store) -> None:
    _fill(store)
    first, second, third = _explained(store, "parser failed socket retry")[:3]
    assert first.score >= second.score >= third.score
    assert third.lexical_rank is not None and third.direct
    # the same words, the body's: the lines a newcomer reads name the field and the terms
    text = "\n".join(explanation_lines(third, str))
    assert f"lexical rank {third.lexical_rank}" in text
    assert "terms matched: body [" in text
    assert dict(third.fields)["body"]


@pytest.mark.sqlite_only
def test_the_metadata_match_shows_in_its_part_and_its_field(store: Store) -> None:
    _fill(store)
    top = _explained(store, "gateway budget")[0]
    assert top.meta > 0.0 and dict(top.fields)["topic"] == ("budget", "gateway")


def test_the_fused_score_recomposes_from_the_two_shares(hybrid: Store) -> None:
    _fill(hybrid)
    # questions (a lookup whose rows all fit on the page is answered by its words alone)
    for q in ("what failed on a tab", "the socket retry", "the token budget of a session"):
        explained = _explained(hybrid, q)
        assert explained
        for e in explained:
            assert e.fused == e.score and e.weight is not None and 0.0 <= e.weight <= 1.0
            assert e.fused_again() == pytest.approx(e.score, abs=1e-12)
        text = "\n".join(explanation_lines(explained[0], str))
        assert "fused" in text and "similarity" in text


@pytest.mark.sqlite_only
def test_a_lookups_case_check_is_named_where_it_moved_a_hit(store: Store) -> None:
    store.put_many([f"filler note {i}" for i in range(20)])
    loud = store.put("Checking. Checking. Checking, Checking. Checking Checking " * 2).entry
    quiet = store.put("we kept on checking the logs of the build server for a while").entry
    first, second = _explained(store, "checking")[:2]
    assert (first.entry_id, second.entry_id) == (quiet.id, loud.id)
    assert first.case_checked and second.case_checked  # the two places' scores swapped
    assert second.composed() == pytest.approx(first.score)
    assert any(line.startswith("  case check: ") for line in explanation_lines(second, str))
