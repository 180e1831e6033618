"""The lean upstream client over real loopback sockets, against a small asyncio server.

The server answers by path (see :class:`Upstream`), so each test scripts framing, pace and
connection handling exactly: chunked and sized bodies, a kept-alive connection closed under
a request, silence, and a client that leaves mid-answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from offload.errors import UpstreamTimeout, UpstreamUnavailable
from offload.proxy.transport.forward import request_headers
from offload.proxy.transport.http1 import Http1Pool
from realparts import free_port

pytestmark = pytest.mark.anyio

WAIT = 10.0  # the longest any condition is waited for
SSE = [b'data: {"n": 1}\n\n', b'data: {"n": 2}\n\n', b"data: [DONE]\n\n"]


@dataclass
class Upstream:
    """A scripted HTTP/1.1 server; what it saw is recorded for the tests to check.

    Paths: ``/sized`` a content-length body; ``/chunked`` the SSE chunks with chunked framing,
    the first at once and the rest after ``release``; ``/eof`` a body ended by closing the
    connection; ``/once`` answers the first request on a connection and closes it, without
    an answer, when a second arrives; ``/drop`` closes without answering; ``/silent`` sends
    nothing until ``release``; ``/stall`` sends headers and one chunk, then nothing.
    """

    port: int = 0
    connections: int = 0
    requests: list[tuple[bytes, dict[bytes, bytes], bytes]] = field(default_factory=list)
    dropped: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)
    peer_closed: asyncio.Event = field(default_factory=asyncio.Event)  # client closed early
    handlers: set[asyncio.Task[None]] = field(default_factory=set)
    writers: set[asyncio.StreamWriter] = field(default_factory=set)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        self.writers.add(writer)
        served = 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                line, *lines = head[:-4].split(b"\r\n")
                headers = {}
                for raw in lines:
                    name, _, value = raw.partition(b":")
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get(b"content-length", b"0")))
                path = line.split()[1]
                if path in (b"/drop",) or (path == b"/once" and served):
                    self.dropped += 1
                    return
                self.requests.append((line, headers, body))
                served += 1
                if not await self.answer(path, body, reader, writer):
                    return
        finally:
            writer.close()

    async def answer(
        self,
        path: bytes,
        body: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        """Answer one request; False when the connection is to end."""
        if path == b"/big":  # more than the client buffers before it stops reading
            payload = bytes(range(256)) * 8192
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(payload))
            writer.write(payload)
            await writer.drain()
            return True
        if path in (b"/sized", b"/once"):
            payload = b"echo:" + body
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nx-dup: a\r\nx-dup: b\r\n"
                b"keep-alive: timeout=5, max=100\r\ncontent-length: %d\r\n\r\n"
                % len(payload)
                + payload
            )
            return True
        if path == b"/interim":
            writer.write(b"HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            return True
        if path == b"/eof":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil the end")
            return False
        if path == b"/silent":
            await self.release.wait()
            return False
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n" + _chunk(SSE[0])
        )
        await writer.drain()
        if path == b"/stall":
            await self.release.wait()
            return False
        # /chunked: the rest when released, its framing split at awkward places
        waiting = asyncio.create_task(self.release.wait())
        closed = asyncio.create_task(reader.read(1))
        done, _ = await asyncio.wait({waiting, closed}, return_when=asyncio.FIRST_COMPLETED)
        if closed in done:
            self.peer_closed.set()
            waiting.cancel()
            return False
        closed.cancel()
        rest = b"".join(_chunk(c) for c in SSE[1:]) + b"0\r\n\r\n"
        for i in range(0, len(rest), 7):
            writer.write(rest[i : i + 7])
            await writer.drain()
        return False  # as llama-server does after a streamed answer


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    """The scripted server on a loopback port, in the test's own event loop."""
    up = Upstream()
    server = await asyncio.start_server(up.handle, "127.0.0.1", 0)
    up.port = server.sockets[0].getsockname()[1]
    try:
        yield up
    finally:
        up.release.set()
        server.close()
        for writer in up.writers:  # ends every handler still reading: none outlives the test
            writer.close()
        await asyncio.wait_for(asyncio.gather(*up.handlers, return_exceptions=True), WAIT)


