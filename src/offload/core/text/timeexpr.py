"""Dates in text (pure): an entry's event time as a writer gives it, and the times a query
names, absolute or relative, as spans of time a search prefers.

A date is read with English grammar, not a list of phrases: month names (and their usual
abbreviations, read as months only beside a number or after a word that introduces a
time: ``in``, ``last``, ``since``...), weekday names, seasons, years (1900-2099), day
numbers with or without an ordinal suffix, ISO dates, number words up to twelve, and the
relative forms built from them: ``yesterday``, ``today``, ``tomorrow``;
``last``/``this``/``next``/``past`` with a unit (``week``, ``weekend``, ``month``,
``year``), a month, a weekday or a season; ``N units ago``; ``N units before/after``
(or ``the week before``) a date. A relative phrase is resolved against a reference
"now" the caller gives (a search: the newest event time in its scope, or one it is
told). An amount of time before or after an event named by words, not a date (``two
weeks before the trip``), is an :class:`Anchored`: the caller finds the event's time
(a search: the best hit for ``trip``).

Text is lower-cased and cut into tokens by one linear pattern; the grammar then walks the
tokens once, each phrase a bounded look at the tokens around it. Every time is UTC.
"""

from __future__ import annotations

import calendar
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

DAY = 86400.0
# the times a date names: from 1 January 0001 to 31 December 9999 (UTC)
EARLIEST = -62135596800.0
LATEST = 253402300799.0
_WEEK = 7 * DAY
_TOKEN = re.compile(r"\d{4}-\d{2}-\d{2}(?:[t ]\d{2}:\d{2}(?::\d{2})?)?|[a-z]+|\d+|[:,.]")
_ISO_DAY = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
# no number the grammar reads has more digits than a year; a longer run is no number to it
_MOST_DIGITS = 4
_NOT_A_NUMBER = "#"


def _tokens(text: str) -> list[str]:
    """``text`` as the grammar's tokens: words, numbers, ISO dates and punctuation. A run
    of more than :data:`_MOST_DIGITS` digits becomes an inert token that no rule reads:
    ``int`` refuses a run past 4,300 digits, and stored text may hold one."""
    return [
        _NOT_A_NUMBER if len(t) > _MOST_DIGITS and t.isdigit() else t
        for t in _TOKEN.findall(text.lower())
    ]


_MONTHS = {
    name: i
    for i, name in enumerate(
        [
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        ],
        1,
    )
}
_MONTH_ABBR = {name[:3]: i for name, i in _MONTHS.items()} | {"sept": 9}
# month names that are also common words, and every abbreviation: months only beside a
# number or after a word that introduces a time
_WEAK_MONTHS = frozenset(("may", "march", *_MONTH_ABBR))
_WEEKDAYS = {
    name: i
    for i, name in enumerate(
        ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
    )
}
_SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}
_NUMBERS = {
    name: i
    for i, name in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
        ]
    )
} | {"a": 1, "an": 1, "couple": 2, "several": 3}
_UNITS = {"day": DAY, "week": _WEEK, "weekend": _WEEK, "month": 30.44 * DAY, "year": 365.25 * DAY}
_DEICTIC = {"yesterday": -1, "today": 0, "tonight": 0, "tomorrow": 1}
_SHIFTS = {"last": -1, "past": -1, "previous": -1, "this": 0, "next": 1, "coming": 1}
# words after which a weak month name is read as a month
_INTRODUCERS = frozenset(
    [
        "in",
        "on",
        "of",
        "since",
        "until",
        "till",
        "by",
        "from",
        "during",
        "before",
        "after",
        "early",
        "late",
        "mid",
        "last",
        "this",
        "next",
    ]
)
_ORDINAL = frozenset(("st", "nd", "rd", "th"))
_AMPM = frozenset(("am", "pm"))


@dataclass(frozen=True, slots=True)
class Span:
    """A stretch of time a text names: from ``start`` (inclusive) to ``end`` (exclusive),
    epoch seconds, and the words that named it."""

    start: float
    end: float
    words: str

    def distance_days(self, t: float) -> float:
        """How many days ``t`` lies outside the span (0 inside it)."""
        if t < self.start:
            return (self.start - t) / DAY
        if t >= self.end:
            return (t - self.end) / DAY + 1.0 / 86400.0
        return 0.0


