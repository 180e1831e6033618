"""Upstream failures as the client sees them, in its own API's shape, over real sockets.

The upstream is a raw socket server scripted per test: it breaks off mid-stream, never
answers (blocking on an event the fixture releases at teardown), or answers every chat
request with a context overflow. Each failure is checked on the OpenAI route through both
upstream clients (the lean HTTP/1.1 client and httpx) and on the Anthropic route.
"""

from __future__ import annotations

import functools
import json
import socket
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

import loopback
from offload.config import ProxySettings, StoreSettings
from offload.errors import ConfigError
from offload.proxy.app import create_app
from offload.proxy.figures.metrics import Metrics
from offload.store.store import Store
from proxy.proxy_servers import serving
from proxy.socket_upstream import NOT_FOUND, SocketUpstream, running
from realparts import free_port, wait_until

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
HELLO = [{"role": "user", "content": "hello there"}]
FIRST = {"choices": [{"index": 0, "delta": {"content": "first words"}}]}
OVERFLOW = {
    "error": {
        "code": 400,
        "type": "exceed_context_size_error",
        "message": "the request exceeds the available context size",
        "n_prompt_tokens": 5000,
        "n_ctx": 4096,
    }
}


# "small" mode: an upstream whose window holds a chat body up to this size, overflowing past it
SMALL_WINDOW_BYTES = 12_000
ANSWER = {
    "id": "c1",
    "object": "chat.completion",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
}


def _json_reply(obj: dict[str, Any]) -> bytes:
    payload = json.dumps(obj).encode()
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload
    )


@dataclass(kw_only=True)
class RawUpstream(SocketUpstream):
    """A chat upstream on a raw socket; ``mode`` says how it fails."""

    mode: str
    bodies: list[bytes] = field(default_factory=list)  # chat request bodies received

    def answer(self, conn: socket.socket, n: int, request_line: bytes, body: bytes) -> bool:
        """Hang, break off mid-stream, or answer with a context overflow."""
        if not request_line.startswith(b"POST /v1/chat/completions "):
            conn.sendall(NOT_FOUND)
            return True
        with self.lock:  # recorded before any answer leaves, so a test sees it
            self.bodies.append(body)
        if self.mode == "hang":
            self.release.wait(60)  # released at teardown
            return False
        if self.mode == "break":
            self._break_off(conn)
            return False
        if self.mode == "small" and len(body) <= SMALL_WINDOW_BYTES:
            conn.sendall(_json_reply(ANSWER))
            return True
        if self.mode == "answer":
            if b'"stream": true' in body:
                self._stream_whole(conn)
            else:
                conn.sendall(_json_reply(ANSWER))
            return True
        payload = json.dumps(OVERFLOW).encode()
        conn.sendall(
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload
        )
        return True

    @staticmethod
    def _break_off(conn: socket.socket) -> None:
        """Start a chunked event stream, send one whole event and half of the next, and
        close the connection without the stream's end."""
        events = b"data: " + json.dumps(FIRST).encode() + b'\n\ndata: {"choices": [{"ind'
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
            + f"{len(events):x}\r\n".encode()
            + events
            + b"\r\n"
        )

    @staticmethod
    def _stream_whole(conn: socket.socket) -> None:
        """A whole event stream: one event, then ``[DONE]``."""
        events = b"data: " + json.dumps(FIRST).encode() + b"\n\ndata: [DONE]\n\n"
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"content-length: " + str(len(events)).encode() + b"\r\n\r\n" + events
        )


def raw_upstream(mode: str) -> AbstractContextManager[RawUpstream]:
    """A :class:`RawUpstream` on loopback; every thread it started ends with the block."""
    return running(RawUpstream(mode=mode))


