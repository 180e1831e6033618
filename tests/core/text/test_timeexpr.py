from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offload.core import fence
from offload.core.text import timeexpr

NOW = datetime(2023, 10, 20, 12, tzinfo=UTC).timestamp()  # a Friday


def _days(text: str, now: float = NOW) -> list[tuple[str, str]]:
    """Each span ``text`` names as (first day, last day), ISO."""
    return [
        (timeexpr.iso_day(s.start), timeexpr.iso_day(s.end - 1)) for s in timeexpr.spans(text, now)
    ]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("what happened on 8 May 2023?", ("2023-05-08", "2023-05-08")),
        ("What did he say on May 23, 2023", ("2023-05-23", "2023-05-23")),
        ("the 8th of May, 2023", ("2023-05-08", "2023-05-08")),
        ("what did she do in December 2023", ("2023-12-01", "2023-12-31")),
        ("in 2022", ("2022-01-01", "2022-12-31")),
        ("summer 2021", ("2021-06-01", "2021-08-31")),
        ("on 2023-05-08", ("2023-05-08", "2023-05-08")),
        ("camping in June", ("2023-06-01", "2023-06-30")),
        ("last May", ("2023-05-01", "2023-05-31")),
        ("next March", ("2024-03-01", "2024-03-31")),
        ("yesterday", ("2023-10-19", "2023-10-19")),
        ("tomorrow", ("2023-10-21", "2023-10-21")),
        ("last week", ("2023-10-09", "2023-10-15")),
        ("this week", ("2023-10-16", "2023-10-22")),
        ("last weekend", ("2023-10-14", "2023-10-15")),
        ("last month", ("2023-09-01", "2023-09-30")),
        ("next month", ("2023-11-01", "2023-11-30")),
        ("last year", ("2022-01-01", "2022-12-31")),
        ("last Friday", ("2023-10-13", "2023-10-13")),
        ("three days ago", ("2023-10-17", "2023-10-17")),
        ("the week before 9 June 2023", ("2023-06-02", "2023-06-08")),
        ("two weeks before August 11, 2023", ("2023-07-28", "2023-08-03")),
        ("the day after 3 May 2023", ("2023-05-04", "2023-05-04")),
    ],
)
def test_a_date_phrase_names_the_stretch_of_time_it_means(text: str, want: tuple[str, str]) -> None:
    assert _days(text) == [want]


def test_the_amount_before_a_date_moves_the_date_and_does_not_count_from_now() -> None:
    assert _days("what did she do last weekend before April 10, 2023?") == [
        ("2023-04-03", "2023-04-09")
    ]


def test_a_relative_phrase_counts_from_the_reference_it_is_given() -> None:
    january = datetime(2023, 1, 15, tzinfo=UTC).timestamp()
    assert _days("last May", january) == [("2022-05-01", "2022-05-31")]
    assert _days("in June", january) == [("2022-06-01", "2022-06-30")]
    assert _days("last month", january) == [("2022-12-01", "2022-12-31")]


def test_an_absolute_date_ignores_the_reference() -> None:
    assert _days("8 May 2023", 0.0) == _days("8 May 2023", NOW)
    assert [p.relative for p in timeexpr.phrases("8 May 2023 and yesterday")] == [False, True]


@pytest.mark.parametrize(
    "text",
    [
        "What may Caroline bring?",
        "They march together",
        "Jan said hello",
        "two weeks before the trip",
        "a weekly fall in prices",
        "Room 2300 of 12",
        "",
    ],
)
def test_words_that_only_look_like_dates_name_no_time(text: str) -> None:
    assert timeexpr.phrases(text) == ()


def test_a_month_name_that_is_also_a_word_is_a_month_beside_a_number_or_after_in() -> None:
    assert _days("We met in May") == [("2023-05-01", "2023-05-31")]
    assert _days("the 3 march event") == [("2023-03-03", "2023-03-03")]


