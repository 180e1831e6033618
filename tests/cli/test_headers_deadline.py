"""The bounds on a request's headers over real loopback HTTP: a connection that sends
nothing, or part of a request's headers, is answered 408 and closed once the deadline
passes, on a fresh connection and on a kept-alive one; headers past the size limit, as
endless lines or one endless line, are answered 431 and closed; a request sent whole is
served as before. The connection limit is in tests/cli/test_connection_limit.py."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

import anyio
import pytest

import loopback
from offload.cli.headers_deadline import bounded_http
from offload.config import HttpSettings
from realparts import ServerThread

HEAD_LIMIT_KB = 16


async def hello(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
    """``hello`` at once; ``slow!`` at ``/slow`` a second later, in two parts."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    if scope["path"] == "/slow":
        await send({"type": "http.response.body", "body": b"", "more_body": True})
        await anyio.sleep(1.0)  # the behaviour under test: an answer longer than the deadline
        await send({"type": "http.response.body", "body": b"slow!"})
        return
    await send({"type": "http.response.body", "body": b"hello"})


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    http = HttpSettings(header_timeout_s=0.5, max_header_kb=HEAD_LIMIT_KB)
    server = ServerThread(hello, http=bounded_http(http)).start()
    try:
        yield server.url
    finally:
        server.stop()


def test_a_connection_that_sends_nothing_or_half_its_headers_is_answered_408_and_closed(
    url: str,
) -> None:
    silent = loopback.stall(url, b"")
    partial = loopback.stall(url, b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: ")
    assert loopback.get(url).text == "hello"  # others are served meanwhile
    for sock in (silent, partial):
        status, body = loopback.read_to_close(sock)
        assert status == 408 and b"http.header_timeout_s" in body


def test_a_kept_alive_connection_whose_next_request_stalls_in_its_headers_is_closed(
    url: str,
) -> None:
    sock = loopback.stall(url, b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\nGET / HTTP/1.1\r\nho")
    status, body = loopback.read_to_close(sock)
    assert status == 200  # the first request, answered; then the second one's 408
    assert b"hello" in body and b"HTTP/1.1 408 Request Timeout\r\n" in body


def test_a_request_stalled_behind_a_slower_answer_does_not_cut_into_that_answer(
    url: str,
) -> None:
    # /slow answers after twice the deadline; the stalled request behind it waits its turn
    sock = loopback.stall(url, b"GET /slow HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\nGET / HTTP/1.1\r\n")
    status, body = loopback.read_to_close(sock)
    assert status == 200
    answer, _, rest = body.partition(b"HTTP/1.1 408 Request Timeout\r\n")
    assert answer.endswith(b"5\r\nslow!\r\n0\r\n\r\n") and b"header_timeout_s" in rest


# -- size ----------------------------------------------------------------------------------


def _head_then_read(url: str, sent: bytes) -> tuple[int, bytes]:
    """Send ``sent`` in one write, then nothing more; the answer up to the server's close."""
    return loopback.read_to_close(loopback.stall(url, sent))


def test_header_lines_past_the_size_limit_are_answered_431_and_the_connection_closed(
    url: str,
) -> None:
    # a head that never ends: one header line after another, each arriving at once
    line = b"x-filler: " + b"a" * 1000 + b"\r\n"
    head = b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\n" + line * (HEAD_LIMIT_KB + 4)
    status, body = _head_then_read(url, head)
    assert status == 431 and b"http.max_header_kb" in body and b"16 KiB" in body


def test_one_endless_header_line_is_answered_431_before_it_ends(url: str) -> None:
    head = b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nx-endless: " + b"a" * (HEAD_LIMIT_KB + 4) * 1024
    status, body = _head_then_read(url, head)
    assert status == 431 and b"http.max_header_kb" in body


def test_a_whole_request_with_headers_past_the_limit_is_not_served(url: str) -> None:
    big = b"x-big: " + b"a" * (HEAD_LIMIT_KB + 1) * 1024 + b"\r\n"
    status, body = _head_then_read(url, b"GET / HTTP/1.1\r\nhost: a\r\n" + big + b"\r\n")
    assert status == 431 and b"hello" not in body


def test_headers_under_the_limit_are_served(url: str) -> None:
    headers = {f"x-h{i}": "v" * 500 for i in range(HEAD_LIMIT_KB)}  # ~8.5 KiB of 16
    assert loopback.get(url, headers=headers).text == "hello"


def test_headers_too_large_behind_a_slower_answer_are_refused_after_that_answer(
    url: str,
) -> None:
    big = b"x-big: " + b"a" * (HEAD_LIMIT_KB + 1) * 1024 + b"\r\n"
    first = b"GET /slow HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"
    second = b"GET / HTTP/1.1\r\nhost: a\r\n" + big + b"\r\n"  # read with the first
    status, body = _head_then_read(url, first + second)
    assert status == 200
    answer, _, rest = body.partition(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert answer.endswith(b"5\r\nslow!\r\n0\r\n\r\n") and b"http.max_header_kb" in rest
