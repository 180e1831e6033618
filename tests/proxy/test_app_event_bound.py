"""An upstream that streams an event without end, over real sockets: past
``proxy.max_event_mb`` the client's stream ends with an error event in its own API's shape
(OpenAI chat, with and without the proxy's retrieval round; Anthropic Messages; Responses)
and the upstream's connection is closed (its request cancelled), instead of the proxy
holding the open line whole. Likewise a whole answer without end, past
``proxy.max_answer_mb``: a 502 in the route's shape."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

import loopback
from offload.config import ProxySettings
from offload.proxy.app import create_app
from offload.store.store import Store
from proxy.proxy_servers import serving
from proxy.socket_upstream import NOT_FOUND, SocketUpstream, running

HELLO = [{"role": "user", "content": "hello there"}]
FIRST = {"choices": [{"index": 0, "delta": {"content": "first words"}}]}
PIECE = 64 * 1024
# the most the upstream sends before giving up: far past the 1 MiB limit under test
MOST = 48 * 1024 * 1024


@dataclass(kw_only=True)
class EndlessUpstream(SocketUpstream):
    """Answers a chat request with one whole event, then one line that never ends, sent
    until the proxy closes the connection (``cut`` is set then) or :data:`MOST` bytes."""

    newlines: bool = False  # "data: x" lines, never a blank one, instead of one line
    whole: bool = False  # a JSON answer (not an event stream) that never ends
    cut: threading.Event = field(default_factory=threading.Event)

    def answer(self, conn: socket.socket, n: int, request_line: bytes, body: bytes) -> bool:
        """The endless stream, in HTTP/1.1 chunks."""
        if not request_line.startswith(b"POST /v1/chat/completions "):
            conn.sendall(NOT_FOUND)
            return True
        first = b"data: " + json.dumps(FIRST).encode() + b"\n\ndata: "
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        if self.whole:
            first = b'{"choices": [{"index": 0, "message": {"content": "'
            head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        try:
            conn.sendall(head + b"transfer-encoding: chunked\r\n\r\n" + _chunk(first))
            piece = (b"data: xxxxxxx\n" * (PIECE // 14)) if self.newlines else b"x" * PIECE
            for _ in range(MOST // PIECE):
                conn.sendall(_chunk(piece))
        except OSError:
            self.cut.set()
        return False


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A fresh store file."""
    with Store(tmp_path / "offload.db") as s:
        yield s


@contextmanager
def proxy(upstream: str, store: Store, client: str = "lean", **extra: Any) -> Iterator[str]:
    """The real proxy, events bounded to 1 MiB, in front of ``upstream``; its URL."""
    settings = ProxySettings(
        upstream=upstream, n_ctx=4096, alternate_roles="never", max_event_mb=1, **extra
    )
    transport = httpx.AsyncHTTPTransport() if client == "httpx" else None
    with serving(create_app(settings, store, transport=transport)) as server:
        yield server.url


def events(text: str) -> list[tuple[str, str]]:
    """(event name, data) of each event of an SSE body."""
    out = []
    for block in text.split("\n\n"):
        if block.strip():
            lines = block.split("\n")
            name = next((x[7:] for x in lines if x.startswith("event: ")), "")
            out.append((name, next((x[6:] for x in lines if x.startswith("data: ")), "")))
    return out


def stream(url: str, path: str, body: dict[str, Any]) -> str:
    """POST a streamed request; the whole body the client got."""
    resp = loopback.post(url + path, json={**body, "stream": True}, timeout=60)
    assert resp.status_code == 200
    assert len(resp.content) < 2 * 1024 * 1024  # the open line never reached the client
    return resp.text


@pytest.mark.parametrize(
    ("client", "retrieval", "newlines"),
    [("lean", "off", False), ("httpx", "off", True), ("lean", "on", False)],
)
def test_an_endless_openai_event_ends_the_stream_with_an_error_and_cancels_the_upstream(
    store: Store, client: str, retrieval: str, newlines: bool
) -> None:
    with (
        running(EndlessUpstream(newlines=newlines)) as up,
        proxy(up.url, store, client, retrieval=retrieval) as url,
    ):
        text = stream(url, "/v1/chat/completions", {"messages": HELLO})
        assert up.cut.wait(30)  # the proxy closed the upstream's connection
    got = events(text)
    assert json.loads(got[0][1]) == FIRST
    error = json.loads(got[-1][1])["error"]
    assert error["code"] == 502 and "proxy.max_event_mb" in error["message"]
    assert "[DONE]" not in text


def test_an_endless_event_ends_the_anthropic_stream_with_an_error_event(store: Store) -> None:
    with running(EndlessUpstream()) as up, proxy(up.url, store) as url:
        body = {"model": "m", "max_tokens": 16, "messages": HELLO}
        text = stream(url, "/v1/messages", body)
        assert up.cut.wait(30)
    got = events(text)
    assert got[-1][0] == "error" and "message_stop" not in [n for n, _ in got]
    error = json.loads(got[-1][1])
    assert error["type"] == "error" and "proxy.max_event_mb" in error["error"]["message"]


def test_an_endless_event_fails_the_responses_stream(store: Store) -> None:
    with running(EndlessUpstream()) as up, proxy(up.url, store) as url:
        text = stream(url, "/v1/responses", {"model": "m", "input": "hello there"})
        assert up.cut.wait(30)
    got = [json.loads(data) for _, data in events(text) if data.startswith("{")]
    assert got[-1]["type"] == "response.failed"
    assert "proxy.max_event_mb" in json.dumps(got[-1])


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": HELLO}),
        ("/v1/messages", {"model": "m", "max_tokens": 16, "messages": HELLO}),
        ("/v1/responses", {"model": "m", "input": "hello there"}),
    ],
)
def test_a_whole_answer_without_end_is_a_502_in_the_routes_shape_and_cancels_the_upstream(
    store: Store, path: str, body: dict[str, Any]
) -> None:
    with (
        running(EndlessUpstream(whole=True)) as up,
        proxy(up.url, store, max_answer_mb=1) as url,
    ):
        resp = loopback.post(url + path, json=body, timeout=60)
        assert up.cut.wait(30)  # the proxy closed the upstream's connection
    assert resp.status_code == 502
    assert "proxy.max_answer_mb" in resp.text and len(resp.content) < 4096