@contextmanager
def proxy(upstream: str, store: Store, client: str, **settings: Any) -> Iterator[str]:
    """The real proxy in front of ``upstream`` with chat completions on ``client``
    ("lean": the HTTP/1.1 client; "httpx": httpx over real sockets); yields its URL."""
    proxy_settings = ProxySettings(
        upstream=upstream, n_ctx=4096, alternate_roles="never", metrics_flush_s=0.1, **settings
    )
    transport = httpx.AsyncHTTPTransport() if client == "httpx" else None
    with serving(create_app(proxy_settings, store, transport=transport)) as server:
        yield server.url


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A fresh store file."""
    with Store(tmp_path / "offload.db") as s:
        yield s


def anthropic_body(**extra: Any) -> dict[str, Any]:
    """A small Anthropic Messages request."""
    return {"model": "m", "max_tokens": 16, "messages": HELLO, **extra}


def sse_events(text: str) -> list[tuple[str, str]]:
    """(event name, data) of every event in an SSE body ("" when unnamed)."""
    out: list[tuple[str, str]] = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name = data = ""
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data = line[len("data: ") :]
        out.append((name, data))
    return out


def assert_anthropic_error(resp: httpx.Response, status: int, kind: str) -> str:
    """The response is Anthropic's error shape with this status and type; its message."""
    assert resp.status_code == status
    body = resp.json()
    assert body["type"] == "error" and body["error"]["type"] == kind, body
    assert set(body) == {"type", "error"}
    message: str = body["error"]["message"]
    return message


# -- 11: an upstream that dies mid-stream --------------------------------------------------


@pytest.mark.parametrize("client", ["lean", "httpx"])
def test_an_upstream_that_breaks_off_mid_stream_ends_the_openai_stream_with_an_error_event(
    store: Store, client: str
) -> None:
    with raw_upstream("break") as up, proxy(up.url, store, client) as url:
        resp = loopback.post(url + CHAT, json={"messages": HELLO, "stream": True}, timeout=30)
    assert resp.status_code == 200  # the stream had begun
    events = sse_events(resp.text)
    assert [json.loads(data) for _, data in events[:1]] == [FIRST]
    assert len(events) == 2  # the half event never reaches the client
    error = json.loads(events[-1][1])["error"]
    assert error["type"] == "upstream_unavailable" and error["code"] == 502
    assert "broke off mid-answer" in error["message"]
    assert "[DONE]" not in resp.text
    assert resp.text.endswith("\n\n")


def test_an_upstream_that_breaks_off_mid_stream_ends_the_anthropic_stream_with_an_error_event(
    store: Store,
) -> None:
    with raw_upstream("break") as up, proxy(up.url, store, "lean") as url:
        resp = loopback.post(url + MESSAGES, json=anthropic_body(stream=True), timeout=30)
    assert resp.status_code == 200
    events = sse_events(resp.text)
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "content_block_delta"]
    assert json.loads(events[2][1])["delta"]["text"] == "first words"
    assert names[-1] == "error" and "message_stop" not in names
    error = json.loads(events[-1][1])
    assert error["type"] == "error" and error["error"]["type"] == "api_error"
    assert "broke off mid-answer" in error["error"]["message"]


# -- 12: a hung upstream -------------------------------------------------------------------


@pytest.mark.parametrize("client", ["lean", "httpx"])
def test_a_streamed_request_to_an_upstream_that_never_answers_is_a_504_after_the_first_byte_limit(
    store: Store, client: str
) -> None:
    with (
        raw_upstream("hang") as up,
        proxy(up.url, store, client, first_byte_timeout_s=0.3) as url,
    ):
        resp = loopback.post(url + CHAT, json={"messages": HELLO, "stream": True}, timeout=30)
        anthropic = loopback.post(url + MESSAGES, json=anthropic_body(stream=True), timeout=30)
    assert resp.status_code == 504
    error = resp.json()["error"]
    assert error["type"] == "upstream_timeout" and "first_byte_timeout_s" in error["message"]
    assert "first_byte_timeout_s" in assert_anthropic_error(anthropic, 504, "timeout_error")
    assert len(up.bodies) == 2  # both reached the upstream, which never answered


def test_the_first_byte_limit_is_a_validated_setting() -> None:
    assert ProxySettings().first_byte_timeout_s == 120.0
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match=r"proxy\.first_byte_timeout_s"):
            ProxySettings(first_byte_timeout_s=bad)


# -- 13: the Anthropic route answers every error in Anthropic's shape ------------------------


