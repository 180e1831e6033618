"""SSE decoding: events survive any chunking of the byte stream."""

from __future__ import annotations

import json
import time
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from offload.core.http.sse import (
    EVENT_ENDS,
    EventBound,
    SseDecoder,
    SseEvent,
    iter_sse_events,
    stream_stats,
    stream_text,
)

STREAM = (
    'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}\n\n'
    'data: {"choices":[{"index":0,"delta":{"content":"Hé"}}]}\n\n'
    ": keep-alive comment\n\n"
    'data: {"choices":[{"index":0,"delta":{"content":"llo ✓"}}]}\n\n'
    'data: {"choices":[{"finish_reason":"length","index":0,"delta":{}}]}\n\n'
    'data: {"choices":[],"usage":{"completion_tokens":5,"prompt_tokens":32},'
    '"timings":{"cache_n":31,"prompt_n":1}}\n\n'
    "data: [DONE]\n\n"
).encode()


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for p in points:
        out.append(data[prev:p])
        prev = p
    out.append(data[prev:])
    return out


def test_an_openai_stream_decodes_into_its_events_text_and_final_usage() -> None:
    events = list(iter_sse_events([STREAM]))
    assert len(events) == 6
    assert events[-1].is_done
    assert stream_text(events) == "Héllo ✓"
    stats = stream_stats(events)
    assert stats.usage == {"completion_tokens": 5, "prompt_tokens": 32}
    assert stats.timings == {"cache_n": 31, "prompt_n": 1}
    assert stats.finish_reason == "length"


@given(st.lists(st.integers(min_value=0, max_value=10_000), max_size=40))
def test_events_are_the_same_however_the_bytes_are_chunked(cuts: list[int]) -> None:
    whole = list(iter_sse_events([STREAM]))
    assert list(iter_sse_events(split_at(STREAM, cuts))) == whole


@given(
    st.lists(
        st.text(
            # a stream carries UTF-8: no lone surrogates
            alphabet=st.characters(codec="utf-8", exclude_characters="\r\n"),
            max_size=30,
        ),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["\n", "\r\n", "\r"]),
    st.lists(st.integers(min_value=0, max_value=500), max_size=20),
)
def test_multi_line_data_joins_with_newlines_for_any_line_ending_and_chunking(
    lines: list[str], eol: str, cuts: list[int]
) -> None:
    raw = "".join(f"data: {line}{eol}" for line in lines) + eol
    events = list(iter_sse_events(split_at(raw.encode(), cuts)))
    assert events == [SseEvent("\n".join(lines))]


def test_a_crlf_split_between_chunks_is_one_line_end_not_two() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\ndata: b\r\n") == []
    assert decoder.feed(b"\r\n") == [SseEvent("a\nb")]


def test_event_and_id_fields_are_kept_and_comments_and_retry_ignored() -> None:
    raw = b": hello\nretry: 10\nevent: ping\nid: 7\ndata:x\n\ndata: y\n\n"
    assert list(iter_sse_events([raw])) == [
        SseEvent("x", "ping", "7"),
        SseEvent("y", "message", "7"),
    ]


def test_a_last_event_without_its_blank_line_is_still_delivered_at_end_of_stream() -> None:
    events = list(iter_sse_events([b'data: {"a": 1}\n\ndata: [DONE]']))
    assert events[0].json() == {"a": 1}
    assert events[1].is_done


def test_a_blank_line_without_data_dispatches_nothing() -> None:
    assert list(iter_sse_events([b"\n\n\r\n: only a comment\n\n"])) == []


def test_stream_helpers_skip_non_json_events() -> None:
    events = [SseEvent("not json"), SseEvent(json.dumps({"usage": {"total_tokens": 3}}))]
    assert stream_stats(events).usage == {"total_tokens": 3}
    assert stream_text(events) == ""


def test_decoding_costs_time_linear_in_the_bytes_however_they_arrive() -> None:
    # re-scanning the pending buffer per chunk, or slicing the chunk's rest per line, made
    # one 3.2 MB chunk of small events take 22 s of CPU and a 65 MB line 20 s; linear
    # decoding takes well under a second for each: the bound leaves a wide margin
    many = b'data: {"a":1}\n\n' * 200_000
    began = time.process_time()
    assert len(SseDecoder().feed(many)) == 200_000
    decoder = SseDecoder()
    for _ in range(1000):
        assert decoder.feed(b"x" * 65_536) == []
    decoder.feed(b"data: end\n\n")
    assert time.process_time() - began < 5.0


def _open_event_bytes(stream: bytes) -> int:
    """How many bytes after the stream's last event end (a blank line) are still open."""
    ends = [stream.rfind(mark) + len(mark) for mark in EVENT_ENDS if mark in stream]
    return len(stream) - max(ends, default=0)


MIXED = STREAM + b"data: a\r\n\r\ndata: b\r\rdata: c\n\r\ndata: still open\r\n"


@given(st.lists(st.integers(min_value=0, max_value=len(MIXED)), max_size=12))
def test_the_open_event_is_counted_the_same_however_the_bytes_are_chunked(
    cuts: list[int],
) -> None:
    bound = EventBound()
    fed = b""
    for a, b in pairwise([0, *sorted(cuts), len(MIXED)]):
        chunk = MIXED[a:b]
        end = bound.feed(chunk)
        fed += chunk
        assert bound.pending == _open_event_bytes(fed)
        # the offset splits the chunk after its last event end
        assert end == 0 or _open_event_bytes(fed[: len(fed) - len(chunk) + end]) == 0


def test_an_event_that_never_ends_is_counted_as_it_grows() -> None:
    bound = EventBound()
    assert bound.feed(b"data: {}\r\n\r\ndata: ") == len(b"data: {}\r\n\r\n")
    for _ in range(1000):
        assert bound.feed(b"x" * 1024) == 0
    assert bound.pending == len(b"data: ") + 1024 * 1000