@dataclass(frozen=True, slots=True)
class Phrase:
    """A time phrase found in a text, resolved against a reference time by :meth:`span`.

    ``relative`` is True when the reference changes what it names (``last May``,
    ``yesterday``); an absolute phrase (``8 May 2023``) ignores it."""

    words: str
    relative: bool
    kind: str  # "day", "days", "month", "season", "year", "week", "weekend", "ago", "weekday"
    year: int | None = None
    month: int | None = None
    day: int | None = None
    shift: int = 0  # last/this/next: -1/0/1; N ago: -N (in units of ``unit``)
    unit: float = 0.0
    offset: float = 0.0  # N units before (negative) or after (positive) the named span
    width: float = 0.0  # the shifted span's width (0: the named span's own)

    def span(self, now: float) -> Span:
        """The stretch of time this phrase names, ``now`` its reference."""
        start, end = _named(self, now)
        if self.offset:
            start += self.offset
            end = start + (self.width or (end - start))
        return Span(start, end, self.words)


def phrases(text: str) -> tuple[Phrase, ...]:
    """Every time phrase in ``text``, in order (each token read by at most one)."""
    toks = _tokens(text)
    out: list[Phrase] = []
    ends: list[int] = []
    i = 0
    while i < len(toks):
        found = _phrase_at(toks, i)
        if found is None:
            i += 1
            continue
        phrase, end = found
        moved = _with_offset(toks, i, phrase)
        if moved is not phrase and ends and ends[-1] == i - 1 and out[-1].relative:
            # "last weekend before April 10": the amount belongs to the date after it
            out.pop()
            ends.pop()
        out.append(moved)
        ends.append(end)
        i = end
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Anchored:
    """An amount of time before or after an event a text names by words, not by a date
    (``two weeks before the trip``): the ``words`` to find the event by, and the span
    relative to its time (``offset`` from it, ``width`` long)."""

    words: str
    offset: float
    width: float

    def span(self, at: float) -> Span:
        """The span this names when the event happened at ``at``."""
        return Span(at + self.offset, at + self.offset + self.width, self.words)


# words that end an event's name after "before"/"after"; articles and possessives
# before it are not part of it
_ANCHOR_WORDS = 6
_ANCHOR_ENDS = frozenset((",", ".", ":", "before", "after", "and", "when", "while", "did"))
_DETERMINERS = frozenset(
    ["the", "a", "an", "my", "his", "her", "their", "our", "your", "its", "this", "that"]
)


def anchored(text: str) -> tuple[Anchored, ...]:
    """The amounts of time before or after an event named by words (not a date) in
    ``text``: ``two weeks before the trip``, ``the day after her wedding``."""
    toks = _tokens(text)
    out: list[Anchored] = []
    for j, t in enumerate(toks):
        if t not in ("before", "after") or j < 1 or _unit(toks[j - 1]) is None:
            continue
        if j + 1 >= len(toks) or _phrase_at(toks, j + 1) is not None:
            continue  # a date follows: phrases() moves it
        n = _amount(toks[j - 2]) if j >= 2 else None
        unit = _UNITS[_unit(toks[j - 1]) or "day"]
        words: list[str] = []
        for w in toks[j + 1 : j + 1 + _ANCHOR_WORDS]:
            if w in _ANCHOR_ENDS:
                break
            if words or w not in _DETERMINERS:
                words.append(w)
        if words:
            step = (1 if n is None else n) * unit
            out.append(Anchored(" ".join(words), -step if t == "before" else step, unit))
    return tuple(out)


def spans(text: str, now: float) -> tuple[Span, ...]:
    """The stretches of time ``text`` names, relative phrases resolved against ``now``."""
    return tuple(p.span(now) for p in phrases(text))


# a question asking for a time: "when", "what year", "which day", "how long"
_ASKED_UNITS = frozenset(("year", "month", "week", "day", "date", "time", "season"))