def pool_for(up: Upstream, timeout_s: float = WAIT) -> Http1Pool:
    return Http1Pool(f"http://127.0.0.1:{up.port}", timeout_s=timeout_s, connect_timeout_s=WAIT)


async def test_a_sized_answer_comes_back_whole_with_its_headers(upstream: Upstream) -> None:
    pool = pool_for(upstream)
    resp = await pool.request("POST", "/sized", [("x-client", "yes")], b'{"a": 1}')
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "text/plain"
    assert resp.headers["x-dup"] == "a, b"  # repeated headers joined, as httpx does
    assert await resp.aread() == b'echo:{"a": 1}'
    line, headers, body = upstream.requests[0]
    assert line == b"POST /sized HTTP/1.1"
    assert headers[b"host"] == f"127.0.0.1:{upstream.port}".encode()
    assert headers[b"content-length"] == b"8" and headers[b"x-client"] == b"yes"
    assert body == b'{"a": 1}'
    await pool.aclose()


async def test_a_chunked_answer_is_relayed_chunk_by_chunk_without_its_framing(
    upstream: Upstream,
) -> None:
    pool = pool_for(upstream)
    resp = await pool.request("POST", "/chunked", [], b"{}")
    chunks = resp.aiter_raw()
    first = await anext(chunks)
    assert first == SSE[0]  # before the server sent the rest
    upstream.release.set()
    rest = b"".join([c async for c in chunks])
    assert first + rest == b"".join(SSE)
    await pool.aclose()


async def test_a_body_larger_than_the_read_buffer_arrives_whole_when_read_slowly(
    upstream: Upstream,
) -> None:
    pool = pool_for(upstream)
    resp = await pool.request("GET", "/big", [], b"")
    got = bytearray()
    async for chunk in resp.aiter_raw():
        got += chunk
        await asyncio.sleep(0)  # a consumer that yields between chunks, as a relay does
    assert bytes(got) == bytes(range(256)) * 8192
    again = await pool.request("POST", "/sized", [], b"y")  # and the connection is reusable
    assert await again.aread() == b"echo:y"
    assert upstream.connections == 1
    await pool.aclose()


async def test_a_body_without_length_ends_with_the_connection(upstream: Upstream) -> None:
    pool = pool_for(upstream)
    resp = await pool.request("GET", "/eof", [], b"")
    assert await resp.aread() == b"until the end"
    await pool.aclose()


async def test_a_kept_alive_connection_is_reused_for_the_next_request(upstream: Upstream) -> None:
    pool = pool_for(upstream)
    for i in range(3):
        resp = await pool.request("POST", "/sized", [], str(i).encode())
        assert await resp.aread() == f"echo:{i}".encode()
    assert upstream.connections == 1
    await pool.aclose()


async def test_a_request_on_a_kept_alive_connection_the_server_closed_goes_out_once_more_fresh(
    upstream: Upstream,
) -> None:
    pool = pool_for(upstream)
    answers = []
    for i in range(3):
        resp = await pool.request("POST", "/once", [], str(i).encode())
        answers.append(await resp.aread())
    assert answers == [b"echo:0", b"echo:1", b"echo:2"]
    assert upstream.dropped == 2  # requests 2 and 3 each met a dead connection first
    assert upstream.connections == 3
    await pool.aclose()


async def test_a_fresh_connection_closed_without_an_answer_is_not_retried(
    upstream: Upstream,
) -> None:
    pool = pool_for(upstream)
    with pytest.raises(UpstreamUnavailable, match="closed the connection"):
        await pool.request("POST", "/drop", [], b"{}")
    assert upstream.dropped == 1
    await pool.aclose()


async def test_an_interim_answer_is_refused_rather_than_relayed_as_the_answer(
    upstream: Upstream,
) -> None:
    pool = pool_for(upstream)
    with pytest.raises(UpstreamUnavailable, match="interim"):
        await pool.request("POST", "/interim", [], b"{}")
    await pool.aclose()


