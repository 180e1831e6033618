"""The deadline on a request's headers over real loopback HTTP: a connection that sends
nothing, or part of a request's headers, is answered 408 and closed once it passes, on a
fresh connection and on a kept-alive one; a request sent whole is served as before."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

import anyio
import pytest

import loopback
from offload.cli.headers_deadline import header_deadline
from realparts import ServerThread


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
    server = ServerThread(hello, http=header_deadline(0.5)).start()
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