def asks_time(text: str) -> bool:
    """Whether ``text`` asks when something happened or how long it lasted: the word
    ``when``, ``what``/``which`` before a unit of time (``what year``), or ``how long``."""
    toks = _tokens(text)
    for i, t in enumerate(toks):
        after = toks[i + 1] if i + 1 < len(toks) else ""
        if t == "when" or (t == "how" and after == "long"):
            return True
        if t in ("what", "which") and after in _ASKED_UNITS:
            return True
    return False


def mentions_time(text: str) -> bool:
    """Whether ``text`` says when or how long: a time phrase (:func:`phrases`) or an
    amount of a unit of time (``3 years``, ``a few days``)."""
    toks = _tokens(text)
    for i, t in enumerate(toks):
        if i + 1 < len(toks) and _unit(toks[i + 1]) and (_amount(t) is not None or t == "few"):
            return True
    return bool(phrases(text))


_ISO_DATE = re.compile(r"[+-]?\d{4,}-\d\d-\d\d")


def parse_time(text: str) -> float | None:
    """A writer's date or time as epoch seconds (UTC), or None when ``text`` names none:
    ISO 8601 (``2023-05-08``, ``2023-05-08T13:56:00Z``, with an offset), or a date in
    words with an optional time of day before it (``1:56 pm on 8 May, 2023``,
    ``May 8, 2023``). A date without a year, or a relative one, is not a writer's date."""
    raw = text.strip()
    if not raw or len(raw) > 200:
        return None
    try:
        iso = datetime.fromisoformat(raw.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        iso = None
    if iso is not None:
        try:
            at = (iso if iso.tzinfo else iso.replace(tzinfo=UTC)).timestamp()
        except (OverflowError, ValueError):
            return None
        return at if EARLIEST <= at <= LATEST else None
    if _ISO_DATE.match(raw):
        return None  # an ISO date with a time that is none (T25:00): not a date in words
    toks = _tokens(raw)
    clock = _clock(toks)
    for i in range(len(toks)):
        found = _phrase_at(toks, i)
        if found is not None and not found[0].relative and found[0].kind == "day":
            start, _end = _named(found[0], 0.0)
            return start + clock
    return None


# a message's own time, where a client sends one (neither OpenAI's nor Anthropic's
# message format has a field for it): epoch seconds (or milliseconds) or an ISO string
MESSAGE_TIME_KEYS = ("timestamp", "created_at")
_DATE_WORD = re.compile(r"\bdate\b", re.IGNORECASE)
_DATED_LINES = 20  # how many lines naming a date a system prompt is searched for


def message_time(message: Mapping[str, Any]) -> float | None:
    """The time a chat message carries in one of :data:`MESSAGE_TIME_KEYS`, or None."""
    for key in MESSAGE_TIME_KEYS:
        value = message.get(key)
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int | float) and math.isfinite(value) and value > 0:
            seconds = float(value) / 1000.0 if value > 1e11 else float(value)
            return seconds if seconds <= LATEST else None
        if isinstance(value, str):
            parsed = parse_time(value)
            if parsed is not None:
                return parsed
    return None


def stated_date(text: str) -> float | None:
    """The date a text states as the day's (a system prompt's ``Today's date:
    2025-06-20``, ``Current date is 8 May 2023``): the first full date on a line holding
    the word ``date``, or None."""
    for n, m in enumerate(_DATE_WORD.finditer(text)):
        if n >= _DATED_LINES:
            break
        start = text.rfind("\n", 0, m.start()) + 1
        end = text.find("\n", m.end())
        line = text[start : end if end >= 0 else len(text)][:400]
        for p in phrases(line):
            if p.kind == "day" and not p.relative:
                return _named(p, 0.0)[0]
    return None


def conversation_time(
    messages: Sequence[Mapping[str, Any]], upto: int, system: str, today: float
) -> float | None:
    """When what messages ``[0, upto)`` tell happened: the newest time one of them
    carries (:func:`message_time`), else the date the conversation's ``system`` text
    states when it is not ``today``'s (a conversation of another day, replayed or
    imported); None when neither says (the time it is stored stands for it)."""
    newest = None
    for msg in messages[max(0, upto - 1) :: -1] if upto else ():
        newest = message_time(msg)
        if newest is not None:
            return newest
    date = stated_date(system) if system else None
    if date is None or _at_day(date) == _at_day(today):
        return None
    return date


