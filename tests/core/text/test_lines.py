"""Reading a body by line ranges: numbering, parts, caps, continuation, byte-exact paging."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offload.core.text.lines import (
    KEPT_ENDS,
    DroppedLine,
    LineWindow,
    StreamLines,
    continuation,
    line_count,
    parse_offset,
    raw_lines,
    read_lines,
    read_lines_within,
    split_lines,
)
from offload.errors import InvalidInput
from realparts import TRACES as TRACE_DIR

TRACES = TRACE_DIR / "swe_agent_demos.jsonl"


def rows(window: LineWindow) -> list[tuple[str, str]]:
    """(label, content) per rendered row; content may hold a lone CR but never a LF."""
    assert window.text == "" or window.text.endswith("\n")
    out = []
    for row in window.text.split("\n")[:-1]:
        label, _, content = row.partition("\t")
        out.append((label.strip(), content))
    return out


def page_all(text: str, **kwargs: int) -> list[LineWindow]:
    windows = [read_lines(text, 1, **kwargs)]
    while windows[-1].next_offset is not None:
        assert len(windows) < 10_000, "paging did not progress"
        windows.append(read_lines(text, windows[-1].next_offset, **kwargs))
    return windows


def test_lines_are_numbered_right_aligned_to_the_width_of_the_total() -> None:
    text = "".join(f"line {i}\n" for i in range(1, 234))
    window = read_lines(text, offset=9, limit=3)
    assert window.text == "  9\tline 9\n 10\tline 10\n 11\tline 11\n"
    assert (window.first_line, window.last_line, window.total_lines) == (9, 11, 233)
    assert window.next_offset == "12"
    assert window.remaining_lines == 222


def test_crlf_terminators_are_not_content_but_a_lone_cr_is() -> None:
    window = read_lines("a\r\nb\rc\nlast")
    assert rows(window) == [("1", "a"), ("2", "b\rc"), ("3", "last")]
    assert window.total_lines == 3


def test_a_final_line_without_newline_counts_and_a_trailing_newline_adds_no_line() -> None:
    assert line_count("a\nb") == 2
    assert line_count("a\nb\n") == 2
    assert line_count("\n") == 1
    assert line_count("") == 0
    assert split_lines("a\r\n\nb") == ["a\r\n", "\n", "b"]


def test_an_empty_text_reads_as_an_empty_finished_window() -> None:
    assert read_lines("") == LineWindow("", 0, 0, 0, None, 0)


def test_reading_to_the_end_leaves_no_continuation() -> None:
    window = read_lines("a\nb\nc\n", offset="2")
    assert rows(window) == [("2", "b"), ("3", "c")]
    assert window.next_offset is None
    assert window.remaining_lines == 0
    assert continuation(window, 'IndexRead(label="x")') == ""


def test_a_long_line_is_emitted_as_labelled_parts() -> None:
    window = read_lines("short\n" + "x" * 25 + "\nend", max_line_chars=10)
    assert rows(window) == [
        ("1", "short"),
        ("2-1", "x" * 10),
        ("2-2", "x" * 10),
        ("2-3", "x" * 5),
        ("3", "end"),
    ]


def test_limit_counts_whole_lines_not_parts() -> None:
    window = read_lines("x" * 30 + "\nb\nc", limit=2, max_line_chars=10)
    assert [label for label, _ in rows(window)] == ["1-1", "1-2", "1-3", "2"]
    assert window.next_offset == "3"


def test_a_window_stops_before_a_whole_line_that_would_pass_the_cap() -> None:
    text = "aaaa\nbbbb\ncccc\n"  # each row "N\tcccc\n" is 7 bytes
    window = read_lines(text, cap_bytes=20)
    assert rows(window) == [("1", "aaaa"), ("2", "bbbb")]
    assert window.next_offset == "3"
    assert len(window.text.encode()) <= 20


def test_a_line_bigger_than_the_cap_is_paged_part_by_part_and_resumes_mid_line() -> None:
    text = "head\n" + "y" * 100 + "\ntail\n"
    first = read_lines(text, cap_bytes=40, max_line_chars=10)
    assert rows(first) == [("1", "head")]  # line 2 does not fit whole: stop before it
    second = read_lines(text, first.next_offset or "", cap_bytes=40, max_line_chars=10)
    assert [label for label, _ in rows(second)] == ["2-1", "2-2"]
    assert second.next_offset == "2-3"
    assert (second.first_line, second.last_line) == (2, 2)
    assert second.remaining_lines == 2  # the rest of line 2, and line 3
    third = read_lines(text, "2-3", cap_bytes=40, max_line_chars=10)
    assert rows(third)[0] == ("2-3", "y" * 10)


def test_a_single_part_over_the_cap_is_still_emitted_so_paging_progresses() -> None:
    window = read_lines("é" * 50 + "\nz", cap_bytes=8, max_line_chars=50)
    assert rows(window) == [("1", "é" * 50)]
    assert window.next_offset == "2"


def test_continuation_names_how_many_lines_remain_and_the_offset() -> None:
    text = "".join(f"{i}\n" for i in range(233))
    window = read_lines(text, offset=1, limit=60)
    assert continuation(window) == '[173 more lines — continue with offset="61"]'
    call = 'IndexRead(label="x", offset="61")'
    assert continuation(window, call) == f"[173 more lines — continue with {call}]"


def test_continuation_of_a_last_partial_line_is_singular() -> None:
    window = read_lines("z" * 30, cap_bytes=10, max_line_chars=5)
    assert window.next_offset == "1-2"
    assert continuation(window) == '[1 more line — continue with offset="1-2"]'


@pytest.mark.parametrize(
    ("value", "expected"),
    [(61, (61, 1)), ("61", (61, 1)), ("12-3", (12, 3)), (" 7 ", (7, 1))],
)
def test_parse_offset_accepts_line_numbers_and_line_parts(
    value: int | str, expected: tuple[int, int]
) -> None:
    assert parse_offset(value) == expected


@pytest.mark.parametrize("value", [0, -3, "0", "-1", "abc", "", "12-0", "1-2-3", "1.5", True])
def test_parse_offset_refuses_anything_but_positive_lines_and_parts(value: int | str) -> None:
    with pytest.raises(InvalidInput, match="offset"):
        parse_offset(value)


def test_an_offset_past_the_end_is_refused_with_the_line_count() -> None:
    text = "".join(f"{i}\n" for i in range(233))
    with pytest.raises(InvalidInput, match=r"offset 900 is past the end \(233 lines\)"):
        read_lines(text, offset=900)
    with pytest.raises(InvalidInput, match=r"offset 2 is past the end \(0 lines\)"):
        read_lines("", offset=2)


def test_a_part_past_the_end_of_its_line_is_refused() -> None:
    with pytest.raises(InvalidInput, match="past the end of line 1"):
        read_lines("x" * 25, offset="1-4", max_line_chars=10)


@pytest.mark.parametrize("kwargs", [{"limit": 0}, {"cap_bytes": 0}, {"max_line_chars": 0}])
def test_non_positive_limits_are_refused(kwargs: dict[str, int]) -> None:
    with pytest.raises(InvalidInput):
        read_lines("a\n", **kwargs)


def test_raw_lines_returns_exact_original_lines_with_terminators() -> None:
    text = "a\r\nb\rc\n\nlast"
    assert raw_lines(text, 1, 2) == "a\r\nb\rc\n"
    assert raw_lines(text, 3, 4) == "\nlast"
    assert raw_lines(text, 2, 1) == ""
    with pytest.raises(InvalidInput, match="outside the text"):
        raw_lines(text, 2, 5)


def test_a_real_long_trace_message_pages_back_to_itself() -> None:
    longest = ""
    for record in TRACES.read_text(encoding="utf-8").splitlines():
        for message in json.loads(record)["messages"]:
            content = message.get("content")
            if isinstance(content, str) and len(content) > len(longest):
                longest = content
    assert len(longest) > 20_000
    windows = page_all(longest, limit=50, cap_bytes=4096, max_line_chars=120)
    assert len(windows) > 5
    assert all(len(w.text.encode()) <= 4096 for w in windows)
    contents: dict[int, str] = {}
    for window in windows:
        for label, content in rows(window):
            line = int(label.split("-")[0])
            contents[line] = contents.get(line, "") + content
    assert [contents[i] for i in range(1, len(contents) + 1)] == longest.split("\n")


# A text alphabet that stresses terminators, wide characters and astral code points.
_ALPHABET = st.sampled_from(["a", "b", " ", "\t", "\n", "\r", "\r\n", "é", "中", "😀", "\u2028"])
_TEXTS = st.one_of(
    st.lists(_ALPHABET, max_size=120).map("".join),
    st.text(max_size=80),
    st.builds(
        lambda a, n, b: a + "x" * n + b,
        st.text(max_size=10),
        st.integers(0, 400),
        st.text(max_size=10),
    ),
)


@settings(max_examples=150, deadline=None)
@given(
    text=_TEXTS,
    limit=st.integers(1, 6),
    cap_bytes=st.integers(1, 200),
    max_line_chars=st.integers(1, 40),
)
def test_paging_visits_every_line_part_once_and_raw_pieces_rebuild_the_text(
    text: str, limit: int, cap_bytes: int, max_line_chars: int
) -> None:
    windows = page_all(text, limit=limit, cap_bytes=cap_bytes, max_line_chars=max_line_chars)
    originals = [
        raw[:-2] if raw.endswith("\r\n") else raw[:-1] if raw.endswith("\n") else raw
        for raw in split_lines(text)
    ]
    seen: list[tuple[int, int]] = []
    rebuilt: dict[int, str] = {}
    for window in windows:
        for label, content in rows(window):
            line_s, _, part_s = label.partition("-")
            seen.append((int(line_s), int(part_s or 1)))
            rebuilt[int(line_s)] = rebuilt.get(int(line_s), "") + content
    expected = [
        (i, p)
        for i, content in enumerate(originals, 1)
        for p in range(1, max(1, -(-len(content) // max_line_chars)) + 1)
    ]
    assert seen == expected  # every part, once, in order
    assert [rebuilt.get(i, "") for i in range(1, len(originals) + 1)] == originals
    # Raw pieces over each window's lines, sharing a line split across windows only once.
    pieces = []
    shown_until = 0
    for window in windows:
        if window.total_lines == 0:
            continue
        first = max(window.first_line, shown_until + 1)
        if first <= window.last_line:
            pieces.append(raw_lines(text, first, window.last_line))
            shown_until = window.last_line
    assert "".join(pieces) == text


def _tokens(text: str) -> int:
    return len(text.split())  # a stand-in tokenizer: one token per word


def test_a_token_bounded_window_ends_before_the_line_past_the_budget() -> None:
    text = "".join(f"w{i} " * 10 + "\n" for i in range(1, 41))  # 10 tokens a line
    window = read_lines_within(text, 3, max_tokens=45, count=_tokens)
    assert (window.first_line, window.last_line) == (3, 6)
    assert _tokens(window.text) == 44  # four rows: a number and ten words each
    assert window.next_offset == "7"
    whole = read_lines_within(text, 1, max_tokens=10_000, count=_tokens)
    assert whole == read_lines(text, 1)


def test_a_token_bounded_window_shows_one_row_even_when_it_alone_is_over() -> None:
    text = "a " * 50 + "\nb\n"
    window = read_lines_within(text, 1, max_tokens=5, count=_tokens)
    assert window.first_line == 1 and window.text
    assert window.next_offset is not None


def test_a_token_bounded_window_cuts_inside_a_long_line_by_parts() -> None:
    text = "x " * 5000 + "\n"  # one line of 10,000 characters: five parts of 2,000
    window = read_lines_within(text, 1, max_tokens=1500, count=_tokens)
    assert _tokens(window.text) <= 1500
    assert window.next_offset is not None and window.next_offset.startswith("1-")


@pytest.mark.parametrize("offset", ["9" * 5000, "1-" + "9" * 5000, "\u00b2", "3-\u00b9"])
def test_an_offset_int_cannot_read_is_refused_in_one_short_line(offset: str) -> None:
    with pytest.raises(InvalidInput, match="offset must be a line number") as err:
        read_lines("a\nb\n", offset, limit=5, cap_bytes=1000, max_line_chars=100)
    assert len(str(err.value)) < 200


def test_stream_lines_join_lines_split_across_chunks_and_drop_one_past_the_bound() -> None:
    lines = StreamLines(max_bytes=10)
    assert lines.feed(b"ab") == []
    assert lines.feed(b"c\nde") == [b"abc"]
    assert lines.feed(b"f\n\n") == [b"def", b""]
    assert lines.feed(b"x" * 8) == [] and lines.feed(b"x" * 8) == []  # 16 > 10: dropped
    assert lines.feed(b"yy\nnext\n") == [DroppedLine(18, b"x" * 8, b"x" * 16 + b"yy"), b"next"]


def test_a_dropped_line_keeps_only_its_ends() -> None:
    lines = StreamLines(max_bytes=2000)
    lines.feed(b"{" + b"a" * 1000)
    lines.feed(b"b" * 1_000_000)
    [dropped] = lines.feed(b"c" * 100 + b"}\n")
    assert isinstance(dropped, DroppedLine)
    assert dropped.size == 1_001_102
    assert dropped.head == b"{" + b"a" * (KEPT_ENDS - 1)
    assert dropped.tail == b"b" * (KEPT_ENDS - 101) + b"c" * 100 + b"}"


def test_a_dropped_lines_ends_span_the_pieces_it_came_in() -> None:
    lines = StreamLines(max_bytes=1000)
    whole = bytes(range(11, 256)) * 9  # 2205 bytes without a line end, in pieces of 100
    out = [got for i in range(0, len(whole), 100) for got in lines.feed(whole[i : i + 100])]
    [dropped] = out + lines.feed(b"\n")
    assert dropped == DroppedLine(2205, whole[:KEPT_ENDS], whole[-KEPT_ENDS:])


def test_stream_lines_cost_time_linear_in_a_long_line() -> None:
    # joining and re-splitting the open line per 64 KB chunk took ~20 s of CPU for 50 MB
    lines = StreamLines(max_bytes=64 * 2**20)
    began = time.process_time()
    for _ in range(800):
        assert lines.feed(b"x" * 65_536) == []
    assert lines.feed(b"\n") == [b"x" * (800 * 65_536)]
    assert time.process_time() - began < 5.0