def test_the_anthropic_route_with_the_upstream_down_answers_in_anthropics_shape(
    store: Store,
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with proxy(dead, store, "lean") as url:
        whole = loopback.post(url + MESSAGES, json=anthropic_body(), timeout=30)
        streamed = loopback.post(url + MESSAGES, json=anthropic_body(stream=True), timeout=30)
        refused = loopback.post(
            url + MESSAGES, json=anthropic_body(), headers={"host": "evil.example"}
        )
    for resp in (whole, streamed):
        assert "cannot reach upstream" in assert_anthropic_error(resp, 502, "api_error")
    assert_anthropic_error(refused, 403, "permission_error")


def test_a_non_streamed_anthropic_request_to_a_hung_upstream_is_a_504_in_anthropics_shape(
    store: Store,
) -> None:
    with raw_upstream("hang") as up, proxy(up.url, store, "lean", timeout_s=0.3) as url:
        resp = loopback.post(url + MESSAGES, json=anthropic_body(), timeout=30)
    assert_anthropic_error(resp, 504, "timeout_error")


# -- 10: a request that cannot fit -----------------------------------------------------------


@pytest.mark.parametrize("client", ["lean", "httpx"])
def test_an_overflow_the_proxy_cannot_shrink_is_not_resent_and_is_a_clear_400(
    store: Store, client: str
) -> None:
    # one user message: nothing the proxy may page out, so a retry would be the same bytes
    with raw_upstream("overflow") as up, proxy(up.url, store, client) as url:
        resp = loopback.post(url + CHAT, json={"messages": HELLO}, timeout=30)
        anthropic = loopback.post(url + MESSAGES, json=anthropic_body(), timeout=30)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["type"] == "invalid_request_error"
    assert "does not fit" in error["message"] and "5000" in error["message"]
    assert "does not fit" in assert_anthropic_error(anthropic, 400, "invalid_request_error")
    assert len(up.bodies) == 2  # one request each: the same bytes were never sent again


def test_a_configured_n_ctx_above_the_upstreams_is_held_under_what_the_upstream_reports(
    store: Store,
) -> None:
    # proxy.n_ctx 16384 in front of an upstream that holds 4096: the first request, under
    # the configured high water, overflows; the proxy learns 4096 from the error, pages out
    # under it and retries, and budgets every later request under 4096 at once
    turns = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "word " * 240}
        for i in range(20)
    ]
    with raw_upstream("small") as up:
        settings = ProxySettings(
            upstream=up.url, n_ctx=16384, alternate_roles="never", metrics_flush_s=0.1
        )
        with serving(create_app(settings, store)) as server:
            first = loopback.post(server.url + CHAT, json={"messages": turns}, timeout=30)
            second = loopback.post(
                server.url + CHAT,
                json={"messages": [*turns, {"role": "user", "content": "and now?"}]},
                timeout=30,
            )
            stats = loopback.get(server.url + "/api/stats", timeout=30).json()
    assert first.status_code == 200, first.text
    assert second.status_code == 200, second.text
    sizes = [len(body) for body in up.bodies]
    assert sizes[0] > SMALL_WINDOW_BYTES  # sent whole under the configured 16384
    assert all(size <= SMALL_WINDOW_BYTES for size in sizes[1:]), sizes
    assert len(sizes) == 3  # the second request needed no retry
    assert stats["upstream"]["n_ctx"] == 4096
    assert stats["upstream"]["n_ctx_source"] == "overflow_error"


