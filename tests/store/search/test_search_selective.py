"""A term most of the searched scope holds (a speaker's name) is not searched for there."""

from __future__ import annotations

from offload.core.text.analysis import analyse_query
from offload.store.models import Filters
from offload.store.search import scope_terms
from offload.store.search.query import filter_sql
from offload.store.store import Store


def _conversation(store: Store) -> int:
    # one scope where every other turn names Alice; another, bigger, where nobody does,
    # so "alice" is rare in the whole index but common in the conversation
    for i in range(30):
        store.put(f"Alice said, Alice thinks item {i} is fine, Alice", scope="talk")
        store.put(f"Bob said, noted number {i}", scope="talk")
    hit = store.put("Bob said, the garden needs water", scope="talk").entry.id
    for i in range(120):
        store.put(f"unrelated record {i} about servers", scope="ops")
    return hit


def _terms(store: Store, text: str, scope: str | None) -> list[str]:
    where, params = filter_sql(Filters(scope=scope), store.clock())
    terms = list(analyse_query(text).any_of)
    return scope_terms.selective_terms(store.conn, terms, where, params)


def test_a_term_common_in_the_scope_is_dropped_there_but_kept_across_scopes(
    store: Store,
) -> None:
    _conversation(store)
    garden = list(analyse_query("garden").any_of)
    assert _terms(store, "Alice garden", "talk") == garden  # 30 of the 61 turns there
    assert _terms(store, "Alice garden", None) == _terms(store, "Alice garden", "ops")
    every = list(analyse_query("Alice garden").any_of)
    assert _terms(store, "Alice garden", None) == every  # 30 of all 181 entries


def test_the_telling_word_ranks_first_over_the_common_name(store: Store) -> None:
    hit = _conversation(store)
    hits = store.search("What did Alice say about the garden?", scope="talk", limit=3)
    assert hits[0].entry.id == hit


def test_a_query_of_common_words_alone_still_finds_their_entries(store: Store) -> None:
    _conversation(store)
    assert store.search("Alice", scope="talk", limit=3)
    # the telling word matches nothing in the scope: the common one is searched after all
    found = store.search("Alice zzyzzx", scope="talk", limit=3)
    assert found and "Alice" in found[0].text


def test_over_the_whole_store_the_index_counts_decide_as_the_filtered_count_does(
    store: Store,
) -> None:
    # "alice" is in 50 of 61 turns; one entry elsewhere makes the scope a real filter, so
    # the scoped call counts under it and the unscoped one reads the index's vocabulary
    for i in range(50):
        store.put(f"Alice said, item {i} is fine", scope="talk")
    for i in range(10):
        store.put(f"Bob said, noted number {i}", scope="talk")
    store.put("the garden needs water", scope="elsewhere")
    garden = list(analyse_query("garden").any_of)
    assert _terms(store, "Alice garden", "talk") == garden
    assert _terms(store, "Alice garden", None) == garden
    # a term of a fifth of the entries is kept either way
    assert len(_terms(store, "Bob garden", None)) == 2
    assert len(_terms(store, "Bob garden", "talk")) == 2
