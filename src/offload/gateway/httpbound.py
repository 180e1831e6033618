"""Streamable HTTP upstreams, each message they send bounded.

The SDK's client reads a JSON answer whole (``aread``), however long, and bounds a
server-sent event only by the size it is given (1 MiB unless told: a larger tool answer
failed as a lost connection). Here the client it is given reads through
:class:`BoundedTransport`: a body that is not an event stream is cut past the bound with
:class:`MessageTooLarge` (a declared length past it before a byte is read), which the SDK
answers the request with; an event stream is passed on, the SDK bounding each event to
the same size. A compressed body (gzip, deflate) is inflated here in pieces of at most
1 MiB and bounded after inflating, so a small body cannot unpack past the bound.

The SDK listens for an upstream's notifications (its tool list changed, …) on a GET event
stream; once it has failed twice in a row (an event past the bound, a broken connection,
an error status) the SDK stops listening for the rest of the session, silently.
:class:`NotificationWatch` sees those GETs here and says when that happened, so the
connection can be made again (an upstream that never opened one, answering 405 as the
spec allows, is not watched).
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager

import httpx2
from mcp.client._transport import TransportStreams
from mcp.client.streamable_http import MAX_RECONNECTION_ATTEMPTS, streamable_http_client

from offload.core.http.sse import EventBound
from offload.gateway.oversize import too_large

#: The most bytes inflated from one piece of a compressed body at a time.
_PIECE = 1 << 20
_WBITS = {"gzip": 31, "x-gzip": 31, "deflate": 47}  # deflate: zlib's header (or gzip's)
#: What a connection may wait: to connect and send, and between bytes of an answer (an
#: event stream stays open between events), as the SDK's own client has it.
_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


class MessageTooLarge(httpx2.StreamError):
    """An upstream's answer passed the bound (or came in an encoding we cannot bound)."""


class NotificationWatch:
    """The notification streams (GETs) of one connection as they open and end: once one
    has opened, :data:`MAX_RECONNECTION_ATTEMPTS` failures in a row (the SDK's count, after
    which it stops listening) call ``on_dead`` once with why the last one failed."""

    def __init__(self, on_dead: Callable[[str], None], limit: int) -> None:
        self.on_dead = on_dead
        self.limit = limit
        self.opened = False
        self.failures = 0
        self.dead = False

    def failed(self, why: str) -> None:
        """One notification stream failed (or could not be opened)."""
        if not self.opened or self.dead:
            return
        self.failures += 1
        if self.failures >= MAX_RECONNECTION_ATTEMPTS:
            self.dead = True
            self.on_dead(f"{why} ({self.failures} times in a row)")

    def ended(self) -> None:
        """One notification stream ended as a stream may (the SDK opens the next)."""
        self.failures = 0


class _Bounded(httpx2.AsyncByteStream):
    def __init__(
        self,
        inner: httpx2.AsyncByteStream,
        limit: int | None,
        declared: int,
        wbits: int | None,
        watch: NotificationWatch | None = None,
    ) -> None:
        self.inner = inner
        self.limit = limit  # None: an event stream, bounded event by event by the SDK
        self.declared = declared
        self.inflate = None if wbits is None else zlib.decompressobj(wbits)
        self.watch = watch  # a notification stream: how it ends is told here
        self.open_event = EventBound()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.limit is not None and self.declared > self.limit:
            await self.inner.aclose()  # refused before a byte is read
            raise MessageTooLarge(too_large(self.declared, self.limit))
        size = 0
        try:
            async for raw in self.inner:
                for piece in self._pieces(raw):
                    size += len(piece)
                    if self.limit is not None and size > self.limit:
                        await self.inner.aclose()
                        raise MessageTooLarge(too_large(self.limit, self.limit, more=True))
                    if self.watch is not None:
                        self.open_event.feed(piece)
                    yield piece
        except Exception as exc:
            self._told(f"it broke off ({type(exc).__name__})")
            raise
        self._told("")

    def _told(self, why: str) -> None:
        """Tell the watch how a notification stream ended (once): ``why`` it failed, or
        nothing when it ended as a stream may."""
        watch, self.watch = self.watch, None
        if watch is None:
            return
        if why:
            watch.failed(why)
        else:
            watch.ended()

    def _pieces(self, raw: bytes) -> Iterator[bytes]:
        if self.inflate is None:
            yield raw
            return
        try:
            yield self.inflate.decompress(raw, _PIECE)
            while self.inflate.unconsumed_tail:
                yield self.inflate.decompress(self.inflate.unconsumed_tail, _PIECE)
        except zlib.error as exc:
            raise MessageTooLarge(f"its compressed answer could not be inflated: {exc}") from exc

    async def aclose(self) -> None:
        if self.watch is not None:  # closed by its reader before its end
            limit = self.watch.limit
            if self.open_event.pending > limit:
                self._told(
                    f"it sent an event past {limit} bytes ([gateway] max_upstream_message_mb)"
                )
            else:
                self._told("it was closed before its end")
        await self.inner.aclose()


class BoundedTransport(httpx2.AsyncBaseTransport):
    """``inner`` with every answer's body bounded to ``limit`` bytes (an event stream's
    events are bounded by the SDK): past it, reading raises :class:`MessageTooLarge`.
    With ``watch``, the notification streams (GETs) are told to it."""

    def __init__(
        self,
        inner: httpx2.AsyncBaseTransport,
        limit: int,
        watch: NotificationWatch | None = None,
    ) -> None:
        self.inner = inner
        self.limit = limit
        self.watch = watch

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        watch = self.watch if request.method == "GET" else None
        try:
            response = await self.inner.handle_async_request(request)
        except Exception as exc:
            if watch is not None:
                watch.failed(f"it could not be reached ({type(exc).__name__})")
            raise
        headers = response.headers
        media = headers.get("content-type", "").partition(";")[0].strip().lower()
        if watch is not None:
            if not 200 <= response.status_code < 300 or media != "text/event-stream":
                watch.failed(f"it answered HTTP {response.status_code} {media or ''}".rstrip())
                watch = None
            else:
                watch.opened = True
        coding = headers.get("content-encoding", "identity").strip().lower()
        if coding not in ("identity", "", *_WBITS):
            await response.aclose()
            raise MessageTooLarge(
                f"it answered in Content-Encoding {coding[:40]!r}, which the gateway does "
                "not read (it asks for gzip or deflate)"
            )
        declared = headers.get("content-length", "")
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        response.stream = _Bounded(
            stream,
            None if media == "text/event-stream" else self.limit,
            int(declared) if declared.isdigit() and coding in ("identity", "") else 0,
            _WBITS.get(coding),
            watch,
        )
        headers.pop("content-encoding", None)  # inflated here: not again
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def http_upstream(
    url: str,
    headers: Mapping[str, str],
    limit: int,
    on_stream_dead: Callable[[str], None] | None = None,
) -> AsyncIterator[TransportStreams]:
    """The SDK's Streamable HTTP transport to ``url``, each message bounded to ``limit``
    bytes; its HTTP client closed with it. ``on_stream_dead(why)`` is called once when the
    SDK has stopped listening for the upstream's notifications (see the module's doc)."""
    watch = None if on_stream_dead is None else NotificationWatch(on_stream_dead, limit)
    client = httpx2.AsyncClient(
        headers={**headers, "Accept-Encoding": "gzip, deflate"},
        timeout=_TIMEOUT,
        transport=BoundedTransport(httpx2.AsyncHTTPTransport(), limit, watch),
    )
    async with (
        client,
        streamable_http_client(url, http_client=client, max_sse_event_size=limit) as streams,
    ):
        yield streams
