"""The watch over an HTTP upstream's notification stream counts what the MCP SDK counts.

Real parts: the SDK's Streamable HTTP client through the gateway's bounded transport,
against a hand-written peer on loopback (no SDK on its side) whose GETs misbehave on cue;
the SSE reader the event ids are compared with is httpx2's, the one the SDK reads with.
A gzip answer is read through the bounded transport from a peer on loopback too.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp import Client
from offload.gateway.httpbound import (
    BoundedTransport,
    EventIds,
    MessageTooLarge,
    follows,
    http_upstream,
)

pytestmark = pytest.mark.anyio

TOOL = {"name": "probe", "description": "Answers", "inputSchema": {"type": "object"}}


@dataclass
class Peer:
    """What the peer does with its notification GETs, and what it saw."""

    mode: str  # "redirect", "resume" or "unicode"
    gets: list[str | None] = field(default_factory=list)  # each GET's Last-Event-ID
    port: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    peer: Peer

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _plain(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        sent = self.headers.get("Last-Event-ID")
        with self.peer.lock:
            self.peer.gets.append(sent)
            n = len(self.peer.gets)
        if self.peer.mode == "resume" and sent == "p1":
            self._plain(500)  # resuming the call's answer fails, each time
            return
        if self.peer.mode == "redirect" and n >= 2:
            # elsewhere: another origin, which the SDK does not follow
            self._plain(307, {"Location": f"http://localhost:{self.peer.port}/mcp"})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            last = b"caf\xc3\xa9" if self.peer.mode == "unicode" else b"g1"
            self.wfile.write(b"retry: 10\nid: " + last + b"\n\n")  # a priming event
            self.wfile.flush()
            if self.peer.mode == "resume":
                self.rfile.read(1)  # open and quiet until the client leaves
        except (BrokenPipeError, ConnectionResetError):
            return

    def do_DELETE(self) -> None:
        self._plain(200)

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        rid, method = request.get("id"), request.get("method")
        if rid is None:
            self._plain(202)
            return
        if method == "tools/call":
            # an answer stream that breaks after its first event: the SDK resumes it
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Mcp-Session-Id", "s1")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            self.wfile.write(b"retry: 10\nid: p1\ndata:\n\n")
            return
        result: Any = {}
        if method == "initialize":
            result = {
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": [TOOL]}
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Mcp-Session-Id", "s1")
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def peer(mode: str) -> Iterator[tuple[Peer, str]]:
    state = Peer(mode)
    handler = type("Handler", (_Handler,), {"peer": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{state.port}/mcp"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_redirect_the_sdk_does_not_follow_after_a_working_stream_is_its_end() -> None:
    # the SDK gives up on its first redirected reconnection; the watch waited for a
    # second failure that never came, and list changes went unheard
    dead: list[str] = []
    told = anyio.Event()

    def on_dead(why: str) -> None:
        dead.append(why)
        told.set()

    with peer("redirect") as (state, url):
        async with Client(http_upstream(url, {}, 2**20, on_dead), mode="legacy") as client:
            await client.list_tools()
            with anyio.fail_after(20):
                await told.wait()
    assert state.gets[:2] == [None, "g1"]  # a working stream, then its reconnection
    assert len(dead) == 1 and "redirect to http://localhost:" in dead[0], dead
    assert "does not follow" in dead[0]


async def test_a_stream_whose_last_event_id_is_not_ascii_is_dead_when_it_ends() -> None:
    # the SDK sends the id back in a header, which httpx2 refuses to build: both of its
    # tries fail before reaching the transport, and the watch heard nothing
    told = anyio.Event()
    dead: list[str] = []

    def on_dead(why: str) -> None:
        dead.append(why)
        told.set()

    with peer("unicode") as (state, url):
        async with Client(http_upstream(url, {}, 2**20, on_dead), mode="legacy") as client:
            await client.list_tools()
            with anyio.fail_after(20):
                await told.wait()
    assert state.gets == [None] and len(dead) == 1 and "not ASCII" in dead[0]


async def test_the_gets_that_resume_a_calls_answer_are_not_counted_as_the_notification_stream() -> (
    None
):
    # two failed resumptions of a call's answer stream looked like a notification stream
    # failing twice: the upstream was reconnected though its stream was listening
    dead: list[str] = []
    with peer("resume") as (state, url):
        async with Client(http_upstream(url, {}, 2**20, dead.append), mode="legacy") as client:
            await client.list_tools()
            with anyio.fail_after(20):
                with pytest.raises(Exception, match="reconnection attempts were exhausted"):
                    await client.call_tool("probe", {})
    assert state.gets.count("p1") == 2  # the SDK tried to resume twice, then gave up
    assert dead == []


@pytest.mark.parametrize(
    ("sent", "target", "followed"),
    [
        ("http://127.0.0.1:8080/mcp", "http://127.0.0.1:8080/mcp/", True),
        ("http://127.0.0.1:8080/mcp", "http://localhost:8080/mcp", False),
        ("http://127.0.0.1:8080/mcp", "http://127.0.0.1:8081/mcp", False),
        ("http://example.com/mcp", "https://example.com/mcp", True),
        ("https://example.com/mcp", "http://example.com/mcp", False),
        ("http://example.com:8080/mcp", "https://example.com:8080/mcp", False),
        ("http://127.0.0.1:8080/mcp", "http://u:p@127.0.0.1:8080/mcp", False),
    ],
)
def test_a_redirect_is_followed_as_the_sdk_documents_it(
    sent: str, target: str, followed: bool
) -> None:
    assert follows(httpx2.URL(sent), httpx2.URL(target)) is followed


def _sdk_last_id(stream: bytes) -> str:
    """The id the SDK sends back after reading ``stream`` (httpx2's reader, its rule)."""
    response = httpx2.Response(
        200,
        headers={"content-type": "text/event-stream"},
        content=stream,
        request=httpx2.Request("GET", "http://127.0.0.1/mcp"),
    )
    last = ""
    for sse in httpx2.EventSource(response, max_event_size=None):
        if sse.id:
            last = sse.id
    return last


LINES = st.lists(
    st.sampled_from(
        [
            b"id: 7",
            b"id:8",
            b"id",
            b"id: ",
            b"id: a\x00b",
            b"idx: 9",
            b"data: x",
            b": c",
            b"event: e",
            b"retry: 5",
            b"",
            b"id: caf\xc3\xa9",
        ]
    )
    | st.binary(max_size=12).map(lambda b: b"id: " + b.replace(b"\n", b"").replace(b"\r", b"")),
    max_size=20,
)
ENDS = st.sampled_from([b"\n", b"\r\n", b"\r"])


def _check_ids(data: st.DataObject) -> None:
    lines = data.draw(LINES, label="lines")
    stream = b"".join(line + data.draw(ENDS) for line in lines)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6), label="cuts"))
    ids = EventIds()
    start = 0
    for cut in [*cuts, len(stream)]:
        ids.feed(stream[start:cut])
        start = cut
    ids.close(whole=True)
    expected = _sdk_last_id(stream)
    assert ids.last == expected, (stream, cuts)
    assert ids.gave(expected) is bool(expected)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_the_last_event_id_is_the_one_the_sdk_sends_back_however_the_stream_is_cut(
    data: st.DataObject,
) -> None:
    _check_ids(data)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None)
