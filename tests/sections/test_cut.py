"""The reversible hard cut."""

from __future__ import annotations

import hashlib

import pytest

from offload.core.tokens import EstimateCounter
from offload.errors import InvalidInput
from offload.sections import Budget, Sections, plan_cut

REF = "ctx:sha256:" + "a" * 64
TEXT = "".join(
    f"Instruction {i}: keep functions short and named for what they do.\n" for i in range(200)
)


def test_text_within_the_limit_is_returned_unchanged(sections: Sections) -> None:
    result = sections.cut("short\n", max_chars=4000)
    assert result.text == "short\n" and not result.was_cut
    assert sections.store.stats()["entries"] == 0


def test_a_cut_keeps_whole_lines_within_the_limit_and_names_the_rest(sections: Sections) -> None:
    result = sections.cut(TEXT, max_chars=4000, name="CLAUDE.md")
    assert len(result.text) <= 4000
    assert TEXT.startswith(result.kept) and result.kept.endswith("\n")
    digest = hashlib.sha256(TEXT.encode()).hexdigest()
    assert result.reference == f"ctx:sha256:{digest}"
    marker = result.text.splitlines()[-1]
    assert marker == (
        f"[… cut: {result.rest_chars:,} more characters (~{result.rest_tokens:,} tokens) "
        f"from line {result.next_line}; read them: "
        f'RetrieveContext(reference="{result.reference}", start_line={result.next_line})]'
    )
    assert result.rest_chars == len(TEXT) - len(result.kept)
    assert result.next_line == result.kept.count("\n") + 1


def test_the_cut_part_comes_back_through_the_retrieve_tool(sections: Sections) -> None:
    result = sections.cut(TEXT, max_tokens=600, name="AGENTS.md")
    assert sections.counter.count(result.text) <= 600
    answer = sections.retriever()(result.reference or "", start_line=result.next_line)
    rest = TEXT[len(result.kept) :]
    assert rest in answer.text


def test_a_single_long_line_is_cut_mid_line() -> None:
    text = "x" * 10_000
    result = plan_cut(text, Budget(max_chars=1000), REF, "RetrieveContext", EstimateCounter())
    assert len(result.text) <= 1000
    assert result.next_line == 1 and result.kept == "x" * len(result.kept)


def test_a_cut_is_deterministic() -> None:
    counter = EstimateCounter()
    one = plan_cut(TEXT, Budget(max_tokens=300), REF, "RetrieveContext", counter)
    two = plan_cut(TEXT, Budget(max_tokens=300), REF, "RetrieveContext", counter)
    assert one == two and counter.count(one.text) <= 300


def test_a_cut_needs_a_positive_limit(sections: Sections) -> None:
    with pytest.raises(InvalidInput):
        sections.cut(TEXT)
    with pytest.raises(InvalidInput):
        sections.cut(TEXT, max_chars=0)
