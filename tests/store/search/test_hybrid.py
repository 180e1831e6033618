"""store.hybrid: search fuses the lexical ranking with the embedding's nearest entries."""

from __future__ import annotations

from pathlib import Path

from offload.config import SearchSettings
from offload.core.tokens import EstimateCounter
from offload.llm.embedding import load_embedder
from offload.store.backend import Sql
from offload.store.store import Store


def _ids(store: Store, text: str) -> list[int]:
    return [h.entry.id for h in store.search(text, limit=10)]


def test_similarity_orders_entries_that_match_the_same_words(hybrid: Store, path: Path) -> None:
    dog = hybrid.put("tonight puppy naps sofa", scope="s").entry.id
    market = hybrid.put("tonight market closes early", scope="s").entry.id
    question = "tonight where will my little dog sleep"
    with Store(path, counter=EstimateCounter()) as lexical:
        assert _ids(lexical, question) == [market, dog]  # a tie: the newer entry first
    assert _ids(hybrid, question) == [dog, market]


def test_hybrid_order_is_the_same_on_every_run(hybrid: Store) -> None:
    for i in range(40):
        hybrid.put(f"note {i}: the deploy of service {i % 5} failed on disk space")
    first = _ids(hybrid, "why did the deployment fail")
    assert first and all(_ids(hybrid, "why did the deployment fail") == first for _ in range(3))


def test_a_hybrid_page_is_its_slice_of_the_longer_ranking(hybrid: Store) -> None:
    for i in range(40):
        hybrid.put(f"note {i}: the deploy of service {i % 5} failed on disk {i % 3}")
    hybrid.put("the puppy sleeps on the sofa after the deployment")
    question = "why did the deployment of the service fail"

    def page(limit: int, offset: int) -> list[tuple[int, float]]:
        found = hybrid.search(question, limit=limit, offset=offset)
        return [(h.entry.id, h.score) for h in found]

    # the same candidates (limit + offset <= 16 asks for the same pool): only the fused
    # order's first limit + offset are ranked, which must be the longer order's
    whole = page(16, 0)
    assert len(whole) == 16
    for limit, offset in ((1, 0), (3, 4), (5, 11), (10, 6)):
        assert page(limit, offset) == whole[offset : offset + limit]


def test_an_entry_stored_without_a_vector_is_found_by_its_words(hybrid: Store, path: Path) -> None:
    with Store(path, counter=EstimateCounter()) as plain:
        old = plain.put("the zebrawordx incident report").entry.id
    hybrid.put("an unrelated note about lunch")
    assert _ids(hybrid, "zebrawordx")[0] == old


def test_a_query_matching_no_word_finds_nothing_even_with_a_model(hybrid: Store) -> None:
    hybrid.put("we adopted a dog from the shelter")
    assert _ids(hybrid, "qqxxzzv") == []


def test_a_store_without_the_embedding_package_searches_lexically(path: Path) -> None:
    absent = load_embedder(SearchSettings(), required=("offload_test_no_such_package",))
    assert absent is None
    with Store(path, counter=EstimateCounter(), embedder=absent) as store:
        hit = store.put("Caroline said, I went to the LGBTQ support group").entry.id
        store.put("Melanie said, I painted a sunrise")
        assert _ids(store, "When did Caroline go to the support group?")[0] == hit
        assert store.conn.execute(Sql("SELECT count(*) FROM entry_vectors")).fetchone()[0] == 0


def test_a_lookup_whose_rows_fit_on_the_page_is_answered_by_its_words(
    hybrid: Store, path: Path
) -> None:
    hybrid.put("the puppy sleeps on the sofa", scope="s")
    hybrid.put("our dog naps on the couch all afternoon", scope="s")
    hybrid.put("the frobnicator threshold is 42", scope="s")
    # unrelated texts beside them: the typical similarity is an unrelated text's
    hybrid.put("the quarterly tax form is due in april", scope="s")
    hybrid.put("rebuild the parser with the new grammar", scope="s")
    with Store(path, counter=EstimateCounter()) as lexical:
        alone = [(h.entry.id, h.score) for h in lexical.search("puppy", limit=5)]
    # every entry holding the word is on the page: no entry without it is added
    assert [(h.entry.id, h.score) for h in hybrid.search("puppy", limit=5)] == alone
    assert len(alone) == 1
    # a question is not a lookup: the nearest entries still join its words' answer
    assert len(hybrid.search("where does the puppy sleep?", limit=5)) > 1


_UNRELATED = (
    "alpha beta gamma deployment notes",
    "omega release checklist for the team",
    "the kubernetes cluster config yaml",
    "weather in paris was sunny today",
    "a big log file with many lines of output",
)


def test_a_question_shows_no_entry_the_embedding_finds_no_closer_than_a_typical_one(
    hybrid: Store,
) -> None:
    for text in _UNRELATED:
        hybrid.put(text, scope="s")
    target = hybrid.put("\n".join(f"line {i}" for i in range(1, 2001)), scope="s").entry.id
    pairs = hybrid.explain("what is on line number 1500?", scope="s", limit=10)
    assert pairs and pairs[0][0].entry.id == target
    # every hit holds a word of the question or is closer to it than the typical entry
    assert all(why.direct or (why.semantic_unit or 0.0) > 0.0 for _, why in pairs)
    assert all(hit.score > 0.0 for hit, _ in pairs)
    assert len(pairs) < len(_UNRELATED) + 1


def test_a_lookup_shows_only_its_matches_when_they_span_more_rows_than_the_page(
    hybrid: Store, path: Path
) -> None:
    for text in _UNRELATED:
        hybrid.put(text.replace("omega", "final"), scope="s")
    # the word in many chunks of one entry: more rows than the page holds, so the
    # embedding's scan runs, and what it adds holds none of the word
    log = "\n".join(f"{i} warn user session omega timeout retry" for i in range(3000))
    target = hybrid.put(log, scope="s").entry.id
    hybrid.put(
        "\n".join(f"{i} warn user session delta timeout retry" for i in range(50)), scope="s"
    )
    with Store(path, counter=EstimateCounter()) as lexical:
        alone = [h.entry.id for h in lexical.search("omega", scope="s", limit=10)]
    assert alone == [target]
    assert [h.entry.id for h in hybrid.search("omega", scope="s", limit=10)] == alone


def test_a_question_whose_nearest_entries_go_on_past_those_read_may_have_more_hits(
    hybrid: Store,
) -> None:
    notes = [f"note {i}: the puppy slept on the sofa after the walk" for i in range(120)]
    hybrid.put_many(notes, scope="s")
    hybrid.put("the quokka migration plan", scope="s")
    # one entry holds the word; the embedding's nearest entries are cut at what the page
    # needs while entries as near follow them
    found = hybrid.search_page("where is the quokka sleeping tonight?", scope="s", limit=5)
    assert found.hits and not found.every
    lookup = hybrid.search_page("quokka", scope="s", limit=5)
    assert (lookup.total, lookup.every) == (1, True)