def test_an_impossible_day_names_its_month_instead() -> None:
    assert _days("31 February 2023") == [("2023-02-01", "2023-02-28")]


def test_a_writers_date_reads_iso_and_words_with_a_time_of_day() -> None:
    at = timeexpr.parse_time
    assert at("2023-05-08") == datetime(2023, 5, 8, tzinfo=UTC).timestamp()
    assert at("2023-05-08T13:56:00Z") == datetime(2023, 5, 8, 13, 56, tzinfo=UTC).timestamp()
    assert at("2023-05-08T15:56:00+02:00") == at("2023-05-08T13:56:00Z")
    assert at("1:56 pm on 8 May, 2023") == at("2023-05-08T13:56:00Z")
    assert at("May 8, 2023") == at("2023-05-08")


@pytest.mark.parametrize("text", ["", "soon", "yesterday", "8 May", "x" * 300, "2023-13-45"])
def test_a_writers_date_without_a_full_date_is_none(text: str) -> None:
    assert timeexpr.parse_time(text) is None


@pytest.mark.parametrize(
    "text",
    [
        "2023-05-08T25:00Z",
        "2023-05-08T13:61Z",
        "2023-05-08T24:00Z",
        "2023-05-08Tgarbage",
        "2023-05-08X",
        "2023-05-08 at noon",
    ],
)
def test_an_iso_date_whose_time_is_not_one_is_refused_not_read_as_the_day(text: str) -> None:
    assert timeexpr.parse_time(text) is None


@pytest.mark.parametrize(
    ("text", "asks"),
    [
        ("When did Melanie go camping?", True),
        ("What year did they marry?", True),
        ("How long has Nate had his turtles?", True),
        ("What did Melanie paint?", False),
        ("How many pets does she have?", False),
    ],
)
def test_a_question_asking_when_is_told_apart(text: str, asks: bool) -> None:
    assert timeexpr.asks_time(text) is asks


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("I went there yesterday", True),
        ("I've had them for 3 years now", True),
        ("we met last Friday", True),
        ("It was a lovely hike", False),
        ("I have 3 dogs", False),
    ],
)
def test_a_text_saying_when_or_how_long_is_told_apart(text: str, says: bool) -> None:
    assert timeexpr.mentions_time(text) is says


def test_a_message_time_reads_seconds_milliseconds_and_iso_strings() -> None:
    assert timeexpr.message_time({"role": "user", "timestamp": 1_700_000_000}) == 1_700_000_000.0
    assert timeexpr.message_time({"timestamp": 1_700_000_000_000}) == 1_700_000_000.0
    assert timeexpr.message_time({"created_at": "2024-01-02T00:00:00Z"}) == (
        datetime(2024, 1, 2, tzinfo=UTC).timestamp()
    )
    for bad in ({"role": "user"}, {"timestamp": True}, {"timestamp": "soon"}, {"timestamp": -5}):
        assert timeexpr.message_time(bad) is None


def test_a_system_prompt_states_its_days_date_on_a_line_naming_the_date() -> None:
    prompt = "You are a helpful agent.\nIs directory a git repo: yes\nToday's date: 2025-06-20\n"
    assert timeexpr.stated_date(prompt) == datetime(2025, 6, 20, tzinfo=UTC).timestamp()
    assert timeexpr.stated_date("Current date is 8 May 2023.") == (
        datetime(2023, 5, 8, tzinfo=UTC).timestamp()
    )
    assert timeexpr.stated_date("Released on 8 May 2023, no dates here") is None


def test_a_conversation_time_is_its_newest_message_time_else_another_days_stated_date() -> None:
    msgs: list[dict[str, object]] = [
        {"role": "user", "timestamp": 100.0},
        {"role": "assistant"},
        {"role": "user"},
    ]
    assert timeexpr.conversation_time(msgs, 3, "", NOW) == 100.0
    assert timeexpr.conversation_time(msgs, 0, "", NOW) is None
    system = "Today's date: 2023-05-08"
    assert timeexpr.conversation_time(msgs[1:], 2, system, NOW) == (
        datetime(2023, 5, 8, tzinfo=UTC).timestamp()
    )
    today = datetime(2023, 5, 8, 18, tzinfo=UTC).timestamp()
    assert timeexpr.conversation_time(msgs[1:], 2, system, today) is None


