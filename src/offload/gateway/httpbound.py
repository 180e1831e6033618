"""Streamable HTTP upstreams, each message they send bounded.

The SDK's client reads a JSON answer whole (``aread``), however long, and bounds a
server-sent event only by the size it is given (1 MiB unless told: a larger tool answer
failed as a lost connection). Here the client it is given reads through
:class:`BoundedTransport`: a body that is not an event stream is cut past the bound with
:class:`MessageTooLarge` (a declared length past it before a byte is read), which the SDK
answers the request with; an event stream is passed on, the SDK bounding each event to
the same size. A compressed body (gzip, deflate) is inflated here in pieces of at most
1 MiB and bounded after inflating, so a small body cannot unpack past the bound; a gzip
body of several members is read member after member, bounded as one.

The SDK listens for an upstream's notifications (its tool list changed, …) on a GET event
stream; once it has failed twice in a row (an event past the bound, a broken connection,
an error status), or once when it is redirected where the SDK does not follow, the SDK
stops listening for the rest of the session, silently. :class:`NotificationWatch` sees
those GETs here and says when that happened, so the connection can be made again (an
upstream that never opened one, answering 405 as the spec allows, is not watched). The
SDK's other GETs, which resume a request's broken answer stream, carry a ``Last-Event-ID``
of that answer's events: the watch tells them apart by the last event id the
notification streams gave, as the SDK sends it back, and leaves them out of its count.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager

import httpx2
from mcp.client._transport import TransportStreams
from mcp.client.streamable_http import (
    LAST_EVENT_ID,
    MAX_RECONNECTION_ATTEMPTS,
    streamable_http_client,
)

from offload.core.http.sse import EventBound
from offload.gateway.oversize import too_large

#: The most bytes inflated from one piece of a compressed body at a time.
_PIECE = 1 << 20
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_WBITS = {"gzip": 31, "x-gzip": 31, "deflate": 47}  # deflate: zlib's header (or gzip's)
#: What a connection may wait: to connect and send, and between bytes of an answer (an
#: event stream stays open between events), as the SDK's own client has it.
_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


class MessageTooLarge(httpx2.StreamError):
    """An upstream's answer passed the bound (or came in an encoding we cannot bound)."""


class NotificationWatch:
    """The notification streams (GETs) of one connection as they open and end: once one
    has opened, :data:`MAX_RECONNECTION_ATTEMPTS` failures in a row (the SDK's count, after
    which it stops listening), or one redirect the SDK does not follow, call ``on_dead``
    once with why the last one failed."""

    def __init__(self, on_dead: Callable[[str], None], limit: int, max_redirects: int = 20) -> None:
        self.on_dead = on_dead
        self.limit = limit
        self.max_redirects = max_redirects  # the client's: past it the SDK follows none
        self.opened = False
        self.failures = 0
        self.redirects = 0  # followed in a row
        self.dead = False
        self.ids = EventIds()  # of the notification streams, as the SDK last saw them

    def listens(self, request: httpx2.Request) -> bool:
        """Whether a GET is the SDK's notification stream: one without ``Last-Event-ID``,
        or with the last one the notification streams gave (a GET resuming a request's
        answer stream carries an id of that answer's)."""
        sent = request.headers.get(LAST_EVENT_ID)
        return sent is None or self.ids.gave(sent)

    def failed(self, why: str) -> None:
        """One notification stream failed (or could not be opened)."""
        if not self.opened or self.dead:
            return
        self.failures += 1
        if self.failures >= MAX_RECONNECTION_ATTEMPTS:
            self._dead(f"{why} ({self.failures} times in a row)")
        else:
            self._unsendable()

    def ended(self) -> None:
        """One notification stream ended as a stream may (the SDK opens the next)."""
        self.failures = 0
        self._unsendable()

    def redirected(self, request: httpx2.Request, response: httpx2.Response) -> bool:
        """A redirect answered the notification stream: True when the SDK follows it (the
        next GET tells how the stream fares), else the SDK stops listening at once."""
        location = response.headers.get("location", "")
        try:
            target = request.url.join(location)
        except httpx2.InvalidURL:
            self.failed(f"it redirected to a location that is no URL ({location[:80]!r})")
            return False
        if follows(request.url, target) and self.redirects < self.max_redirects:
            self.redirects += 1
            return True
        shown = target.copy_with(userinfo=b"", query=None, fragment=None)
        if self.opened and not self.dead:
            self._dead(
                f"it answered HTTP {response.status_code}, a redirect to {shown} the "
                "MCP SDK does not follow"
            )
        return False

    def _unsendable(self) -> None:
        # the SDK sends the last id back in a header, which takes ASCII alone: it fails to
        # build every GET after, before any reaches the upstream
        if self.opened and not self.dead and not self.ids.sendable():
            self._dead("its last event id is not ASCII, which the MCP SDK cannot send back")

    def _dead(self, why: str) -> None:
        self.dead = True
        self.on_dead(why)


