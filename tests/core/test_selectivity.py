"""Which query terms are searched for: a term most of the searched entries hold is not."""

from __future__ import annotations

from offload.core.selectivity import COMMON_SHARE, MIN_SEARCHED, common_cap, selective


def test_a_term_held_by_more_than_a_quarter_of_the_searched_entries_is_dropped() -> None:
    assert COMMON_SHARE == 0.25
    assert selective(["alice", "garden"], {"alice": 26, "garden": 3}, 100) == ["garden"]
    assert selective(["alice", "garden"], {"alice": 25, "garden": 3}, 100) == ["alice", "garden"]


def test_terms_not_counted_are_rare_and_order_is_kept() -> None:
    assert selective(["b", "common", "a"], {"common": 90}, 100) == ["b", "a"]


def test_a_query_of_common_terms_only_keeps_them_all() -> None:
    assert selective(["alice", "bob"], {"alice": 60, "bob": 50}, 100) == ["alice", "bob"]


def test_a_small_searched_set_keeps_every_term() -> None:
    assert common_cap(MIN_SEARCHED - 1) is None
    assert selective(["alice", "x"], {"alice": 19}, MIN_SEARCHED - 1) == ["alice", "x"]
    assert common_cap(MIN_SEARCHED) == int(COMMON_SHARE * MIN_SEARCHED) + 1
