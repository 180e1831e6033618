"""Tool argument checks: every refusal names the argument and what it must be."""

from __future__ import annotations

import pytest

from offload.errors import EncodingError, InvalidInput
from offload.mcp.args import Args, parse_duration


def args(**raw: object) -> Args:
    return Args("t", raw, ["s", "n", "i", "b", "l", "c"])


def test_unknown_arguments_are_refused_with_the_accepted_names() -> None:
    with pytest.raises(InvalidInput, match=r"t: unknown argument\(s\) zz; accepted: s, n"):
        Args("t", {"zz": 1}, ["s", "n"])


def test_required_text_must_be_present_and_not_blank() -> None:
    with pytest.raises(InvalidInput, match="s is required"):
        args().text("s", required=True)
    with pytest.raises(InvalidInput, match="s must not be empty"):
        args(s="  ").text("s", required=True)
    with pytest.raises(InvalidInput, match="s must be a string, got 3"):
        args(s=3).text("s")


def test_integers_accept_integral_floats_and_digit_strings_within_range() -> None:
    assert args(i=7.0).integer("i", 1, 1, 10) == 7
    assert args(i=" 9 ").integer("i", 1, 1, 10) == 9
    assert args().integer("i", 4, 1, 10) == 4
    for bad in (0, 11, True, 2.5, "x", "\u00b2", "9" * 5000):  # isdigit() but not int()
        with pytest.raises(InvalidInput, match="i must be an integer in 1-10"):
            args(i=bad).integer("i", 1, 1, 10)


def test_numbers_refuse_nan_out_of_range_and_booleans() -> None:
    assert args(n="0.25").number("n", 0, 1) == 0.25
    assert args().number("n", 0, 1) is None
    for bad in (float("nan"), 1.5, True, "high"):
        with pytest.raises(InvalidInput, match="n must be a number in 0-1"):
            args(n=bad).number("n", 0, 1)


def test_flags_take_booleans_and_their_cli_spellings_only() -> None:
    assert args(b="true").flag("b") is True
    assert args(b=False).flag("b", True) is False
    with pytest.raises(InvalidInput, match="b must be true or false"):
        args(b="yes please").flag("b")


def test_string_lists_accept_one_string_and_drop_blanks() -> None:
    assert args(l="one").strings("l") == ["one"]
    assert args(l=["a", " ", "b"]).strings("l") == ["a", "b"]
    with pytest.raises(InvalidInput, match="l must be a list of strings"):
        args(l=[1, 2]).strings("l")


def test_choices_name_the_allowed_values() -> None:
    assert args(c="hot").choice("c", ("cold", "hot"), "cold") == "hot"
    with pytest.raises(InvalidInput, match="c must be one of cold, hot"):
        args(c="warm").choice("c", ("cold", "hot"), "cold")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("12h", 43200), ("7d", 604800), ("2w", 1209600), ("45", 45)],
)
def test_durations_read_common_units(text: str, seconds: float) -> None:
    assert parse_duration("reap", text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "-3d", "3y", "infd"])
def test_bad_durations_say_what_they_should_look_like(text: str) -> None:
    with pytest.raises(InvalidInput, match="older_than must look like 30m, 12h or 7d"):
        parse_duration("reap", text)


def test_a_lone_surrogate_in_a_string_argument_is_an_encoding_error() -> None:
    # found by the MCP fuzz: JSON carries "\ud800"; SQLite could not bind it (-32603)
    a = Args("recall", {"ref": "\ud800", "queries": ["ok", "x\udcff"]}, ["ref", "queries"])
    with pytest.raises(EncodingError, match="recall: ref is not valid Unicode"):
        a.ref()
    with pytest.raises(EncodingError, match="queries"):
        a.strings("queries")