def test_with_the_store_locked_a_request_that_fits_goes_out_and_one_to_page_out_is_a_503(
    tmp_path: Path,
) -> None:
    # another process holds the store's write lock past the busy timeout: what fits under
    # the ceiling goes out as the client sent it; what would need a page-out cannot
    db = tmp_path / "offload.db"
    big = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "word " * 240}
        for i in range(20)
    ]
    with Store(db, StoreSettings(busy_timeout_s=0.2)) as store, raw_upstream("small") as up:
        settings = ProxySettings(
            upstream=up.url, n_ctx=4096, alternate_roles="never", metrics_flush_s=60
        )
        with serving(create_app(settings, store)) as server:
            holder = sqlite3.connect(db, isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")
            try:
                small = loopback.post(server.url + CHAT, json={"messages": HELLO}, timeout=30)
                paged = loopback.post(server.url + CHAT, json={"messages": big}, timeout=30)
                anthropic = loopback.post(
                    server.url + MESSAGES, json=anthropic_body(messages=big[:-1]), timeout=30
                )
            finally:
                holder.execute("ROLLBACK")
                holder.close()
    assert small.status_code == 200, small.text
    assert json.loads(up.bodies[0])["messages"] == HELLO  # as the client sent it
    assert paged.status_code == 503
    error = paged.json()["error"]
    assert error["type"] == "store_unavailable" and "paged out" in error["message"]
    assert "paged out" in assert_anthropic_error(anthropic, 503, "api_error")
    assert len(up.bodies) == 1  # nothing that needed the store went upstream


# -- the store writes an answer waits for ------------------------------------------------


def proxy_state(app: Any) -> Any:
    """The ProxyState under the middleware that wraps the Starlette app."""
    for _ in range(8):
        if hasattr(app, "state"):
            return app.state.proxy
        app = app.app
    raise AssertionError("no Starlette app with a state under the proxy's middleware")


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_whose_paged_out_part_the_store_refuses_ends_in_an_error_not_a_dangling_stub(
    tmp_path: Path, stream: bool
) -> None:
    # the part's write runs beside the upstream; the store refuses it (another process holds
    # its write lock past the busy timeout) after the upstream answered: the client must
    # not see a completed answer whose stub names nothing
    db = tmp_path / "offload.db"
    big = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "word " * 240}
        for i in range(20)
    ]
    with Store(db, StoreSettings(busy_timeout_s=0.2)) as store, raw_upstream("answer") as up:
        settings = ProxySettings(
            upstream=up.url, n_ctx=4096, alternate_roles="never", metrics_flush_s=60
        )
        app = create_app(settings, store)
        with serving(app) as server:
            writes = proxy_state(app).pipeline.writes
            release = threading.Event()
            writes.submit("blocker", functools.partial(release.wait, 30))
            got: list[httpx.Response] = []
            body = {"messages": big, "stream": stream}
            sender = threading.Thread(
                target=lambda: got.append(loopback.post(server.url + CHAT, json=body, timeout=30))
            )
            sender.start()
            wait_until(lambda: bool(up.bodies), timeout=30)  # rewritten, state saved, sent
            holder = sqlite3.connect(db, isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")
            try:
                release.set()
                sender.join(30)
            finally:
                holder.execute("ROLLBACK")
                holder.close()
    assert got, "the request did not end"
    resp = got[0]
    if not stream:
        assert resp.status_code == 503
        error = resp.json()["error"]
    else:
        assert resp.status_code == 200  # the stream had begun
        assert "[DONE]" not in resp.text
        error = json.loads(sse_events(resp.text)[-1][1])["error"]
    assert error["type"] == "store_unavailable" and "could not be stored" in error["message"]


def test_a_fault_of_any_kind_in_the_figures_flush_is_logged_and_later_flushes_still_run(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # a fault the loop did not expect ended it for the process's life: no figures were
    # written again, and the idle release that runs in the same loop stopped too
    with raw_upstream("answer") as up:
        settings = ProxySettings(
            upstream=up.url, n_ctx=4096, alternate_roles="never", metrics_flush_s=0.05
        )
        app = create_app(settings, store)
        with serving(app) as server:
            metrics: Metrics = proxy_state(app).metrics
            real = metrics.flush
            calls: list[int] = []

            def first_one_faults() -> int:
                calls.append(len(calls))
                if len(calls) == 1:
                    raise ValueError("a fault of no known kind")
                return real()

            monkeypatch.setattr(metrics, "flush", first_one_faults)
            for n in (1, 2):
                resp = loopback.post(server.url + CHAT, json={"messages": HELLO}, timeout=30)
                assert resp.status_code == 200
                wait_until(functools.partial(_at_least, calls, n), timeout=30, what=f"flush {n}")
            wait_until(lambda: not metrics.dirty, timeout=30, what="the figures written")
    assert "metrics flush failed" in caplog.text and "a fault of no known kind" in caplog.text


def _at_least(calls: list[int], n: int) -> bool:
    return len(calls) >= n