def _at_day(t: float) -> int:
    return math.floor(_clamped(t) / DAY)


# -- the grammar ------------------------------------------------------------------------


def _phrase_at(toks: Sequence[str], i: int) -> tuple[Phrase, int] | None:
    """The phrase starting at token ``i`` and the index after it, or None."""
    t = toks[i]
    if _ISO_DAY.match(t) and _year(t[:4]) is not None:
        return _iso_day(t), i + 1
    if t in _DEICTIC:
        return Phrase(t, True, "days", shift=_DEICTIC[t]), i + 1
    if t in _SHIFTS and i + 1 < len(toks):
        return _shifted(toks, i)
    if t.isdigit() or t in _NUMBERS:
        return _number_first(toks, i)
    if _month(toks, i) is not None:
        return _month_first(toks, i)
    if t in _SEASONS and i + 1 < len(toks) and _year(toks[i + 1]) is not None:
        year = _year(toks[i + 1])
        return Phrase(f"{t} {year}", False, "season", year=year, month=_SEASONS[t]), i + 2
    if t in _WEEKDAYS and i > 0 and toks[i - 1] in ("on", "since", "by", "until"):
        return Phrase(t, True, "weekday", day=_WEEKDAYS[t]), i + 1
    return None


def _iso_day(t: str) -> Phrase:
    m = _ISO_DAY.match(t)
    assert m is not None
    y, mo, d = (int(g) for g in m.groups())
    if 1 <= mo <= 12 and 1 <= d <= calendar.monthrange(y, mo)[1]:
        return Phrase(t[:10], False, "day", year=y, month=mo, day=d)
    return Phrase(t[:4], False, "year", year=y)


def _shifted(toks: Sequence[str], i: int) -> tuple[Phrase, int] | None:
    """``last``/``this``/``next`` followed by a unit, a month, a weekday or a season."""
    shift, t = _SHIFTS[toks[i]], toks[i + 1]
    words = f"{toks[i]} {t}"
    unit = _unit(t)
    if unit is not None:
        kind = unit if unit in ("week", "weekend", "month", "year") else "days"
        if kind == "days":
            return Phrase(words, True, "days", shift=shift), i + 2
        return Phrase(words, True, kind, shift=shift), i + 2
    month = _MONTHS.get(t) or _MONTH_ABBR.get(t)
    if month is not None:
        return Phrase(words, True, "month", month=month, shift=shift), i + 2
    if t in _WEEKDAYS:
        return Phrase(words, True, "weekday", day=_WEEKDAYS[t], shift=shift or -1), i + 2
    if t in _SEASONS:
        return Phrase(words, True, "season", month=_SEASONS[t], shift=shift), i + 2
    return None


def _number_first(toks: Sequence[str], i: int) -> tuple[Phrase, int] | None:
    """A day before a month (``8 May 2023``, ``8th of May``), a year (``in 2023``) or an
    amount of time ago (``two weeks ago``)."""
    n = _amount(toks[i])
    j = i + 1
    if j < len(toks) and toks[j] in _ORDINAL:
        j += 1
    if j < len(toks) and toks[j] == "of":
        j += 1
    month = _month(toks, j, after_number=True)
    if toks[i].isdigit() and month is not None and 1 <= int(toks[i]) <= 31:
        day, j = int(toks[i]), j + 1
        j = _skip_comma(toks, j)
        year = _year(toks[j]) if j < len(toks) else None
        words = " ".join(toks[i : j + (year is not None)])
        if year is not None:
            return _valid_day(words, year, month, day), j + 1
        return Phrase(words, True, "day", month=month, day=day), j
    year = _year(toks[i]) if toks[i].isdigit() else None
    if year is not None:
        return Phrase(toks[i], False, "year", year=year), i + 1
    if n is not None and i + 2 < len(toks) and _unit(toks[i + 1]) and toks[i + 2] == "ago":
        unit = _UNITS[_unit(toks[i + 1]) or "day"]
        words = " ".join(toks[i : i + 3])
        return Phrase(words, True, "ago", shift=-n, unit=unit), i + 3
    return None


