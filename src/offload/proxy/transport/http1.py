"""A lean HTTP/1.1 client for the proxy's chat-completions hop: asyncio transports and
httptools' response parser.

The hop to the model server sits on every request's time to first byte. Measured side by
side with httpx (``sniffio`` installed) by ``bench/bench_upstream_client.py`` on 2026-12-06
(2-core AMD EPYC VM, load 12, three runs of 1,000 pairs): this client saves 0.92-1.40 ms a
streamed request (median of the pairs; 0.21-0.28 against 1.18-1.67 ms of CPU) and
0.54-0.85 ms a kept-alive plain one, above the 0.5 ms a request that justifies keeping it
(``docs/benchmarks/proxy.md``). It does one thing: send a request whose body is already in
memory and hand back the response body as it arrives.

- Connections are kept alive and reused when the upstream allows it. llama-server closes
  its connection after every streamed answer while advertising keep-alive, so a request
  can meet a connection that died under it: one that fails before any byte of an answer
  on a reused connection is sent once more, on a fresh one.
- :meth:`Http1Pool.prepare` opens a connection as a request arrives, so the connect
  overlaps the proxy's own work instead of following it.
- The body comes out transfer-decoded (chunked framing removed), content-encoded bytes
  untouched, as httpx's ``aiter_raw`` gave them.
- Errors are :class:`~offload.errors.UpstreamUnavailable` (cannot connect, broken answer)
  and :class:`~offload.errors.UpstreamTimeout` (connect, or a wait for the next bytes,
  longer than the timeout).
- Closing a response before its end closes the connection: that is what makes
  llama-server stop generating for a client that went away.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import cast
from urllib.parse import urlsplit

import httptools

from offload.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable

# Above this much unread body the socket stops being read (the client is slower than the
# upstream); reading resumes once the relay has taken it.
_HIGH_WATER = 1 << 18
# an idle kept-alive connection is closed after this long: the pool shrinks back after a
# burst, and a connection the upstream dropped is not kept (llama-server's own keep-alive
# timeout is 5 s; a connection it closed is seen closed here and dropped at the next look)
IDLE_S = 15.0


class _Exchange:
    """The state of one request/response on a connection (httptools calls back into it)."""

    def __init__(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False
        self.heads = 0  # more than one: an interim (1xx) answer came first
        self.until_eof = False  # no length and not chunked: the body ends with the connection
        self.keep_alive = False  # the upstream lets the connection carry another request
        self.complete = False
        self.got_bytes = False  # any byte of an answer arrived
        self.error: BaseException | None = None
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0

    # httptools callbacks (names fixed by httptools)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.head_done = True
        self.heads += 1

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)

    def on_message_complete(self) -> None:
        self.complete = True


class _Connection(asyncio.Protocol):
    """One upstream connection; at most one exchange at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self.paused = False
        self.idle_since = 0.0  # the loop's time it last went back to the pool
        self.exchange = _Exchange()
        self._parser = httptools.HttpResponseParser(self.exchange)
        self._waiter: asyncio.Future[None] | None = None

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses but have its methods
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        ex = self.exchange
        ex.got_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            ex.error = UpstreamUnavailable(f"malformed answer from the upstream: {exc}")
            self.close()
        if ex.head_done and not ex.status:
            self._on_head()
        if ex.buffered > _HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        ex = self.exchange
        if ex.head_done and ex.until_eof and exc is None:
            ex.complete = True
        elif not ex.complete and ex.error is None:
            what = "closed the connection" if exc is None else f"broke the connection ({exc})"
            ex.error = UpstreamUnavailable(f"the upstream {what} before the answer was complete")
        self._wake()

    # the exchange

    def _on_head(self) -> None:
        ex = self.exchange
        ex.status = self._parser.get_status_code()
        if ex.status < 200 or ex.heads > 1:
            # never asked for (no Expect is sent); model servers do not send Early Hints
            ex.error = UpstreamUnavailable("unexpected interim (1xx) answer from the upstream")
            self.close()
            return
        names = {name.lower() for name, _ in ex.headers}
        no_body = ex.status in (204, 304)
        ex.until_eof = not no_body and not names & {b"content-length", b"transfer-encoding"}
        # decided here, not by the parser: its should_keep_alive() reads False once the
        # message is complete, which it may already be (a small answer in one packet)
        tokens = {
            token.strip().lower()
            for name, value in ex.headers
            if name.lower() == b"connection"
            for token in value.split(b",")
        }
        if self._parser.get_http_version() == "1.1":
            ex.keep_alive = b"close" not in tokens
        else:
            ex.keep_alive = b"keep-alive" in tokens

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self, timeout: float) -> None:
        """Until the parser has more to say (or the connection ends), at most ``timeout``."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            raise UpstreamTimeout(f"the upstream sent nothing for {timeout:g} s") from None
        finally:
            self._waiter = None

    def start(self, request: bytes) -> None:
        """Send ``request`` (a whole HTTP/1.1 request) as the connection's next exchange."""
        self.exchange = _Exchange()
        self._parser = httptools.HttpResponseParser(self.exchange)
        assert self.transport is not None
        self.transport.write(request)

    async def head(self, timeout: float) -> _Exchange:
        """The exchange once the status and headers arrived."""
        ex = self.exchange
        while not ex.status or ex.error is not None:
            if ex.error is not None:
                raise ex.error
            await self._wait(timeout)
        return ex

    async def next_chunk(self, timeout: float) -> bytes | None:
        """The next piece of the body; None at its end."""
        ex = self.exchange
        while not ex.chunks:
            if ex.complete:
                return None
            if ex.error is not None:
                raise ex.error
            await self._wait(timeout)
        chunk = ex.chunks.popleft()
        ex.buffered -= len(chunk)
        if self.paused and ex.buffered <= _HIGH_WATER // 2 and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return chunk

    def reusable(self) -> bool:
        """True when the exchange ended cleanly and the upstream keeps the connection."""
        return (
            not self.closed
            and self.exchange.complete
            and self.exchange.error is None
            and not self.exchange.until_eof
            and self.exchange.keep_alive
        )

    def close(self) -> None:
        """Close the connection (the upstream sees the client leave)."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Http1Response:
    """An upstream answer whose body has not been read yet."""

    def __init__(self, pool: Http1Pool, conn: _Connection, exchange: _Exchange) -> None:
        self._pool = pool
        self._conn: _Connection | None = conn
        self.status_code = exchange.status
        self.raw_headers = exchange.headers

    @property
    def headers(self) -> dict[str, str]:
        """The headers (names lower-cased; repeated ones joined with ", ", as httpx does)."""
        out: dict[str, str] = {}
        for raw_name, raw_value in self.raw_headers:
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            out[name] = f"{out[name]}, {value}" if name in out else value
        return out

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives (transfer-decoded); the connection is released at its end.

        Raises :class:`UpstreamUnavailable` if the upstream breaks off and
        :class:`UpstreamTimeout` if it falls silent for longer than the timeout.
        """
        conn = self._conn
        if conn is None:
            return
        while (chunk := await conn.next_chunk(self._pool.timeout_s)) is not None:
            yield chunk
        self._conn = None
        self._pool.release(conn)

    async def aread(self) -> bytes:
        """The whole body."""
        return b"".join([chunk async for chunk in self.aiter_raw()])

    async def aclose(self) -> None:
        """Give the connection back, or close it when the body was not read to its end."""
        conn, self._conn = self._conn, None
        if conn is not None:
            if conn.exchange.complete:
                self._pool.release(conn)
            else:
                conn.close()


