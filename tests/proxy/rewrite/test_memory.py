"""This session's paged-out messages, ranked one by one in memory for auto-recall."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from offload.config import ProxySettings
from offload.core.text import analysis
from offload.core.tokens import EstimateCounter
from offload.proxy.rewrite import memory as memory_module
from offload.proxy.rewrite.memory import Doc, Memory, Part, SessionIndex, read_part
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.recall import find_in
from offload.proxy.rewrite.session import SessionState
from offload.proxy.rewrite.stubs import message_stubs
from offload.store.store import Store

SCOPE = "/work/project"
N_CTX = 2048


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as s:
        yield s


def chat(turns: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for t in range(turns):
        words = " ".join(f"filler{t}word{i}" for i in range(40))
        msgs.append({"role": "user", "content": f"Question {t}: tell me about topic {t}. {words}"})
        answer = f"Answer {t}: the usual things.\n{words}"
        if t == 3:
            answer += "\nThe harbour pilot keeps the brass astrolabe in locker nine."
        msgs.append({"role": "assistant", "content": answer})
    return msgs


def only_state(p: Pipeline) -> SessionState:
    """The state of the one session ``p`` has seen."""
    (session,) = p._live._items.keys()
    live = p._live.get(session)
    assert live is not None
    return live.state


def paged(store: Store) -> str:
    """The newest part's reference after a long chat was paged out."""
    p = Pipeline(
        store, ProxySettings(scope=SCOPE, recall_ratio=0.0), EstimateCounter(), scope=SCOPE
    )
    msgs = chat(30)
    for k in range(2, len(msgs) + 1, 2):
        p.rewrite(msgs[:k], N_CTX)
    state = only_state(p)
    assert state.range is not None
    return state.range.ref


def test_the_message_holding_rare_words_ranks_first_and_names_its_lines(store: Store) -> None:
    newest = paged(store)
    index = Memory(store, SCOPE).index(newest)
    assert [d.index for d in index.docs] == sorted(d.index for d in index.docs)
    best = index.rank(["astrolab", "harbour", "pilot"], 3)
    doc = best[0][1]
    assert "brass astrolabe in locker nine" in doc.text and doc.index == 8
    lines = store.body(store.resolve(doc.ref, SCOPE)).split("\n")
    assert lines[doc.first_line - 1] == doc.header and doc.header.startswith("## #8 assistant")
    assert "\n".join(lines[doc.first_line : doc.last_line]) == doc.text


def test_the_index_spans_every_part_of_the_chain_and_is_built_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(message_stubs, "MERGE_BYTES", 3000)  # several parts, one chain
    newest = paged(store)
    memory = Memory(store, SCOPE)
    index = memory.index(newest)
    assert len({d.ref for d in index.docs}) > 1
    indexes = [d.index for d in index.docs]
    assert indexes == list(range(indexes[0], indexes[-1] + 1))  # each paged message once
    assert memory.index(newest) is index


def test_a_part_that_cannot_be_read_ends_the_chain_without_failing(store: Store) -> None:
    index = Memory(store, SCOPE).index("ctx:sha256:" + "0" * 64)
    assert index.docs == () and index.rank(["anything"], 5) == []


def test_ranking_is_deterministic_and_ties_keep_conversation_order() -> None:
    index = SessionIndex([])
    assert index.rank(["x"], 3) == [] and index.weight("x") == 0.0


def doc(index: int, text: str) -> Doc:
    counts = Counter(analysis.terms(text))
    return Doc(
        ref="ctx:sha256:" + "0" * 12,
        index=index,
        first_line=2 * index + 1,
        last_line=2 * index + 2,
        header=f"## #{index} user",
        text=text,
        terms=tuple(sorted(counts.items())),
        length=sum(counts.values()),
    )


def test_a_reply_that_shares_no_word_with_the_query_is_found_through_its_neighbour() -> None:
    texts = [f"small talk number {i} about the weather" for i in range(12)]
    texts[5] = "here is the photo I took at the lighthouse"
    texts[6] = "take a look at this one, what do you think?"  # says what, without its words
    index = SessionIndex([doc(i, t) for i, t in enumerate(texts)])
    ranked = [(score, d.index) for score, d in index.rank(analysis.terms("lighthouse photo"), 4)]
    assert [i for _, i in ranked[:3]] == [5, 4, 6]  # the match, then its neighbours by order
    assert ranked[0][0] == pytest.approx(2 * ranked[1][0]) and ranked[1][0] == ranked[2][0]
    assert index.rank(analysis.terms("weather"), 20)[-1][1].index in (5, 6)  # shares only


def test_neighbours_are_those_next_to_it_in_the_conversation_not_in_the_index() -> None:
    index = SessionIndex([doc(1, "the lighthouse photo"), doc(3, "take a look at this")])
    assert [d.index for _, d in index.rank(analysis.terms("lighthouse"), 5)] == [1]


def test_a_search_ranks_by_the_querys_content_words_not_its_function_words() -> None:
    texts = [f"did you see what the weather did on day {i}?" for i in range(10)]
    texts[4] = "I finally painted it: a lighthouse at dawn"
    index = SessionIndex([doc(i, t) for i, t in enumerate(texts)])
    found = [h.index for h in find_in(index, "When did you paint the lighthouse?")]
    assert found == [4, 3, 5]  # the match and its neighbours; no chatter for "did the"
    assert len(find_in(index, "when did the")) == 10  # nothing else asked: as it is