@given(data=st.data())
def test_many_more_streams_give_the_last_event_id_the_sdk_sends_back(
    data: st.DataObject,
) -> None:
    _check_ids(data)


def test_an_id_past_the_kept_length_is_told_apart_only_by_its_length() -> None:
    ids = EventIds()
    long_id = "k" * 70_000
    ids.feed(b"id: " + long_id.encode()[:30_000])
    ids.feed(long_id.encode()[30_000:] + b"\n\n")
    assert ids.last is None and ids.gave(long_id) and not ids.gave("short")
    ids.feed(b"data: x\n\nid: 5\n\n")
    assert ids.last == "5" and ids.gave("5")


def test_a_piece_of_many_lines_is_read_in_time_linear_in_it() -> None:
    # each line searched the rest of its piece for the other line end: a piece of a
    # million CRs and one LF took time quadratic in it
    ids = EventIds()
    reader = threading.Thread(target=ids.feed, args=(b"\r" * 1_000_000 + b"\nid: 9\n\n",))
    reader.start()
    reader.join(30)  # a ceiling, never waited for: ~2 s here under load (it took minutes)
    assert not reader.is_alive() and ids.last == "9"


class _GzipHandler(BaseHTTPRequestHandler):
    """Answers every POST with its class's ``body`` as a gzip-coded JSON body."""

    protocol_version = "HTTP/1.1"
    body = b""

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)


async def _read_gzipped(body: bytes, limit: int) -> bytes:
    """``body`` served gzip-coded on loopback, read through the bounded transport."""
    handler = type("Handler", (_GzipHandler,), {"body": body})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/mcp"
    transport = BoundedTransport(httpx2.AsyncHTTPTransport(), limit)
    try:
        async with httpx2.AsyncClient(transport=transport) as client:
            return (await client.post(url, content=b"{}")).content
    finally:
        server.shutdown()
        server.server_close()


async def test_a_gzip_answer_of_several_members_is_read_whole() -> None:
    # only the first member was inflated: the rest of the answer was dropped silently
    parts = [b'{"jsonrpc": "2.0", ', b'"id": 1, ', b'"result": {}}']
    body = b"".join(gzip.compress(part) for part in parts)
    assert await _read_gzipped(body, 1 << 20) == b"".join(parts)


async def test_a_gzip_answer_of_several_members_past_the_bound_all_told_is_refused() -> None:
    member = gzip.compress(b"x" * 600_000)  # each within the bound, the two past it
    with pytest.raises(MessageTooLarge, match="more than 1048576 bytes"):
        await _read_gzipped(member * 2, 1 << 20)
    assert len(await _read_gzipped(member, 1 << 20)) == 600_000


_ANSWER = b'{"jsonrpc": "2.0", "id": 1, "result": {"content": []}}'
_MEMBER = gzip.compress(_ANSWER)


@pytest.mark.parametrize(
    "body",
    [
        _MEMBER[:-8],  # no trailer: every byte inflates, nothing checks them
        _MEMBER[:-3],  # part of the trailer
        _MEMBER[: len(_MEMBER) // 2],  # cut mid-member
        _MEMBER + _MEMBER[:20],  # a whole member, then the start of another
    ],
    ids=["no-trailer", "part-trailer", "mid-member", "second-member-cut"],
)
async def test_a_gzip_answer_cut_inside_a_member_is_refused_not_read_as_far_as_it_goes(
    body: bytes,
) -> None:
    # it was read as far as it went: a member without its check passed as a whole answer
    with pytest.raises(MessageTooLarge, match="cut off: the body ended inside a gzip member"):
        await _read_gzipped(body, 1 << 20)


async def test_a_gzip_answer_whose_check_fails_is_refused() -> None:
    crc_flipped = _MEMBER[:-8] + bytes(b ^ 0xFF for b in _MEMBER[-8:-4]) + _MEMBER[-4:]
    with pytest.raises(MessageTooLarge, match=r"could not be inflated.*incorrect data check"):
        await _read_gzipped(crc_flipped, 1 << 20)
    assert await _read_gzipped(_MEMBER, 1 << 20) == _ANSWER
