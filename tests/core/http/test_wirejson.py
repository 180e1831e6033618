"""JSON read from another server is RFC 8259's: a number that is not finite is no JSON."""

from __future__ import annotations

import pytest

from offload.core.http import wirejson
from offload.core.http.sse import SseEvent


@pytest.mark.parametrize("text", ['{"a": NaN}', "[Infinity]", '{"a": [-Infinity]}', "[1e999]"])
def test_a_number_that_is_not_finite_is_no_json(text: str) -> None:
    with pytest.raises(wirejson.NotFinite):
        wirejson.loads(text)
    with pytest.raises(ValueError):
        SseEvent(text).json()


def test_finite_numbers_and_the_words_in_strings_are_read_as_json() -> None:
    text = b'{"a": 1.5e308, "b": -2, "c": "NaN and Infinity", "d": 1e-999}'
    assert wirejson.loads(text) == {"a": 1.5e308, "b": -2, "c": "NaN and Infinity", "d": 0.0}
