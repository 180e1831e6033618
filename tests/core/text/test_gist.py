"""Extractive gists: what they pick, that they are deterministic and never too long."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offload.core.text import gist as gist_module
from offload.core.text.gist import gist, identifiers
from offload.errors import InvalidInput

TRACEBACK = """collecting tests
Traceback (most recent call last):
  File "/app/src/service/handler.py", line 42, in handle
    result = compute_total(order)
  File "/app/src/service/math.py", line 7, in compute_total
    raise PriceError("negative price")
PriceError: negative price for order_id=17
done
"""

MARKDOWN = """# Offload design

offload keeps an agent's context window lean.

## The store

Blocks are content-addressed.

```sh
# not a heading
```

## Security

Loopback only.
"""


def test_empty_and_blank_text_say_empty() -> None:
    assert gist("") == "(empty)"
    assert gist(" \n\t\n") == "(empty)"


def test_a_python_traceback_shows_its_exception_line() -> None:
    out = gist(TRACEBACK)
    assert "error: PriceError: negative price for order_id=17" in out
    assert "collecting tests" in out


def test_the_last_traceback_wins_when_exceptions_are_chained() -> None:
    text = (
        "Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'x'\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        'Traceback (most recent call last):\n  File "b.py", line 2\n'
        "RuntimeError: lookup failed\n"
    )
    assert "error: RuntimeError: lookup failed" in gist(text)


def test_traceback_header_and_frames_are_not_taken_as_first_lines() -> None:
    first = gist(TRACEBACK).splitlines()[0]
    assert first == "collecting tests"
    assert 'File "' not in gist(TRACEBACK, max_chars=1000).split("error:")[0]


def test_without_a_traceback_the_first_error_line_is_shown_with_a_count() -> None:
    text = "build started\nsrc/a.c:3: error: expected ';'\nsrc/b.c:9: error: unknown type\n"
    out = gist(text)
    assert "error: src/a.c:3: error: expected ';' (+1 more error lines)" in out


@pytest.mark.parametrize(
    "line",
    [
        "FAILED tests/test_x.py::test_y - assert 1 == 2",
        "thread 'main' panicked at src/main.rs:2:5",
        "fatal: not a git repository",
        "src/a.py:1:1: E501 line too long",
        "Error: ERR_MODULE_NOT_FOUND cannot find package",
        "2024-05-01 12:00:00 ERROR connection refused",
    ],
)
def test_common_error_line_shapes_are_recognised(line: str) -> None:
    assert f"error: {line}" in gist(f"starting\n{line}\n")


def test_merely_mentioning_an_error_class_is_not_an_error_line() -> None:
    text = "from offload.errors import ConfigError\n\nclass Thing:\n    pass\n"
    assert "error:" not in gist(text)


def test_markdown_headings_outside_fences_are_listed() -> None:
    out = gist(MARKDOWN)
    assert out.splitlines()[0] == "sections: Offload design | The store | Security"
    assert "not a heading" not in out


def test_first_meaningful_lines_skip_boilerplate() -> None:
    text = "#!/usr/bin/env python3\n\n---\n{\n(\n;;;\nreal content here\nsecond line\nthird\n"
    lines = gist(text).splitlines()
    assert lines[:2] == ["real content here", "second line"]
    assert "third" not in gist(text)


def test_a_json_object_is_described_by_its_top_level_keys() -> None:
    out = gist(json.dumps({"tools": [], "version": 2, "next_cursor": None}))
    assert out.splitlines()[0] == "JSON object, 3 keys: tools, version, next_cursor"


def test_a_json_array_is_described_by_its_length_and_item_keys() -> None:
    data = [{"id": i, "user_name": "x"} for i in range(12)]
    out = gist(json.dumps(data, indent=2))
    assert out.splitlines()[0] == "JSON array of 12 items (objects; keys: id, user_name)"
    assert "user_name" in out.splitlines()[1]
    assert gist("[1, 2, 3]") == "JSON array of 3 items"


def test_text_that_only_looks_like_json_is_treated_as_text() -> None:
    out = gist("{ this is not json }\nhello there\n")
    assert not out.startswith("JSON")
    assert "hello there" in out


def test_one_giant_line_is_clipped_to_the_limit() -> None:
    text = "word " * 200_000
    out = gist(text, max_chars=100)
    assert len(out) <= 100
    assert out.startswith("word word")
    assert out.endswith("…")


@pytest.mark.parametrize("limit", [0, 1, 5, 20, 50, 280, 1000])
def test_the_gist_never_exceeds_max_chars(limit: int) -> None:
    for text in (TRACEBACK, MARKDOWN, "", json.dumps({"k" * 500: 1}), "x" * 5000):
        assert len(gist(text, max_chars=limit)) <= limit


def test_a_negative_limit_is_refused() -> None:
    with pytest.raises(InvalidInput):
        gist("text", max_chars=-1)


def test_a_long_error_line_is_shown_once_not_also_as_a_first_line() -> None:
    line = "RuntimeError: " + "very long message " * 20
    out = gist(line + "\nnext line\n", max_chars=1000)
    lines = out.splitlines()
    assert lines[0] == "next line"
    assert [x for x in lines if "very long message" in x] == [lines[1]]
    assert lines[1].startswith("error: RuntimeError: very long message")


def test_the_first_line_and_error_survive_a_tight_limit() -> None:
    out = gist(TRACEBACK, max_chars=80)
    assert out.startswith("collecting tests\nerror: PriceError")
    assert len(out) <= 80


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=400), st.integers(0, 400))
def test_any_text_gives_a_bounded_deterministic_gist(text: str, limit: int) -> None:
    out = gist(text, max_chars=limit)
    assert len(out) <= limit
    assert gist(text, max_chars=limit) == out


def test_identifiers_rank_by_frequency_then_first_appearance() -> None:
    text = (
        "load_config then HttpClient then load_config; src/app/main.py and HttpClient load_config"
    )
    assert identifiers(text) == ["load_config", "HttpClient", "src/app/main.py"]


def test_identifiers_cover_every_kind() -> None:
    text = (
        "Call os.path.join in utils/io.py; on ERR_NOT_FOUND or E1101 raise "
        "NotFoundError from parseHeader with max_retries."
    )
    assert set(identifiers(text, limit=20)) == {
        "os.path.join",
        "utils/io.py",
        "ERR_NOT_FOUND",
        "E1101",
        "NotFoundError",
        "parseHeader",
        "max_retries",
    }


def test_identifiers_skip_plain_words_numbers_urls_and_short_names() -> None:
    text = "The value 3.14 at https://example.com/a/b_c is ok, e.g. a_b and Hello World."
    assert identifiers(text) == []


def test_identifiers_drop_trailing_sentence_punctuation() -> None:
    assert identifiers("See config.py.") == ["config.py"]


def test_identifiers_respect_the_limit() -> None:
    text = " ".join(f"name_{i}" for i in range(20))
    assert identifiers(text, limit=3) == ["name_0", "name_1", "name_2"]
    assert identifiers(text, limit=0) == []


# The linear rewrites of two patterns (see tests/core/test_regex_linear.py) accept exactly
# what the backtracking originals accepted: checked on short texts, where the originals
# are still fast.
_OLD_CAMEL = re.compile(r"(?:[A-Z][a-z0-9]+|[a-z][a-z0-9]*)(?:[A-Z][A-Za-z0-9]*)+")
_OLD_ERROR_LINE = re.compile(
    r"\b[\w.]*(?:Error|Exception)\b(?:\[\w+\])?:"
    r"|^\s*(?:E\s+)?[\w.]*(?:Error|Exception)\s*$"
    r"|\b(?:error|fatal|panic|FATAL|ERROR|Fatal|Panic)(?:\[\w+\])?[:!]"
    r"|^\s*(?:panic|fatal)\b|\bpanicked\b|\b(?:ERROR|FATAL|CRITICAL)\b|\bFAILED\b"
    r"|\bE\d{3,}\b|\bERR_[A-Z_]+"
)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="aBzZ09_.-+", min_size=4, max_size=14))
def test_camel_names_are_recognised_exactly_as_before_the_linear_rewrite(token: str) -> None:
    old = _OLD_CAMEL.fullmatch(token) is not None
    assert (gist_module._CAMEL.fullmatch(token) is not None) == old


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="Erorxcepti.:_ [a]E", max_size=24))
def test_error_lines_are_recognised_exactly_as_before_the_linear_rewrite(line: str) -> None:
    old = _OLD_ERROR_LINE.search(line) is not None
    assert (gist_module._ERROR_LINE.search(line) is not None) == old


def test_a_long_alternating_camel_token_is_classified_at_once() -> None:
    token = "aB" * 5000
    assert identifiers(f"{token} {token}+x") == [token]