#: The longest event id told apart from others; longer ones are all alike.
_MOST_ID = 64 * 1024


class EventIds:
    """The last event id a stream of server-sent events gave, as an SSE reader (the SDK's)
    keeps it: an ``id`` field without NUL sets it, the next blank line dispatches it, an
    empty one is not kept. Fed bytes as they come, in pieces: linear in them, a line held
    only while it may be an id field, and only its first :data:`_MOST_ID` bytes."""

    def __init__(self) -> None:
        self.last: str | None = ""  # dispatched last ("": none yet; None: one too long)
        self._field: str | None = ""  # the id field seen last
        self._line = bytearray()
        self._state = "open"  # the line so far: "open", "other" (no id field), "long"
        self._after_cr = False

    def gave(self, sent: str) -> bool:
        """Whether ``sent`` is the last id given (past :data:`_MOST_ID`: any as long)."""
        if self.last is None:
            return len(sent) > _MOST_ID
        return bool(self.last) and sent == self.last

    def sendable(self) -> bool:
        """Whether the last id can travel in a header (ASCII)."""
        return self.last is None or self.last.isascii()

    def feed(self, piece: bytes) -> None:
        """Read the lines ``piece`` ends, and keep what it leaves open."""
        if not piece:
            return
        start = 0
        if self._after_cr and piece[:1] == b"\n":
            start = 1  # the LF of a CRLF split between pieces
        self._after_cr = False
        size = len(piece)
        cr = lf = -1  # the next CR and LF at or after start (each searched for once)
        while start <= size:
            if 0 <= cr < start or cr == -1:
                cr = piece.find(b"\r", start)
                cr = size if cr < 0 else cr
            if 0 <= lf < start or lf == -1:
                lf = piece.find(b"\n", start)
                lf = size if lf < 0 else lf
            end = min(cr, lf)
            self._take(piece, start, end)
            if end == size:
                return
            self._line_ended()
            if piece[end] == 0x0D:  # CR
                if end + 1 == size:
                    self._after_cr = True
                elif piece[end + 1] == 0x0A:
                    end += 1
            start = end + 1

    def close(self, whole: bool) -> None:
        """The stream ended (``whole``: at its end, else broken off); the next starts
        afresh. The SDK's reader ends a stream whose last byte is a CR with a blank line,
        which dispatches an id still pending."""
        if whole and self._after_cr:
            self._line_ended()
        self._line.clear()
        self._state = "open"
        self._after_cr = False

    def _take(self, piece: bytes, start: int, end: int) -> None:
        if self._state != "open" or start >= end:
            return
        self._line += piece[start : min(end, start + _MOST_ID + 4 - len(self._line))]
        if not (b"id:".startswith(self._line[:3]) or self._line.startswith(b"id")):
            self._state = "other"
        elif len(self._line) > _MOST_ID + 3:
            self._state = "long" if self._line.startswith(b"id:") else "other"

    def _line_ended(self) -> None:
        line, state = bytes(self._line), self._state
        self._line.clear()
        self._state = "open"
        if state == "long":
            self._field = None
        elif state == "other":
            return
        elif not line:
            if self._field != "":
                self.last = self._field  # dispatched with its event
        else:
            name, _, value = line.partition(b":")
            if name == b"id" and b"\0" not in value:
                value = value[1:] if value.startswith(b" ") else value
                self._field = value.decode("utf-8", "replace")


