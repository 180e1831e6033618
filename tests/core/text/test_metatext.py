"""A topic or summary counts for search only where it says what the body does not."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from offload.core.text.gist import gist
from offload.core.text.metatext import novel

TURN = "Caroline said, I went to a LGBTQ support group yesterday and it was so powerful."


def test_a_first_line_taken_as_topic_adds_nothing_new() -> None:
    assert novel(TURN, TURN) == ""


def test_a_gist_of_a_chat_turn_adds_nothing_new() -> None:
    assert novel(gist(TURN), TURN) == ""


def test_a_gist_of_a_traceback_with_its_labels_adds_nothing_new() -> None:
    body = 'Traceback (most recent call last):\n  File "a.py", line 3\nValueError: bad thing'
    summary = gist(body)
    assert summary.startswith("error: ")
    assert novel(summary, body) == ""


def test_a_clipped_line_with_an_ellipsis_counts_as_copied() -> None:
    body = "first line of a long file that goes on and on well past any clip\nsecond"
    assert novel("first line of a long file that goes…", body) == ""


def test_whitespace_differences_do_not_make_a_copy_new() -> None:
    body = "def   handler(request):\n    return   response"
    assert novel("def handler(request): return response", body) == ""


def test_a_topic_a_person_wrote_is_kept() -> None:
    body = "We moved the session tokens to the new store and dropped the cookie."
    assert novel("auth refactor notes", body) == "auth refactor notes"


def test_a_one_word_keyword_is_kept_even_when_the_body_uses_it() -> None:
    assert novel("auth", "the auth module changed") == "auth"


def test_only_the_new_pieces_of_a_summary_are_kept() -> None:
    body = "line one of the body\nline two of the body"
    assert novel("line one of the body\nwhy this matters to us", body) == ("why this matters to us")


def test_a_list_of_identifiers_the_body_holds_counts_as_copied() -> None:
    body = "call parse_args then run_main in cli.py"
    assert novel("ids: parse_args, run_main, cli.py", body) == ""
    assert novel("ids: parse_args, other_name", body) == "ids: parse_args, other_name"


def test_an_empty_topic_stays_empty() -> None:
    assert novel("", "anything") == ""
    assert novel("   \n ", "anything") == ""


@given(st.text(max_size=200), st.text(max_size=400))
def test_what_is_kept_is_drawn_from_the_text_itself(text: str, body: str) -> None:
    kept = novel(text, body)
    for piece in kept.split("\n"):
        assert piece.strip() in text or not piece


def test_a_big_body_is_searched_without_a_copy_of_it() -> None:
    import tracemalloc

    body = "first line of the log\n" + "word   spaced  \t out\n" * 200_000  # ~4.6 MB
    tracemalloc.start()
    try:
        assert novel("word spaced out\nfirst line of the log", body) == ""
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < len(body) // 4


def test_a_very_long_topic_is_kept_without_being_searched() -> None:
    topic = "word " * 200
    assert novel(topic, topic * 3) == topic.strip()