def test_the_clients_expect_header_is_not_forwarded() -> None:
    sent = request_headers({"Expect": "100-continue", "Authorization": "Bearer k"})
    assert "Expect" not in sent and sent["Authorization"] == "Bearer k"


async def until(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` until it holds (fail after WAIT seconds)."""
    deadline = asyncio.get_running_loop().time() + WAIT
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def test_a_connection_prepared_before_the_request_is_the_one_it_goes_out_on(
    upstream: Upstream,
) -> None:
    pool = pool_for(upstream)
    pool.prepare()
    await until(lambda: upstream.connections == 1)  # opened before any request was made
    resp = await pool.request("POST", "/chunked", [], b"{}")
    upstream.release.set()
    assert await resp.aread() == b"".join(SSE)
    assert upstream.connections == 1
    await pool.aclose()


async def test_kept_alive_connections_idle_past_their_time_are_closed_by_the_pool(
    upstream: Upstream,
) -> None:
    pool = Http1Pool(
        f"http://127.0.0.1:{upstream.port}", timeout_s=WAIT, connect_timeout_s=WAIT, idle_s=0.2
    )
    # a burst of three at once opens three connections, all kept alive afterwards
    answers = await asyncio.gather(
        *(pool.request("POST", "/sized", [], str(i).encode()) for i in range(3))
    )
    assert [await a.aread() for a in answers] == [b"echo:0", b"echo:1", b"echo:2"]
    assert upstream.connections == 3
    # nobody asks again: the pool closes them by itself (the server sees each one end)
    await until(lambda: len(upstream.handlers) == 3 and all(h.done() for h in upstream.handlers))
    resp = await pool.request("POST", "/sized", [], b"again")  # a fresh one, still served
    assert await resp.aread() == b"echo:again"
    await pool.aclose()


async def test_preparing_a_connection_to_an_upstream_that_is_down_still_reports_it() -> None:
    pool = Http1Pool(f"http://127.0.0.1:{free_port()}", timeout_s=WAIT, connect_timeout_s=WAIT)
    pool.prepare()
    with pytest.raises(UpstreamUnavailable, match="cannot connect"):
        await pool.request("POST", "/sized", [], b"{}")
    await pool.aclose()


async def test_an_upstream_nobody_listens_on_is_unavailable() -> None:
    pool = Http1Pool(f"http://127.0.0.1:{free_port()}", timeout_s=WAIT, connect_timeout_s=WAIT)
    with pytest.raises(UpstreamUnavailable, match="cannot connect"):
        await pool.request("POST", "/sized", [], b"{}")


async def test_an_upstream_that_does_not_answer_in_time_is_a_timeout(upstream: Upstream) -> None:
    pool = pool_for(upstream, timeout_s=0.2)
    with pytest.raises(UpstreamTimeout):
        await pool.request("POST", "/silent", [], b"{}")
    await pool.aclose()


async def test_an_answer_that_falls_silent_mid_body_is_a_timeout(upstream: Upstream) -> None:
    pool = pool_for(upstream, timeout_s=0.2)
    resp = await pool.request("POST", "/stall", [], b"{}")
    chunks = resp.aiter_raw()
    assert await anext(chunks) == SSE[0]
    with pytest.raises(UpstreamTimeout):
        await anext(chunks)
    await resp.aclose()
    await pool.aclose()


async def test_closing_an_answer_before_its_end_closes_the_upstream_connection(
    upstream: Upstream,
) -> None:
    pool = pool_for(upstream)
    resp = await pool.request("POST", "/chunked", [], b"{}")
    assert await anext(resp.aiter_raw()) == SSE[0]
    await resp.aclose()  # the client went away
    await asyncio.wait_for(upstream.peer_closed.wait(), WAIT)
    # and the next request does not try to reuse it
    again = await pool.request("POST", "/sized", [], b"x")
    assert await again.aread() == b"echo:x"
    assert upstream.connections == 2
    await pool.aclose()
