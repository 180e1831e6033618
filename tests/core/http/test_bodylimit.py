"""The request-body bound over real loopback HTTP: refused on a declared length before a
byte is read, counted as a chunked body arrives, accepted whole in one message below it;
a body that does not arrive in time (sent slowly, stalled, or never begun) is answered 408
and its connection closed, while the server goes on answering others."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import loopback
from offload.config import HttpSettings
from offload.core.http.bodylimit import BodyLimit, jsonrpc, too_large_message, too_slow_message
from realparts import ServerThread

LIMIT = 1024 * 1024  # http.max_body_mb = 1
HTTP = HttpSettings(max_body_mb=1)
# a deadline short enough for a test to wait out, long for a loopback body sent whole
QUICK = HttpSettings(max_body_mb=1, body_timeout_s=0.5)


class Echo:
    """An ASGI app answering how many body bytes and ``http.request`` messages it got."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.calls += 1
        size = messages = 0
        more = True
        while more:
            message = await receive()
            messages += 1
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
        body = f"{size} {messages}".encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def echo() -> Iterator[tuple[Echo, str]]:
    app = Echo()
    server = ServerThread(BodyLimit(app, HTTP, jsonrpc, anyio.fail_after)).start()
    try:
        yield app, server.url
    finally:
        server.stop()


def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_read(
    echo: tuple[Echo, str],
) -> None:
    app, url = echo
    calls = app.calls
    head = (
        b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % (LIMIT + 1)
    )
    status, body = loopback.raw_exchange(url, head, [])  # not one byte of the body is sent
    assert status == 413
    assert b'"jsonrpc": "2.0"' in body and b"http.max_body_mb" in body
    assert app.calls == calls


def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit(
    echo: tuple[Echo, str],
) -> None:
    app, url = echo
    calls = app.calls
    head = b"POST /x HTTP/1.1\r\nhost: 127.0.0.1\r\ntransfer-encoding: chunked\r\n\r\n"
    piece = b"x" * 8192
    # one chunk past the limit and no end: the refusal cannot wait for the whole body
    chunks = [b"%x\r\n%s\r\n" % (len(piece), piece)] * (LIMIT // len(piece) + 1)
    status, body = loopback.raw_exchange(url, head, chunks)
    assert status == 413
    assert too_large_message(LIMIT) in body.decode()
    assert app.calls == calls


def test_a_body_within_the_limit_reaches_the_app_whole_in_one_message(
    echo: tuple[Echo, str],
) -> None:
    _app, url = echo

    def pieces() -> Iterator[bytes]:  # chunked: counted as it arrives, then handed on whole
        for _ in range(LIMIT // 4096):
            yield b"y" * 4096

    answer = loopback.post(url + "/x", content=pieces())
    assert answer.status_code == 200
    assert answer.text == f"{LIMIT} 1"
    exact = loopback.post(url + "/x", content=b"z" * LIMIT)
    assert exact.text == f"{LIMIT} 1"


@pytest.fixture(scope="module")
def quick() -> Iterator[tuple[Echo, str]]:
    app = Echo()
    server = ServerThread(BodyLimit(app, QUICK, jsonrpc, anyio.fail_after)).start()
    try:
        yield app, server.url
    finally:
        server.stop()


def post_head(length: int) -> bytes:
    return (
        b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % length
    )


def test_a_body_that_stalls_midway_is_answered_408_and_its_connection_closed(
    quick: tuple[Echo, str],
) -> None:
    app, url = quick
    calls = app.calls
    sock = loopback.stall(url, post_head(100) + b'{"jsonrpc": ')  # 12 of 100 bytes, then silence
    # the server answers others while the stalled request waits out its deadline
    other = loopback.post(url + "/x", content=b"a" * 10)
    assert other.status_code == 200 and other.text == "10 1"
    status, body = loopback.read_to_close(sock)  # returns only once the server closed
    assert status == 408
    assert b'"jsonrpc": "2.0"' in body and too_slow_message(0.5).encode() in body
    assert app.calls == calls + 1  # the app never saw the stalled request


def test_a_body_never_begun_and_a_chunked_body_left_open_are_both_timed_out(
    quick: tuple[Echo, str],
) -> None:
    _app, url = quick
    silent = loopback.stall(url, post_head(10))
    chunked = loopback.stall(
        url,
        b"POST /x HTTP/1.1\r\nhost: 127.0.0.1\r\ntransfer-encoding: chunked\r\n\r\n"
        b"4\r\nabcd\r\n",  # one chunk and no last chunk
    )
    assert loopback.read_to_close(silent)[0] == 408
    assert loopback.read_to_close(chunked)[0] == 408
    assert loopback.get(url + "/x").text == "0 1"


def test_a_body_trickling_in_faster_than_the_deadline_is_still_cut_at_the_deadline(
    quick: tuple[Echo, str],
) -> None:
    _app, url = quick
    sock = loopback.stall(url, post_head(100_000))
    sock.settimeout(0.1)  # a byte every 0.1 s: never idle for the 0.5 s deadline
    answer = b""
    with sock:
        for _ in range(600):  # bounded: a minute of trickling at most
            try:
                sock.sendall(b" ")
            except OSError:  # the server closed after answering
                break
            try:
                got = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:  # a byte sent after the answer drew a reset
                break
            if not got:
                break
            answer += got
    assert answer.startswith(b"HTTP/1.1 408 ")
