"""Streamable HTTP upstreams, each message they send bounded.

The SDK's client reads a JSON answer whole (``aread``), however long, and bounds a
server-sent event only by the size it is given (1 MiB unless told: a larger tool answer
failed as a lost connection). Here the client it is given reads through
:class:`BoundedTransport`: a body that is not an event stream is cut past the bound with
:class:`MessageTooLarge` (a declared length past it before a byte is read), which the SDK
answers the request with; an event stream is passed on, the SDK bounding each event to
the same size. A compressed body (gzip, deflate) is inflated here in pieces of at most
1 MiB and bounded after inflating, so a small body cannot unpack past the bound.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager

import httpx2
from mcp.client._transport import TransportStreams
from mcp.client.streamable_http import streamable_http_client

from offload.gateway.oversize import too_large

#: The most bytes inflated from one piece of a compressed body at a time.
_PIECE = 1 << 20
_WBITS = {"gzip": 31, "x-gzip": 31, "deflate": 47}  # deflate: zlib's header (or gzip's)
#: What a connection may wait: to connect and send, and between bytes of an answer (an
#: event stream stays open between events), as the SDK's own client has it.
_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


class MessageTooLarge(httpx2.StreamError):
    """An upstream's answer passed the bound (or came in an encoding we cannot bound)."""


class _Bounded(httpx2.AsyncByteStream):
    def __init__(
        self, inner: httpx2.AsyncByteStream, limit: int | None, declared: int, wbits: int | None
    ) -> None:
        self.inner = inner
        self.limit = limit  # None: an event stream, bounded event by event by the SDK
        self.declared = declared
        self.inflate = None if wbits is None else zlib.decompressobj(wbits)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.limit is not None and self.declared > self.limit:
            await self.inner.aclose()  # refused before a byte is read
            raise MessageTooLarge(too_large(self.declared, self.limit))
        size = 0
        async for raw in self.inner:
            for piece in self._pieces(raw):
                size += len(piece)
                if self.limit is not None and size > self.limit:
                    await self.inner.aclose()
                    raise MessageTooLarge(too_large(self.limit, self.limit, more=True))
                yield piece

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
        await self.inner.aclose()


class BoundedTransport(httpx2.AsyncBaseTransport):
    """``inner`` with every answer's body bounded to ``limit`` bytes (an event stream's
    events are bounded by the SDK): past it, reading raises :class:`MessageTooLarge`."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int) -> None:
        self.inner = inner
        self.limit = limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        headers = response.headers
        media = headers.get("content-type", "").partition(";")[0].strip().lower()
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
        )
        headers.pop("content-encoding", None)  # inflated here: not again
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def http_upstream(
    url: str, headers: Mapping[str, str], limit: int
) -> AsyncIterator[TransportStreams]:
    """The SDK's Streamable HTTP transport to ``url``, each message bounded to ``limit``
    bytes; its HTTP client closed with it."""
    client = httpx2.AsyncClient(
        headers={**headers, "Accept-Encoding": "gzip, deflate"},
        timeout=_TIMEOUT,
        transport=BoundedTransport(httpx2.AsyncHTTPTransport(), limit),
    )
    async with (
        client,
        streamable_http_client(url, http_client=client, max_sse_event_size=limit) as streams,
    ):
        yield streams
