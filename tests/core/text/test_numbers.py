from __future__ import annotations

import pytest

from offload.core.text.numbers import MAX_DIGITS, whole_number


def test_a_whole_number_reads_ascii_digits_with_blanks_around_them() -> None:
    assert whole_number("61") == 61
    assert whole_number(" 007 ") == 7
    assert whole_number("9" * MAX_DIGITS) == int("9" * MAX_DIGITS)


@pytest.mark.parametrize(
    "text",
    ["", "  ", "-1", "+1", "1.5", "1 2", "²", "①", "\u0661\u0662", "9" * (MAX_DIGITS + 1)],
)
def test_text_that_is_no_bounded_ascii_number_is_none_and_never_an_error(text: str) -> None:
    assert whole_number(text) is None


def test_a_digit_run_past_what_int_converts_is_none_not_a_value_error() -> None:
    # str.isdigit() holds and int() raises past 4,300 digits
    assert whole_number("9" * 5000) is None
