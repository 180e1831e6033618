"""A request body parsed as a JSON object of valid text, or refused in one line."""

from __future__ import annotations

import pytest

from offload.errors import InvalidInput
from offload.proxy.transport.jsonbody import lone_surrogate, parse_object


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b'{"t": NaN}', "NaN is not a JSON number"),
        (b'{"t": [1, -Infinity]}', "-Infinity is not a JSON number"),
        (b'{"t": "\\ud800"}', "lone UTF-16 surrogate"),
        (b'{"t": "a\\udc00b"}', "lone UTF-16 surrogate"),
        (b'{"t": "\\udc00\\ud800"}', "lone UTF-16 surrogate"),  # low before high: two lone
        (b'{"\\ud9ff": 1}', "lone UTF-16 surrogate"),  # a key is text too
        (b'{"t": "\xed\xa0\x80"}', "lone UTF-16 surrogate"),  # a surrogate's own bytes
        (b'{"t": ' + b"[" * 50 + b'"\\ud800"' + b"]" * 50 + b"}", "lone UTF-16 surrogate"),
        (b"[1]", "must be a JSON object"),
        (b"{", "malformed JSON body"),
        (b"[" * 100_000, "nested too deeply"),
    ],
)
def test_what_is_not_a_json_object_of_text_is_refused_in_one_line(raw: bytes, why: str) -> None:
    with pytest.raises(InvalidInput, match=why) as caught:
        parse_object(raw)
    assert "\n" not in str(caught.value)


def test_pairs_written_escaped_and_escaped_backslashes_before_u_are_text() -> None:
    raw = b'{"t": "\\ud83c\\udf89 \\uD83D\\uDE00 \\\\ud800 \\\\\\\\udc00", "n": 1.5e3}'
    assert parse_object(raw) == {"t": "\U0001f389 \U0001f600 \\ud800 \\\\udc00", "n": 1500.0}


def test_a_value_nested_deeper_than_the_stack_is_walked_without_recursion() -> None:
    deep: list[object] = ["\ud800"]
    for _ in range(100_000):
        deep = [deep]
    assert lone_surrogate(deep)
    assert not lone_surrogate({"a": [deep[0:0], "ok", {"k": 1}]})