class Http1Pool:
    """Kept-alive connections to one plain-HTTP upstream origin (``http://host:port``).

    TLS upstreams (remote providers, where a millisecond does not matter) stay on httpx,
    which also brings certificate bundles and environment proxies.
    """

    def __init__(
        self,
        origin: str,
        *,
        timeout_s: float,
        connect_timeout_s: float,
        max_idle: int = 128,
        idle_s: float = IDLE_S,
    ) -> None:
        parts = urlsplit(origin)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"not an http:// origin: {origin!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        self._host_header = (host if self.port == 80 else f"{host}:{self.port}").encode("latin-1")
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._max_idle = max_idle
        self._idle: collections.deque[_Connection] = collections.deque()
        self._opening: asyncio.Task[None] | None = None
        self._idle_s = idle_s
        self._expiry: asyncio.TimerHandle | None = None

    def prepare(self) -> None:
        """Start opening a connection now unless one is idle or already being opened.

        Called as a request arrives, the connect overlaps the work before the request is
        sent (parsing, the rewrite); llama-server closes its connection after every stream,
        so each streamed request needs a new one. An opened connection nobody takes waits
        in the pool like any idle one.
        """
        if self._opening is None and not self._has_idle():
            self._opening = asyncio.get_running_loop().create_task(self._open_idle())

    async def _open_idle(self) -> None:
        try:
            conn = await self._connect()
        except UpstreamError:
            return  # the request connects itself and reports what is wrong
        finally:
            self._opening = None
        self._park(conn)

    async def request(
        self, method: str, target: str, headers: Iterable[tuple[str, str]], body: bytes
    ) -> Http1Response:
        """Send a request and return once the upstream's status and headers arrived.

        ``target`` is the path (and query); ``host`` and ``content-length`` are set here.
        Not for ``HEAD``: the parser would wait for the body a ``content-length`` announces.
        A reused connection that fails before any byte of an answer is replaced by a fresh
        one and the request sent once more.
        """
        raw = self._encode(method, target, headers, body)
        if self._opening is not None and not self._has_idle():
            # a connect is under way (prepare): wait for it rather than start another; if
            # this request is cancelled meanwhile, the connection still lands in the pool
            await asyncio.shield(self._opening)
        conn = self._take_idle()
        if conn is not None:
            try:
                return await self._exchange(conn, raw)
            except UpstreamUnavailable:
                if conn.exchange.got_bytes:
                    raise
        return await self._exchange(await self._connect(), raw)

    def release(self, conn: _Connection) -> None:
        """Keep a connection whose exchange ended for the next request (or close it)."""
        if conn.reusable() and len(self._idle) < self._max_idle:
            conn.reused = True
            self._park(conn)
        else:
            conn.close()

    def _park(self, conn: _Connection) -> None:
        """Put ``conn`` in the pool; it is closed if it idles there ``idle_s``."""
        loop = asyncio.get_running_loop()
        conn.idle_since = loop.time()
        self._idle.append(conn)
        if self._expiry is None:
            self._expiry = loop.call_later(self._idle_s, self._expire)

    def _expire(self) -> None:
        """Close the connections idle for ``idle_s`` (and drop those the upstream closed):
        after a burst of concurrent requests the pool shrinks back by itself."""
        self._expiry = None
        loop = asyncio.get_running_loop()
        cutoff = loop.time() - self._idle_s
        kept: collections.deque[_Connection] = collections.deque()
        for conn in self._idle:
            if conn.closed:
                continue
            if conn.idle_since <= cutoff:
                conn.close()
            else:
                kept.append(conn)
        self._idle = kept
        if kept:
            wait = kept[0].idle_since + self._idle_s - loop.time()
            self._expiry = loop.call_later(max(wait, 0.05), self._expire)

    async def aclose(self) -> None:
        """Close the idle connections (and stop opening one)."""
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        if self._opening is not None:
            self._opening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._opening
        while self._idle:
            self._idle.popleft().close()

    def _has_idle(self) -> bool:
        return any(not conn.closed for conn in self._idle)

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()  # the most recent: least likely to have timed out
            if not conn.closed:
                return conn
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(_Connection, self.host, self.port)
        except TimeoutError:
            raise UpstreamTimeout(
                f"cannot connect to {self.host}:{self.port} within {self.connect_timeout_s:g} s"
            ) from None
        except OSError as exc:
            raise UpstreamUnavailable(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        return conn

    async def _exchange(self, conn: _Connection, raw: bytes) -> Http1Response:
        conn.start(raw)
        try:
            ex = await conn.head(self.timeout_s)
        except BaseException:
            conn.close()  # a half-done exchange leaves the connection unusable
            raise
        return Http1Response(self, conn, ex)

    def _encode(
        self, method: str, target: str, headers: Iterable[tuple[str, str]], body: bytes
    ) -> bytes:
        lines = [
            f"{method} {target} HTTP/1.1\r\n".encode("latin-1"),
            b"host: ",
            self._host_header,
            b"\r\ncontent-length: ",
            str(len(body)).encode(),
            b"\r\n",
        ]
        for name, value in headers:
            lines.append(f"{name}: {value}\r\n".encode("latin-1"))
        lines.append(b"\r\n")
        lines.append(body)
        return b"".join(lines)
