"""The request-body bound over real loopback HTTP: refused on a declared length before a
byte is read, counted as a chunked body arrives, accepted whole in one message below it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import loopback
from offload.core.bodylimit import BodyLimit, jsonrpc, too_large_message
from realparts import ServerThread

LIMIT = 64 * 1024


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
    server = ServerThread(BodyLimit(app, LIMIT, jsonrpc)).start()
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
