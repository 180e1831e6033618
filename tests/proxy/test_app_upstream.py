"""What reaches the upstream: the client's own bytes, and retries on a dead kept-alive
connection.

llama-server closes its connection after every streamed answer while advertising
keep-alive, so the proxy's next request can go out on a connection that is already dead.
The upstream here is a raw socket server that makes that race deterministic: it answers
the first request on a connection, keeps the connection open, and closes it without an
answer when a second request arrives on it.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

import loopback
from offload.proxy.retrieval.retrieval import DEFINITIONS
from offload.store.store import Store
from proxy.proxy_servers import completion, proxy_for
from proxy.socket_upstream import NOT_FOUND, SocketUpstream, running

CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "hello there"}]


@dataclass
class OneShotUpstream(SocketUpstream):
    """Answers one request per connection; a second request on it is dropped unanswered."""

    answered: list[bytes] = field(default_factory=list)  # request lines answered
    bodies: list[bytes] = field(default_factory=list)  # their bodies
    dropped: int = 0

    def answer(self, conn: socket.socket, n: int, request_line: bytes, body: bytes) -> bool:
        """Answer the first request; close on the second, after reading it whole."""
        if n == 1:  # the whole request was read: closing now is the keep-alive race
            with self.lock:
                self.dropped += 1
            return False
        with self.lock:  # recorded before the answer leaves, so a test sees it
            self.answered.append(request_line)
            self.bodies.append(body)
        conn.sendall(self._answer(request_line, body))
        return True

    @staticmethod
    def _answer(request_line: bytes, body: bytes) -> bytes:
        if not request_line.startswith(b"POST /v1/chat/completions "):
            return NOT_FOUND
        if json.loads(body).get("stream"):
            chunk = json.dumps(completion() | {"object": "chat.completion.chunk"})
            payload = f"data: {chunk}\n\ndata: [DONE]\n\n".encode()
            kind = b"text/event-stream"
        else:
            payload = json.dumps(completion()).encode()
            kind = b"application/json"
        return (
            b"HTTP/1.1 200 OK\r\ncontent-type: " + kind + b"\r\n"
            b"keep-alive: timeout=5, max=100\r\n"
            b"content-length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload
        )


@pytest.fixture
def one_shot() -> Iterator[OneShotUpstream]:
    """The one-request-per-connection upstream on loopback."""
    with running(OneShotUpstream()) as upstream:
        yield upstream


@pytest.fixture
def proxy_url(one_shot: OneShotUpstream, tmp_path: Path) -> Iterator[str]:
    """The real proxy in front of the one-shot upstream."""
    with (
        Store(tmp_path / "offload.db") as store,
        proxy_for(one_shot.url, store, n_ctx=4096) as (
            server,
            _,
        ),
    ):
        yield server.url


def test_a_request_on_a_connection_the_upstream_just_closed_is_sent_again_on_a_fresh_one(
    one_shot: OneShotUpstream, proxy_url: str
) -> None:
    with httpx.Client(timeout=30) as client:
        answers = [
            client.post(proxy_url + CHAT, json={"messages": HELLO, "stream": stream})
            for stream in (False, True, False, True)
        ]
    assert [r.status_code for r in answers] == [200, 200, 200, 200]
    assert answers[0].json()["choices"][0]["message"]["content"] == "hello"
    assert answers[1].text.endswith("data: [DONE]\n\n")
    chat = [line for line in one_shot.answered if line.startswith(b"POST /v1/chat/")]
    assert len(chat) == 4  # every request reached the upstream and was answered once
    assert one_shot.dropped == 3  # requests 2-4 each found the previous connection dead


def test_a_request_the_rewrite_leaves_unchanged_reaches_the_upstream_byte_for_byte(
    one_shot: OneShotUpstream, proxy_url: str
) -> None:
    # spacing, key order and escapes a re-encoding would change
    raw = (
        b'{ "stream":false,\n "messages": [ {"content": "caf\\u00e9 \xc3\xa9t\xc3\xa9",'
        b' "role": "user"} ], "max_tokens": 4.0 }'
    )
    resp = loopback.post(
        proxy_url + CHAT, content=raw, headers={"content-type": "application/json"}
    )
    assert resp.status_code == 200
    chat = [
        body
        for line, body in zip(one_shot.answered, one_shot.bodies, strict=True)
        if line.startswith(b"POST /v1/chat/")
    ]
    # the proxy's own memory tools are spliced in before the closing brace, nothing else
    (sent,) = chat
    assert sent.startswith(raw[:-1])
    assert json.loads(sent) == {**json.loads(raw), "tools": list(DEFINITIONS)}