def test_an_amount_of_time_before_an_event_named_by_words_is_anchored_to_those_words() -> None:
    (trip,) = timeexpr.anchored("What did Maria buy two weeks before the trip?")
    assert (trip.words, trip.offset, trip.width) == ("trip", -14 * timeexpr.DAY, 7 * timeexpr.DAY)
    (wedding,) = timeexpr.anchored("the day after her wedding, what happened")
    assert (wedding.words, wedding.offset) == ("wedding", timeexpr.DAY)
    span = wedding.span(1_000_000.0)
    assert (span.start, span.end) == (1_000_000.0 + timeexpr.DAY, 1_000_000.0 + 2 * timeexpr.DAY)
    for dated in ("two weeks before August 11, 2023", "a week before", "before the trip"):
        assert timeexpr.anchored(dated) == ()


_DATE_WORDS = st.sampled_from(
    [
        "in",
        "on",
        "last",
        "next",
        "this",
        "may",
        "june",
        "8",
        "31",
        "2023",
        "0001",
        "9999",
        "2099",
        "1900",
        "yesterday",
        "weeks",
        "ago",
        "before",
        "after",
        "the",
        "week",
        "weekend",
        "summer",
        "friday",
        ",",
        ".",
        ":",
        "999",
        "years",
        "2023-05-08",
        "0000-01-01",
        "9999-12-31",
    ]
)


@settings(max_examples=300)
@given(
    st.lists(_DATE_WORDS | st.text(max_size=8), max_size=12).map(" ".join),
    st.floats(allow_nan=True, allow_infinity=True),
)
def test_any_text_and_reference_give_spans_or_nothing_never_an_error(text: str, now: float) -> None:
    for span in timeexpr.spans(text, now):
        assert span.start <= span.end
    at = timeexpr.parse_time(text)
    assert at is None or timeexpr.EARLIEST <= at <= timeexpr.LATEST
    timeexpr.anchored(text)
    timeexpr.mentions_time(text)


@pytest.mark.parametrize("value", [1e300, "0001-01-01T00:00:00+01:00", "10000-01-01"])
def test_a_time_outside_years_1_to_9999_is_no_time(value: object) -> None:
    assert timeexpr.message_time({"timestamp": value}) is None


def test_the_first_and_last_days_a_date_can_name_show_as_themselves() -> None:
    assert timeexpr.iso_day(timeexpr.EARLIEST) == "0001-01-01"
    assert timeexpr.iso_day(timeexpr.LATEST) == "9999-12-31"
    assert fence.iso(timeexpr.EARLIEST) == "0001-01-01T00:00:00Z"
    assert fence.iso(timeexpr.LATEST) == "9999-12-31T23:59:59Z"


@pytest.mark.parametrize(
    "text",
    [
        "in may " + "7" * 5000,
        "7" * 5000 + " may 2023",
        "when was it? " + "9" * 5000,
        "\u0661" * 5000 + " days ago",
        "12:" + "3" * 5000,
    ],
)
def test_a_run_of_thousands_of_digits_is_no_number_and_raises_nothing(text: str) -> None:
    # int() refuses a digit string past 4,300 digits; stored text and queries may hold one
    assert all("7777" not in p.words and p.day is None for p in timeexpr.phrases(text))
    timeexpr.mentions_time(text)
    assert timeexpr.anchored(text) == ()


def test_dates_beside_a_long_digit_run_are_still_read() -> None:
    found = timeexpr.phrases("id " + "4" * 5000 + " on 8 May 2023")
    assert [(p.year, p.month, p.day) for p in found] == [(2023, 5, 8)]