def _month_first(toks: Sequence[str], i: int) -> tuple[Phrase, int] | None:
    """A month first: ``May 8, 2023``, ``May 2023``, or a month alone (``in June``)."""
    month = _month(toks, i)
    assert month is not None
    j = i + 1
    day = None
    if j < len(toks) and toks[j].isdigit() and 1 <= int(toks[j]) <= 31 and len(toks[j]) <= 2:
        day, j = int(toks[j]), j + 1
        if j < len(toks) and toks[j] in _ORDINAL:
            j += 1
    k = _skip_comma(toks, j)
    year = _year(toks[k]) if k < len(toks) else None
    if year is not None:
        words = " ".join(toks[i : k + 1])
        if day is not None:
            return _valid_day(words, year, month, day), k + 1
        return Phrase(words, False, "month", year=year, month=month), k + 1
    words = " ".join(toks[i:j])
    if day is not None:
        return Phrase(words, True, "day", month=month, day=day), j
    return Phrase(words, True, "month", month=month), j


def _with_offset(toks: Sequence[str], i: int, phrase: Phrase) -> Phrase:
    """``phrase`` moved by the amount of time just before it: ``two weeks before``,
    ``the week after``, ``a day before`` (the words at ``i - 3 .. i - 1``)."""
    if i < 2 or toks[i - 1] not in ("before", "after"):
        return phrase
    unit_name = _unit(toks[i - 2])
    if unit_name is None:
        return phrase
    n = _amount(toks[i - 3]) if i >= 3 else None
    said = n is not None or (i >= 3 and toks[i - 3] in ("the", "that", "last"))
    unit = _UNITS[unit_name]
    sign = -1 if toks[i - 1] == "before" else 1
    words = " ".join(toks[i - 3 if said else i - 2 : i]) + " " + phrase.words
    return Phrase(
        words,
        phrase.relative,
        phrase.kind,
        phrase.year,
        phrase.month,
        phrase.day,
        phrase.shift,
        phrase.unit,
        offset=sign * (1 if n is None else n) * unit,
        width=unit,
    )


def _month(toks: Sequence[str], i: int, *, after_number: bool = False) -> int | None:
    """The month token ``i`` names, if it reads as one here."""
    if i >= len(toks):
        return None
    t = toks[i]
    month = _MONTHS.get(t) or _MONTH_ABBR.get(t)
    if month is None:
        return None
    if t not in _WEAK_MONTHS or after_number:
        return month
    before = toks[i - 1] if i > 0 else ""
    after = toks[i + 1] if i + 1 < len(toks) else ""
    if before in _INTRODUCERS or after.isdigit():
        return month
    return None


def _unit(t: str) -> str | None:
    stem = t[:-1] if t.endswith("s") else t
    return stem if stem in _UNITS else None


def _amount(t: str) -> int | None:
    if t.isdigit() and len(t) <= 3:
        return int(t)
    return _NUMBERS.get(t)


def _year(t: str) -> int | None:
    return int(t) if t.isdigit() and len(t) == 4 and 1900 <= int(t) <= 2099 else None


def _skip_comma(toks: Sequence[str], j: int) -> int:
    return j + 1 if j < len(toks) and toks[j] == "," else j


def _valid_day(words: str, year: int, month: int, day: int) -> Phrase:
    if day <= calendar.monthrange(year, month)[1]:
        return Phrase(words, False, "day", year=year, month=month, day=day)
    return Phrase(words, False, "month", year=year, month=month)


def _clock(toks: Sequence[str]) -> float:
    """The time of day ``1:56 pm`` (or ``13:56``) names among ``toks``, in seconds (0: none)."""
    for i in range(len(toks) - 2):
        if toks[i].isdigit() and toks[i + 1] == ":" and toks[i + 2].isdigit():
            hour, minute = int(toks[i]), int(toks[i + 2])
            half = toks[i + 3] if i + 3 < len(toks) else ""
            if half in _AMPM and 1 <= hour <= 12:
                hour = hour % 12 + (12 if half == "pm" else 0)
            if hour < 24 and minute < 60:
                return hour * 3600.0 + minute * 60.0
    return 0.0


