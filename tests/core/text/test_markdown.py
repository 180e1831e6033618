"""Markdown sectioning: where sections split, what they are called, and exact round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offload.core.text.markdown import (
    PREAMBLE_TITLE,
    Section,
    atx_heading,
    headings,
    is_atx_heading,
    split_sections,
)
from offload.core.text.preview import contents
from offload.errors import InvalidInput


def titles(text: str, level: int = 2) -> list[str]:
    return [s.title for s in split_sections(text, level)]


def test_empty_input_gives_no_sections() -> None:
    assert split_sections("") == []


def test_text_without_headings_is_one_preamble_section() -> None:
    text = "just some words\nand more words\n"
    assert split_sections(text) == [
        Section(PREAMBLE_TITLE, 0, 1, 2, text, (PREAMBLE_TITLE,)),
    ]


def test_a_blank_only_document_keeps_its_bytes_in_one_section() -> None:
    sections = split_sections("\n  \n")
    assert [s.text for s in sections] == ["\n  \n"]


def test_text_before_the_first_heading_is_a_preamble_section() -> None:
    sections = split_sections("intro line\n\n## First\nbody\n")
    assert [(s.title, s.level, s.start_line, s.end_line) for s in sections] == [
        (PREAMBLE_TITLE, 0, 1, 2),
        ("First", 2, 3, 4),
    ]
    assert sections[0].text == "intro line\n\n"
    assert sections[1].text == "## First\nbody\n"


def test_blank_lines_before_the_first_heading_join_the_first_section() -> None:
    sections = split_sections("\n\n# Title\nbody")
    assert len(sections) == 1
    assert sections[0].title == "Title"
    assert (sections[0].start_line, sections[0].end_line) == (1, 4)
    assert sections[0].text == "\n\n# Title\nbody"


def test_atx_headings_split_and_carry_their_ancestor_path() -> None:
    text = "# A\na\n## B\nb\n## C\nc\n# D\n## E\n"
    sections = split_sections(text)
    assert [(s.title, s.level, s.path) for s in sections] == [
        ("A", 1, ("A",)),
        ("B", 2, ("A", "B")),
        ("C", 2, ("A", "C")),
        ("D", 1, ("D",)),
        ("E", 2, ("D", "E")),
    ]
    assert [(s.start_line, s.end_line) for s in sections] == [
        (1, 2),
        (3, 4),
        (5, 6),
        (7, 7),
        (8, 8),
    ]


def test_headings_deeper_than_the_level_stay_inside_their_section() -> None:
    text = "# A\n## B\n### C\ntext\n#### D\n"
    assert titles(text, level=1) == ["A"]
    assert titles(text, level=2) == ["A", "B"]
    assert titles(text, level=3) == ["A", "B", "C"]
    assert split_sections(text, level=2)[1].text == "## B\n### C\ntext\n#### D\n"


def test_level_zero_never_splits() -> None:
    assert titles("# A\n## B\n", level=0) == [PREAMBLE_TITLE]


@pytest.mark.parametrize("level", [-1, 7])
def test_a_level_outside_zero_to_six_is_refused(level: int) -> None:
    with pytest.raises(InvalidInput):
        split_sections("# A\n", level)


def test_a_hash_without_a_space_is_a_tag_not_a_heading() -> None:
    assert titles("#tag\n#another one\n## Real\n") == [PREAMBLE_TITLE, "Real"]


def test_a_bare_hash_line_is_an_empty_heading() -> None:
    sections = split_sections("intro\n#\nbody\n")
    assert [(s.title, s.level) for s in sections] == [(PREAMBLE_TITLE, 0), ("", 1)]


def test_atx_headings_allow_three_leading_spaces_but_not_four() -> None:
    assert titles("   ## Indented\n") == ["Indented"]
    assert titles("    ## Code\n") == [PREAMBLE_TITLE]


def test_atx_closing_hashes_are_not_part_of_the_title() -> None:
    assert titles("## Title ##\n# C# #\n## C#\n") == ["Title", "C#", "C#"]


def test_seven_hashes_are_not_a_heading() -> None:
    assert titles("####### nope\n", level=6) == [PREAMBLE_TITLE]


def test_setext_headings_split_at_their_text_line() -> None:
    text = "Title\n=====\nintro\n\nSub\n---\nbody\n"
    sections = split_sections(text)
    assert [(s.title, s.level, s.start_line, s.end_line) for s in sections] == [
        ("Title", 1, 1, 4),
        ("Sub", 2, 5, 7),
    ]
    assert sections[1].path == ("Title", "Sub")


def test_a_multiline_paragraph_becomes_one_setext_heading() -> None:
    sections = split_sections("before\n\nfirst part\nsecond part\n===\nbody\n")
    assert [(s.title, s.start_line) for s in sections] == [
        (PREAMBLE_TITLE, 1),
        ("first part second part", 3),
    ]


def test_dashes_after_a_blank_line_are_a_thematic_break_not_a_heading() -> None:
    assert titles("# A\ntext\n\n---\nmore\n") == ["A"]


def test_dashes_under_a_list_item_or_quote_are_not_a_setext_underline() -> None:
    assert titles("# A\n- item\n---\n> quote\n---\n") == ["A"]


def test_spaced_dashes_under_a_paragraph_are_a_break_not_a_heading() -> None:
    assert titles("# A\npara\n- - -\n") == ["A"]


def test_an_equals_line_without_a_paragraph_is_plain_text() -> None:
    assert titles("# A\n\n===\n") == ["A"]


def test_headings_inside_backtick_fences_are_not_split_points() -> None:
    text = "# A\n```python\n# comment\n## not a heading\n```\n## B\n"
    assert titles(text) == ["A", "B"]


def test_headings_inside_tilde_fences_are_not_split_points() -> None:
    text = "# A\n~~~\n# no\n```\n# still no\n~~~\n# B\n"
    assert titles(text) == ["A", "B"]


def test_a_longer_fence_is_not_closed_by_a_shorter_one() -> None:
    text = "# A\n````md\n```\n# inner\n```\n````\n# B\n"
    assert titles(text) == ["A", "B"]


def test_a_fence_is_not_closed_by_the_other_fence_character() -> None:
    assert titles("# A\n```\n~~~\n# no\n```\n# B\n") == ["A", "B"]


def test_a_closing_fence_with_an_info_string_does_not_close() -> None:
    assert titles("# A\n```\n```py\n# no\n```\n# B\n") == ["A", "B"]


def test_an_unclosed_fence_runs_to_the_end_of_the_document() -> None:
    assert titles("# A\n```\n# no\n## none\n") == ["A"]


def test_setext_underline_inside_a_fence_is_ignored() -> None:
    assert titles("# A\n```\nText\n---\n```\n") == ["A"]


def test_indented_code_is_not_a_paragraph_for_setext() -> None:
    assert titles("# A\n\n    code\n---\n") == ["A"]


def test_yaml_front_matter_is_not_read_as_a_setext_heading() -> None:
    text = "---\ntitle: x\n---\n# Real\n"
    sections = split_sections(text)
    assert [s.title for s in sections] == [PREAMBLE_TITLE, "Real"]
    assert sections[0].text == "---\ntitle: x\n---\n"


def test_crlf_documents_split_like_lf_and_keep_their_bytes() -> None:
    lf = "intro\n# A\ntext\n\nSub\n---\n```\n# no\n```\n## B\n"
    crlf = lf.replace("\n", "\r\n")
    got = split_sections(crlf)
    want = split_sections(lf)
    assert [(s.title, s.level, s.start_line, s.end_line, s.path) for s in got] == [
        (s.title, s.level, s.start_line, s.end_line, s.path) for s in want
    ]
    assert "".join(s.text for s in got) == crlf
    assert got[1].text == "# A\r\ntext\r\n\r\n"


def test_the_last_line_may_lack_a_newline() -> None:
    sections = split_sections("# A\nend")
    assert sections[0].text == "# A\nend"
    assert sections[0].end_line == 2


def test_headings_lists_every_heading_with_its_line() -> None:
    found = headings("x\n# A\n```\n# no\n```\nB\n---\n#### C\n")
    assert [(h.line, h.level, h.title) for h in found] == [(2, 1, "A"), (6, 2, "B"), (8, 4, "C")]
    assert [h.title for h in headings("# A\n### C\n", level=2)] == ["A"]


def test_sectioning_is_deterministic() -> None:
    text = "p\n# A\n## B\n```\n# x\n```\nC\n===\n"
    assert split_sections(text) == split_sections(text)


_LINES = st.sampled_from(
    [
        "",
        " ",
        "text",
        "more words here",
        "# H1",
        "## H2",
        "### H3",
        "#tag",
        "   ## spaced",
        "    # code",
        "===",
        "---",
        "- - -",
        "- item",
        "> quote",
        "```",
        "````",
        "```py",
        "~~~",
        "~~~~",
        "\t# tab",
        "## Closing ##",
        "é unicode ✓",
    ]
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(_LINES, max_size=30),
    st.sampled_from(["\n", "\r\n"]),
    st.booleans(),
    st.integers(0, 6),
)
def test_sections_concatenate_back_to_the_exact_input(
    lines: list[str], eol: str, trailing: bool, level: int
) -> None:
    text = eol.join(lines) + (eol if trailing and lines else "")
    sections = split_sections(text, level)
    assert "".join(s.text for s in sections) == text
    # Line numbers are contiguous, cover the document and match each text.
    expected_start = 1
    for s in sections:
        assert s.start_line == expected_start
        assert s.end_line - s.start_line + 1 == len(s.text.split("\n")) - (
            1 if s.text.endswith("\n") else 0
        )
        assert s.path[-1] == s.title
        assert s.level <= level
        expected_start = s.end_line + 1


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200), st.integers(0, 6))
def test_any_text_round_trips_byte_exactly(text: str, level: int) -> None:
    assert "".join(s.text for s in split_sections(text, level)) == text


def test_a_fence_left_open_is_found_and_a_closed_one_is_not() -> None:
    from offload.core.text.markdown import ends_inside_fence

    assert ends_inside_fence("intro\n```python\nx = 1\n")
    assert not ends_inside_fence("intro\n```python\nx = 1\n```\nafter\n")
    assert ends_inside_fence("~~~~\n```\n~~~\n")  # a shorter fence does not close a longer one
    assert not ends_inside_fence("inline ``` `code` ``` only\n")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("#", (1, "")),
        ("# x", (1, "x")),
        ("#\tx", (1, "x")),
        ("# x #", (1, "x")),
        ("# x#", (1, "x#")),
        ("# #", (1, "")),
        ("###### six", (6, "six")),
        ("   ### three spaces", (3, "three spaces")),
        ("## crlf\r\n", (2, "crlf")),
        ("#x", None),
        ("####### x", None),
        ("    # four spaces", None),
        ("\t# a tab", None),
        ("#!/bin/sh", None),
        ("", None),
    ],
)
def test_the_heading_rule_on_its_edge_cases(line: str, expected: tuple[int, str] | None) -> None:
    assert atx_heading(line) == expected
    assert is_atx_heading(line) == (expected is not None)


def test_a_heading_line_inside_a_code_fence_is_not_a_heading_of_the_document() -> None:
    text = "# real\n```\n# in code\n```\n## after\n"
    assert [h.title for h in headings(text)] == ["real", "after"]
    assert [e.title for e in contents(text)] == ["real", "after"]


@pytest.mark.parametrize("line", ["#", "#x", "####### x", "# x #", "    # x", "# #"])
def test_the_sectioner_and_the_contents_agree_on_what_a_heading_is(line: str) -> None:
    text = f"# top\n\nintro\n\n{line}\n\nbody\n\n## next\n\nmore\n"
    sectioned = [(h.line, h.level) for h in headings(text) if h.title]
    listed = [(e.line, e.level) for e in contents(text)]
    assert listed == sectioned