def follows(sent: httpx2.URL, target: httpx2.URL) -> bool:
    """Whether the MCP SDK follows a redirect of a GET from ``sent`` to ``target``: on
    the same origin (scheme, host, port; or http to https on one host, default ports),
    without userinfo of its own (as its client documents)."""
    if target.userinfo and target.userinfo != sent.userinfo:
        return False
    if (sent.scheme, sent.host, sent.port) == (target.scheme, target.host, target.port):
        return True
    return (
        sent.host == target.host
        and (sent.scheme, target.scheme) == ("http", "https")
        and sent.port is None
        and target.port is None
    )


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
        self.wbits = wbits
        self.inflate = None if wbits is None else zlib.decompressobj(wbits)
        self.started = False  # the current compressed stream (a gzip member) has begun
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
                        self.watch.ids.feed(piece)
                    yield piece
            self._ended()
        except Exception as exc:
            self._told(f"it broke off ({type(exc).__name__})")
            raise
        self._told("")

    def _ended(self) -> None:
        """The body has ended: a compressed stream (a gzip member) begun and not ended
        (cut off, or without its trailer, the check of what was inflated) is refused."""
        if self.inflate is not None and self.started and not self.inflate.eof:
            raise MessageTooLarge(
                "its compressed answer was cut off: the body ended inside a "
                f"{'gzip member' if self.wbits == _WBITS['gzip'] else 'deflate stream'}, "
                "before the end and check of its data"
            )

    def _told(self, why: str) -> None:
        """Tell the watch how a notification stream ended (once): ``why`` it failed, or
        nothing when it ended as a stream may."""
        watch, self.watch = self.watch, None
        if watch is None:
            return
        watch.ids.close(whole=not why)
        if why:
            watch.failed(why)
        else:
            watch.ended()

    def _pieces(self, raw: bytes) -> Iterator[bytes]:
        if self.inflate is None:
            yield raw
            return
        try:
            while raw:  # gzip: each member in turn (RFC 1952 lets them follow one another)
                if self.inflate.eof:
                    if self.wbits != _WBITS["gzip"]:
                        return  # deflate: one stream, what follows its end is not read
                    self.inflate = zlib.decompressobj(self.wbits)
                self.started = True
                yield self.inflate.decompress(raw, _PIECE)
                while self.inflate.unconsumed_tail:
                    yield self.inflate.decompress(self.inflate.unconsumed_tail, _PIECE)
                raw = self.inflate.unused_data  # past a member's end: the next one's start
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
        watch = self.watch
        if watch is not None and (request.method != "GET" or not watch.listens(request)):
            watch = None  # only the notification stream is watched
        try:
            response = await self.inner.handle_async_request(request)
        except Exception as exc:
            if watch is not None:
                watch.failed(f"it could not be reached ({type(exc).__name__})")
            raise
        headers = response.headers
        media = headers.get("content-type", "").partition(";")[0].strip().lower()
        if watch is not None:
            if response.status_code in _REDIRECTS and "location" in headers:
                watch.redirected(request, response)  # the next GET, if any, tells
                watch = None
            elif not 200 <= response.status_code < 300 or media != "text/event-stream":
                watch.redirects = 0
                watch.failed(f"it answered HTTP {response.status_code} {media or ''}".rstrip())
                watch = None
            else:
                watch.opened = True
                watch.redirects = 0
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
    if watch is not None:
        watch.max_redirects = client.max_redirects
    async with (
        client,
        streamable_http_client(url, http_client=client, max_sse_event_size=limit) as streams,
    ):
        yield streams
