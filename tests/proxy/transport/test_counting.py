"""The proxy's token counter against a real /tokenize over loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socketserver
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from offload.core.tokens import plausible_count
from offload.proxy.transport.counting import (
    WARM_MIN,
    DefinitionCounts,
    UpstreamCounter,
    answer_bound,
    token_count,
)
from proxy.proxy_servers import serving
from realparts import free_port


@dataclass
class Tokenizer:
    """A /tokenize of one token per word, or a fixed status."""

    status: int = 200
    close: bool = False  # answer with "connection: close"
    calls: int = 0
    answer: bytes | None = None  # answered as it is instead of the count


@pytest.fixture
def tokenizer() -> Iterator[tuple[Tokenizer, str]]:
    """(the knobs, the server root URL)."""
    state = Tokenizer()

    async def tokenize(request: Request) -> Response:
        state.calls += 1
        headers = {"connection": "close"} if state.close else {}
        if state.status != 200:
            return Response(status_code=state.status, headers=headers)
        if state.answer is not None:
            return Response(state.answer, headers=headers, media_type="application/json")
        text = json.loads(await request.body())["content"]
        return JSONResponse({"tokens": list(range(len(text.split())))}, headers=headers)

    with serving(Starlette(routes=[Route("/tokenize", tokenize, methods=["POST"])])) as server:
        yield state, server.url


def test_exact_counts_come_from_tokenize_once_per_content(
    tokenizer: tuple[Tokenizer, str],
) -> None:
    state, url = tokenizer
    counter = UpstreamCounter(url)
    assert counter.count("one two three") == 3
    assert counter.count("one two three") == 3
    assert counter.count("caf\u00e9 \U0001f600 four five") == 4  # non-ASCII as JSON
    assert state.calls == 2 and counter.exact and counter.cache_len() == 2
    counter.close()


def test_tool_definitions_count_as_their_json_and_a_changed_catalog_counts_anew(
    tokenizer: tuple[Tokenizer, str],
) -> None:
    state, url = tokenizer
    counter = UpstreamCounter(url)
    definitions = DefinitionCounts(counter)
    function = {"name": "read", "description": "reads a file"}
    tool = {"type": "function", "function": function}
    body = json.dumps({"tools": [tool], "messages": []})
    first = definitions.tokens(json.loads(body))
    assert first == len(json.dumps(tool).split())
    calls = state.calls
    assert definitions.tokens(json.loads(body)) == first and state.calls == calls
    longer = {**tool, "function": {**function, "description": "reads a file, then two"}}
    assert definitions.tokens({"tools": [longer]}) == first + 2
    assert definitions.tokens({"functions": [function]}) == len(json.dumps(function).split())
    nothing: list[dict[str, object]] = [{"tools": "x"}, {"tools": []}, {}]
    assert [definitions.tokens(p) for p in nothing] == [0, 0, 0]
    counter.close()


def test_the_tokenize_connections_of_ended_threads_are_closed(
    tokenizer: tuple[Tokenizer, str],
) -> None:
    _state, url = tokenizer
    counter = UpstreamCounter(url)
    barrier = threading.Barrier(4)

    def count(i: int) -> None:
        counter.count(f"thread {i} has words")
        barrier.wait(timeout=60)  # four live threads, four kept-alive connections

    threads = [threading.Thread(target=count, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert counter.open_connections == 4
    assert counter.release_ended() == 4
    assert counter.open_connections == 0
    assert counter.count("the main thread counts too") == 5
    assert counter.open_connections == 1
    counter.close()


def test_an_upstream_that_closes_each_connection_still_answers_every_count(
    tokenizer: tuple[Tokenizer, str],
) -> None:
    state, url = tokenizer
    state.close = True
    counter = UpstreamCounter(url)
    assert [counter.count(f"w {'x ' * k}") for k in range(3)] == [1, 2, 3]
    assert state.calls == 3 and counter.exact
    counter.close()


def test_an_upstream_without_tokenize_falls_back_and_stops_asking(
    tokenizer: tuple[Tokenizer, str],
) -> None:
    state, url = tokenizer
    state.status = 404
    counter = UpstreamCounter(url)
    assert counter.count("hello world, how are you") > 0
    assert counter.count("something else entirely") > 0
    assert state.calls == 1 and not counter.exact
    counter.close()


def test_a_failing_tokenize_falls_back_for_a_while_then_is_asked_again(
    tokenizer: tuple[Tokenizer, str],
) -> None:
    state, url = tokenizer
    state.status = 503
    now = [0.0]
    counter = UpstreamCounter(url, retry_after_s=30, clock=lambda: now[0])
    assert counter.count("a b c") > 0 and counter.count("d e f") > 0
    assert state.calls == 1 and not counter.exact
    now[0] = 31.0
    state.status = 200
    assert counter.count("g h i j") == 4
    counter.close()


def test_a_count_made_while_tokenize_is_paused_is_marked_an_estimate(
    tokenizer: tuple[Tokenizer, str],
) -> None:
    state, url = tokenizer
    now = [0.0]
    counter = UpstreamCounter(url, retry_after_s=30, clock=lambda: now[0])
    assert counter.measure("one two") == (2, False)
    state.status = 503
    assert counter.measure("three four five").estimated  # the failing call pauses it
    assert counter.measure("six seven").estimated
    assert counter.measure("one two") == (2, False)  # counted exactly before: still exact
    now[0] = 31.0
    state.status = 200
    assert counter.measure("three four five") == (3, False)
    counter.close()


def test_an_upstream_without_tokenize_has_no_exact_count_for_an_estimate_to_stand_in_for(
    tokenizer: tuple[Tokenizer, str],
) -> None:
    state, url = tokenizer
    state.status = 404
    counter = UpstreamCounter(url)
    assert not counter.measure("hello world, how are you").estimated
    counter.close()


def test_an_unreachable_upstream_is_estimated_without_an_error() -> None:
    counter = UpstreamCounter(f"http://127.0.0.1:{free_port()}", timeout_s=1.0)
    assert counter.count("nobody listens here") > 0
    assert not counter.exact
    counter.close()


def test_calibration_scales_offline_counts_toward_the_reported_prompt_size(
    tokenizer: tuple[Tokenizer, str],
) -> None:
    state, url = tokenizer
    state.status = 404
    counter = UpstreamCounter(url)
    messages = [{"role": "user", "content": "word " * 200}]
    before = counter.count(messages[0]["content"])
    counter.calibrate(messages, prompt_tokens=2 * before + 4)
    assert counter.ratio == pytest.approx(2.0, rel=0.05)
    assert counter.count(messages[0]["content"] + " more") > 1.8 * before
    counter.close()


@pytest.mark.parametrize(
    ("answer", "count"),
    [
        (b'{"tokens":[1,2,3]}', 3),
        (b'{"tokens": [ 7 ]}', 1),
        (b'{"tokens": []}', 0),
        (b'{"tokens":[{"id":1,"piece":"a"},{"id":2,"piece":","}]}', 2),  # with_pieces
        (b'{"tokens": "none"}', None),
        (b'{"content": [1, 2]}', None),
        (b"not json", None),
    ],
)
def test_a_tokenize_answer_is_counted_without_building_its_list(
    answer: bytes, count: int | None
) -> None:
    assert token_count(answer) == count


def test_a_long_tokenize_answer_counts_every_id() -> None:
    ids = list(range(300_000))
    assert token_count(json.dumps({"tokens": ids}).encode()) == len(ids)


def test_a_shrunk_counter_keeps_the_counts_used_last_and_asks_again_for_the_rest(
    tokenizer: tuple[Tokenizer, str],
) -> None:
    state, url = tokenizer
    counter = UpstreamCounter(url)
    texts = [f"text {i} of {'word ' * i}" for i in range(10)]
    for text in texts:
        counter.count(text)
    counter.count(texts[0])  # used again: now among the newest
    counter.shrink(3)
    assert counter.cache_len() == 3
    calls = state.calls
    assert [counter.count(t) for t in (texts[0], texts[8], texts[9])] == [3, 11, 12]
    assert state.calls == calls  # kept
    assert counter.count(texts[1]) == 4 and state.calls == calls + 1
    counter.close()


def test_a_long_sessions_uncounted_texts_are_counted_side_by_side_once_each() -> None:
    # the first request waits (up to 10 s) until another is in flight beside it: one by one
    # it would wait it out alone
    seen = {"calls": 0, "in_flight": 0, "most": 0}
    met = asyncio.Event()

    async def tokenize(request: Request) -> Response:
        seen["calls"] += 1
        seen["in_flight"] += 1
        seen["most"] = max(seen["most"], seen["in_flight"])
        if seen["in_flight"] >= 2:
            met.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(met.wait(), 10)
        met.set()  # waited once: no later call waits
        seen["in_flight"] -= 1
        text = json.loads(await request.body())["content"]
        return JSONResponse({"tokens": list(range(len(text.split())))})

    texts = [f"text {i} " + "word " * i for i in range(WARM_MIN * 2)]
    with serving(Starlette(routes=[Route("/tokenize", tokenize, methods=["POST"])])) as server:
        counter = UpstreamCounter(server.url)
        assert counter.warm([*texts, *texts, ""]) == len(texts)
        assert seen["most"] >= 2 and seen["calls"] == len(texts)
        assert [counter.count(t) for t in texts] == [i + 2 for i in range(len(texts))]
        assert seen["calls"] == len(texts)  # each came from the cache
        few = [f"new {i}" for i in range(WARM_MIN - 1)]
        assert counter.warm(texts) == 0 and counter.warm(few) == 0  # left to the rewrite
        assert seen["calls"] == len(texts)
        counter.close()


class _Hostile(socketserver.BaseRequestHandler):
    """A /tokenize that answers a valid count padded to ``pad`` bytes, or (``drip``) one
    byte every 0.2 s of an answer that never ends."""

    pad = 0
    drip = False

    def handle(self) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += self.request.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        while len(body) < length:
            body += self.request.recv(65536)
        answer = b'{"tokens": [1, 2]' + b" " * self.pad + b"}"
        size = 10**6 if self.drip else len(answer)
        self.request.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
        if not self.drip:
            self.request.sendall(answer)
            return
        with contextlib.suppress(OSError):
            for _ in range(300):  # a minute at most: a ceiling, never waited for
                self.request.sendall(b" ")
                time.sleep(0.2)


@contextlib.contextmanager
def hostile(pad: int = 0, drip: bool = False) -> Iterator[str]:
    handler = type("Handler", (_Hostile,), {"pad": pad, "drip": drip})
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_tokenize_answer_past_its_bound_is_not_read_and_the_count_is_an_estimate() -> None:
    # the answer to a 2-word text padded to 2 MiB: read whole, it was counted as 2 tokens
    # (and a hostile upstream's 120 MB answers raised a proxy's peak RSS by 470 MB)
    assert answer_bound(100) < 2**21
    with hostile(pad=2**21) as url:
        counter = UpstreamCounter(url)
        measured = counter.measure("one two")
        counter.close()
    assert measured.estimated  # paused, not taken for a count nor for "no /tokenize"


def test_a_tokenize_answer_within_its_bound_is_counted() -> None:
    with hostile(pad=1000) as url:
        counter = UpstreamCounter(url)
        assert counter.measure("one two") == (2, False)
        counter.close()


def test_a_tokenize_answer_dripping_past_the_timeout_is_cut_and_the_count_estimated() -> None:
    # the timeout bounded each read, not the answer: a byte every 0.2 s held the count
    # (and the client's request behind it) for as long as the upstream liked
    with hostile(drip=True) as url:
        counter = UpstreamCounter(url, timeout_s=1.0)
        got: list[object] = []
        worker = threading.Thread(target=lambda: got.append(counter.measure("one two")))
        worker.start()
        worker.join(45)  # a ceiling: the count ends at its 1 s timeout
        assert not worker.is_alive(), "the count waited on the dripping answer"
        counter.close()
    assert len(got) == 1 and getattr(got[0], "estimated", False)


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("one two three", b'{"tokens": []}'),  # every text 0 tokens: never windowed
        ("one two", b'{"tokens": [' + b",".join([b"1"] * 500) + b"]}"),  # more than its bytes
        ("word " * 2000, b'{"tokens": [1]}'),  # 10,000 bytes in one token
        ("one two", json.dumps({"tokens": [{"id": 1}] * 40}).encode()),
    ],
)
def test_a_tokenize_answer_that_is_no_count_of_the_text_pauses_it_and_the_count_is_estimated(
    tokenizer: tuple[Tokenizer, str], text: str, answer: bytes
) -> None:
    state, url = tokenizer
    state.answer = answer
    now = [0.0]
    counter = UpstreamCounter(url, retry_after_s=30, clock=lambda: now[0])
    measured = counter.measure(text)
    assert measured.estimated and measured.tokens >= 1
    assert not counter.exact and counter.cache_len() == 0  # nothing of it kept
    calls = state.calls
    assert counter.measure("four five six").estimated and state.calls == calls  # paused
    now[0] = 31.0
    state.answer = None
    assert counter.measure(text) == (len(text.split()), False)  # asked again, counted
    counter.close()


NONSENSE = st.one_of(
    st.lists(st.integers(-(2**40), 2**40), max_size=300).map(lambda ids: {"tokens": ids}),
    st.builds(dict, tokens=st.none() | st.integers() | st.text(max_size=20)),
    st.dictionaries(st.text(max_size=8), st.integers(), max_size=3),
    st.lists(st.integers(), max_size=5),
).map(lambda obj: json.dumps(obj).encode()) | st.binary(max_size=200)


def _answers(tokenizer: tuple[Tokenizer, str], text: str, answer: bytes) -> None:
    state, url = tokenizer
    state.answer = answer
    counter = UpstreamCounter(url)
    try:
        measured = counter.measure(text)
    finally:
        counter.close()
    count = token_count(answer)
    assert measured.tokens >= 1  # every non-empty text counts
    if count is not None and plausible_count(text, count) and not measured.estimated:
        assert measured.tokens == count
    else:  # an estimate (paused) or the offline count (no /tokenize like llama-server's)
        assert measured.tokens != 0


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(min_size=1, max_size=300), answer=NONSENSE)
def test_any_tokenize_answer_gives_a_count_of_at_least_one_token_for_a_text(
    tokenizer: tuple[Tokenizer, str], text: str, answer: bytes
) -> None:
    _answers(tokenizer, text, answer)


@pytest.mark.slow
@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(min_size=1, max_size=300), answer=NONSENSE)
def test_many_more_tokenize_answers_give_a_count_of_at_least_one_token_for_a_text(
    tokenizer: tuple[Tokenizer, str], text: str, answer: bytes
) -> None:
    _answers(tokenizer, text, answer)