def test_an_index_put_together_from_its_parts_ranks_as_one_built_over_all_their_messages(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(message_stubs, "MERGE_BYTES", 3000)  # several parts, one chain
    memory = Memory(store, SCOPE)
    index = memory.index(paged(store))
    whole = SessionIndex(list(index.docs))
    assert len({d.ref for d in index.docs}) > 1
    for query in (["astrolab", "harbour"], ["filler3word1", "topic"], ["question", "answer"]):
        assert index.rank(query, 24) == whole.rank(query, 24)  # the same floats, same order
        assert [index.weight(t) for t in query] == [whole.weight(t) for t in query]
    assert index.average == whole.average


def test_parts_out_of_order_are_indexed_as_their_messages_sorted(store: Store) -> None:
    newest = Part((doc(1, "the lighthouse photo"), doc(2, "a look at it")), None)
    older = Part((doc(2, "a look at it"), doc(3, "the lighthouse at dawn")), None)
    index = SessionIndex.of_parts([newest, older])
    whole = SessionIndex([*newest.docs, *older.docs])
    assert [d.index for d in index.docs] == [1, 2, 2, 3]
    assert index.rank(["lighthous"], 5) == whole.rank(["lighthous"], 5)


def test_a_memory_counts_each_message_text_once_and_keeps_a_bounded_number(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted: list[str] = []
    count_terms = memory_module.count_terms

    def counting(text: str) -> memory_module.TermCounts:
        counted.append(text)
        return count_terms(text)

    monkeypatch.setattr(memory_module, "count_terms", counting)
    memory = Memory(store, SCOPE)
    assert memory.terms_of("brass astrolabe") == memory.terms_of("brass astrolabe")
    assert counted == ["brass astrolabe"]
    monkeypatch.setattr(memory_module, "TERM_COUNTS", 3)
    memory = Memory(store, SCOPE)
    for i in range(10):
        memory.terms_of(f"text {i}")
    assert len(memory._terms) == 3


def test_a_part_that_takes_in_the_parts_before_it_reuses_their_postings_and_ranks_alike(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(message_stubs, "MERGE_BYTES", 6000)  # page-outs merge into parts
    p = Pipeline(
        store, ProxySettings(scope=SCOPE, recall_ratio=0.0), EstimateCounter(), scope=SCOPE
    )
    memory = Memory(store, SCOPE)
    msgs = chat(30)
    generations = set()
    for k in range(2, len(msgs) + 1, 2):
        p.rewrite(msgs[:k], N_CTX)
        state = only_state(p)
        if state.range is None or state.range.ref in generations:
            continue
        generations.add(state.range.ref)
        index = memory.index(state.range.ref)  # each generation, as recall meets them
        whole = SessionIndex(list(index.docs))
        for query in (["astrolab", "harbour"], ["filler7word3", "topic"], ["answer"]):
            assert index.rank(query, 24) == whole.rank(query, 24)
    assert len(generations) > 3
    assert any(len(part.segments) > 1 for part in memory._parts.values())


def test_a_part_remembered_as_it_was_paged_out_equals_the_part_read_back(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(message_stubs, "MERGE_BYTES", 6000)
    p = Pipeline(store, ProxySettings(scope=SCOPE), EstimateCounter(), scope=SCOPE)
    msgs = chat(30)
    for k in range(2, len(msgs) + 1, 2):
        p.rewrite(msgs[:k], N_CTX)
    remembered = p.recall.memory._parts
    assert len(remembered) > 2
    for ref, part in remembered.items():
        assert part.docs == read_part(store, ref, SCOPE).docs


def test_a_part_that_takes_in_cached_parts_replaces_them_and_older_chains_still_rank_alike(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(message_stubs, "MERGE_BYTES", 6000)  # page-outs merge into parts
    p = Pipeline(store, ProxySettings(scope=SCOPE), EstimateCounter(), scope=SCOPE)
    memory = p.recall.memory
    msgs = chat(30)
    generations: list[str] = []
    for k in range(2, len(msgs) + 1, 2):
        p.rewrite(msgs[:k], N_CTX)
        state = only_state(p)
        if state.range is not None and state.range.ref not in generations:
            generations.append(state.range.ref)
            memory.index(state.range.ref)  # as recall meets each generation
    assert len(generations) > 3
    # each paged message is held by one cached part: the parts taken in were dropped
    held = Counter(d.index for part in memory._parts.values() for d in part.docs)
    assert held and set(held.values()) == {1}
    assert any(len(part.segments) > 1 for part in memory._parts.values())
    # only the newest chain's index is kept; an older one is put together again (its
    # dropped parts read back) and ranks as a memory that never dropped anything
    assert all(memory._sessions.get(ref) is None for ref in generations[:-1])
    fresh = Memory(store, SCOPE)
    for ref in generations:
        for query in (["astrolab", "harbour"], ["filler7word3", "topic"], ["answer"]):
            assert memory.index(ref).rank(query, 24) == fresh.index(ref).rank(query, 24)
