"""Cache alignment over successive turns, and its /context-style report."""

from __future__ import annotations

import pytest

from offload.core.hashing import text_hash
from offload.core.tokens import default_counter
from offload.errors import InvalidInput
from offload.sections import align, align_history, align_prompts, format_report

COUNTER = default_counter()
RULES = "Always run the tests. " * 40
README = "offload keeps context lean. " * 30


def turn(status: str, readme: str = README) -> dict[str, str]:
    return {"Instructions": RULES, "Git status": status, "README": readme}


def test_a_first_turn_reports_tokens_and_nothing_cached() -> None:
    report = align([turn("M a.py")], COUNTER)
    assert [s.status for s in report.sections] == ["new", "new", "new"]
    assert report.cached_tokens == 0
    assert report.sections[0].tokens == COUNTER.count(RULES)
    assert report.total_tokens == sum(s.tokens for s in report.sections)
    assert "First turn seen" in format_report(report)


def test_a_changed_middle_section_ends_the_cached_prefix_and_moves_last() -> None:
    report = align([turn("M a.py"), turn("M a.py\nM b.py")], COUNTER)
    by_name = {s.name: s for s in report.sections}
    assert by_name["Instructions"].cached and by_name["Instructions"].status == "unchanged"
    assert by_name["Git status"].status == "changed" and not by_name["Git status"].cached
    assert by_name["README"].status == "unchanged" and not by_name["README"].cached
    assert report.cached_tokens == by_name["Instructions"].tokens
    assert report.suggested_order == ("Instructions", "README", "Git status")
    assert (
        report.suggested_cached_tokens == by_name["Instructions"].tokens + by_name["README"].tokens
    )
    assert report.compact_after == "README"
    assert report.compact_at == report.suggested_cached_tokens


def test_volatility_over_many_turns_orders_the_changed_sections() -> None:
    turns = [{"A": "a", "B": f"b{i}", "C": f"c{i // 2}", "D": "d"} for i in range(5)]
    report = align(turns, COUNTER)
    changes = {s.name: s.changes for s in report.sections}
    assert changes == {"A": 0, "B": 4, "C": 2, "D": 0}
    assert report.suggested_order == ("A", "D", "C", "B")


def test_a_reordered_section_breaks_the_prefix_even_when_unchanged() -> None:
    report = align([{"A": "a", "B": "b"}, {"B": "b", "A": "a"}], COUNTER)
    assert [s.cached for s in report.sections] == [False, False]
    assert [s.status for s in report.sections] == ["unchanged", "unchanged"]


def test_removed_sections_are_listed() -> None:
    report = align([{"A": "a", "B": "b"}, {"A": "a"}], COUNTER)
    assert report.removed == ("B",)
    assert "Removed since the last turn: B" in format_report(report)


def test_history_given_as_hashes_matches_history_given_as_text() -> None:
    turns = [turn("1"), turn("2"), turn("2", readme="new readme")]
    hashed = [[(k, text_hash(v)) for k, v in t.items()] for t in turns[:-1]]
    assert align_history(hashed, turns[-1], COUNTER) == align(turns, COUNTER)


def test_whole_prompts_are_split_at_headings() -> None:
    p1 = f"## Instructions\n{RULES}\n## Git status\nM a.py\n## README\n{README}\n"
    p2 = f"## Instructions\n{RULES}\n## Git status\nM b.py\n## README\n{README}\n"
    report = align_prompts([p1, p2], counter=COUNTER)
    assert [s.name for s in report.sections] == ["Instructions", "Git status", "README"]
    assert [s.cached for s in report.sections] == [True, False, False]


def test_the_report_renders_a_table_and_the_suggestions() -> None:
    text = format_report(align([turn("1"), turn("2")], COUNTER))
    assert text.startswith("## Context: 3 sections, ")
    assert "| 1 | Instructions | " in text and "| unchanged | yes |" in text
    assert "| 2 | Git status | " in text and "| changed | no |" in text
    assert "Suggested order (stable sections first): Instructions → README → Git status" in text
    assert 'Compact point: after "README"' in text


def test_repeated_names_in_a_turn_are_refused() -> None:
    with pytest.raises(InvalidInput, match="unique"):
        align([[("A", "x"), ("A", "y")]], COUNTER)


def test_the_same_sections_give_the_same_cache_key() -> None:
    from offload.sections import cache_key

    sections = [("rules", "be brief"), ("readme", "a tool"), ("status", "clean")]
    key = cache_key(sections)
    assert key == cache_key(list(sections))
    assert key.startswith("offload-") and len(key) <= 64
    assert cache_key(sections[:2]) != key


def test_a_section_after_the_stable_ones_does_not_change_the_cache_key() -> None:
    from offload.sections import cache_key

    before = [("rules", "be brief"), ("readme", "a tool"), ("status", "clean")]
    after = [("rules", "be brief"), ("readme", "a tool"), ("status", "2 files changed")]
    assert cache_key(before, through="readme") == cache_key(after, through="readme")
    assert cache_key(before) != cache_key(after)


def test_cache_keys_do_not_collide_by_moving_text_between_sections() -> None:
    from offload.sections import cache_key

    assert cache_key([("a", "xy"), ("b", "z")]) != cache_key([("a", "x"), ("b", "yz")])
    assert cache_key([("ab", "")]) != cache_key([("a", "b")])


def test_a_cache_key_through_a_missing_section_is_refused() -> None:
    from offload.sections import cache_key

    with pytest.raises(InvalidInput, match="no section named"):
        cache_key([("a", "x")], through="b")


def test_built_sections_and_their_pairs_give_the_same_cache_key() -> None:
    from offload.sections import BuiltSection, cache_key

    built = [BuiltSection("rules", "be brief", "unchanged", 2, 2)]
    assert cache_key(built) == cache_key([("rules", "be brief")])


def test_a_report_names_the_cache_key_of_its_stable_sections_in_the_suggested_order() -> None:
    from offload.sections import cache_key

    before = {"status": "clean", "rules": "be brief", "readme": "a tool"}
    after = {"status": "dirty", "rules": "be brief", "readme": "a tool"}
    report = align([before, after], COUNTER)
    assert report.suggested_order[-1] == "status"
    assert report.cache_key == cache_key([("rules", "be brief"), ("readme", "a tool")])
    assert report.cache_key in format_report(report)
    assert align([after], COUNTER).cache_key is None