# -- resolving --------------------------------------------------------------------------


def _at(year: int, month: int = 1, day: int = 1) -> float:
    return datetime(year, month, day, tzinfo=UTC).timestamp()


def _month_span(year: int, month: int, months: int = 1) -> tuple[float, float]:
    end_index = year * 12 + month - 1 + months
    return _at(year, month), _at(end_index // 12, end_index % 12 + 1)


def _named(p: Phrase, now: float) -> tuple[float, float]:
    """The (start, end) a phrase names before any offset, ``now`` its reference."""
    ref = datetime.fromtimestamp(_clamped(now), UTC)
    today = _at(ref.year, ref.month, ref.day)
    if p.kind == "day":
        year = p.year if p.year is not None else _latest_year(ref, p.month or 1, p.day or 1)
        start = _at(year, p.month or 1, min(p.day or 1, calendar.monthrange(year, p.month or 1)[1]))
        return start, start + DAY
    if p.kind == "days":
        return today + p.shift * DAY, today + (p.shift + 1) * DAY
    if p.kind == "year":
        year = p.year if p.year is not None else ref.year + p.shift
        return _at(year), _at(year + 1)
    if p.kind == "month":
        return _month_span(*_month_year(p, ref), 1)
    if p.kind == "season":
        year = p.year if p.year is not None else _season_year(p, ref)
        return _month_span(year, p.month or 1, 3)
    if p.kind in ("week", "weekend"):
        monday = today - ref.weekday() * DAY + p.shift * _WEEK
        return (
            (monday + 5 * DAY, monday + _WEEK) if p.kind == "weekend" else (monday, monday + _WEEK)
        )
    if p.kind == "weekday":
        back = (ref.weekday() - (p.day or 0)) % 7 or (7 if p.shift else 0)
        day = today - back * DAY + (_WEEK if p.shift > 0 else 0.0)
        return day, day + DAY
    # "ago": the unit-wide span around N units before now
    centre = now + p.shift * p.unit
    return centre - p.unit / 2, centre + p.unit / 2


# a reference time two years inside the range: a phrase counting a year or two from it
# still names a year datetime can hold
_REFERENCE_RANGE = (EARLIEST + 2 * 366 * DAY, LATEST - 2 * 366 * DAY)


def _clamped(now: float) -> float:
    low, high = _REFERENCE_RANGE
    return min(max(now, low), high) if math.isfinite(now) else 0.0


def _latest_year(ref: datetime, month: int, day: int) -> int:
    """The year of the latest ``month``/``day`` not after ``ref`` (a date said without a
    year is a past one)."""
    return ref.year if (month, day) <= (ref.month, ref.day) else ref.year - 1


def _month_year(p: Phrase, ref: datetime) -> tuple[int, int]:
    if p.month is None:  # last/this/next month
        index = ref.year * 12 + ref.month - 1 + p.shift
        return index // 12, index % 12 + 1
    month = p.month
    if p.year is not None:
        return p.year, month
    if p.shift < 0:  # last May: the latest May before this month
        return (ref.year if month < ref.month else ref.year - 1), month
    if p.shift > 0:  # next May: the first May after this month
        return (ref.year if month > ref.month else ref.year + 1), month
    if p.words.startswith("this "):
        return ref.year, month
    return (ref.year if month <= ref.month else ref.year - 1), month


def _season_year(p: Phrase, ref: datetime) -> int:
    """The year of the season a relative phrase names: the latest that began by ``ref``
    (``this``, or a season alone), the one before it when ``ref`` is still inside it
    (``last``), the next one (``next``)."""
    month = p.month or 1
    latest = ref.year if month <= ref.month else ref.year - 1
    if p.shift > 0:
        return latest + 1
    inside = (ref.year * 12 + ref.month) - (latest * 12 + month) < 3
    return latest - 1 if p.shift < 0 and inside else latest


def iso_day(t: float) -> str:
    """``t`` (epoch seconds) as an ISO date (UTC), for showing an event time."""
    within = min(max(t, EARLIEST), LATEST) if math.isfinite(t) else 0.0
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=within)).date().isoformat()
