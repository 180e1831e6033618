"""Bounds on what a connection may hold before its request reaches an app, which uvicorn's
httptools protocol leaves open: the time and the size of a request's headers, and the
number of connections served at once.

- **Time**: uvicorn closes a connection idle after a response (``timeout_keep_alive``), but
  a client that connects and sends part of a request line or its headers, then nothing
  (slowloris), holds its connection for ever: the request never reaches the app, so the
  body deadline (``http.body_timeout_s``) never starts. A timer runs from the connection's
  start, and from each later request's first byte, to the end of that request's headers;
  past ``http.header_timeout_s`` the client gets 408 and the connection is closed.
- **Size**: httptools (llhttp) puts no bound on a request's line and headers, and uvicorn
  keeps every header line it is given: a client sending header lines without end, each in
  time, grew the server's memory without bound. Past ``http.max_header_kb`` the client gets
  431 and the connection is closed. Two counts see it: the bytes of the URL and the header
  lines as the parser hands them over (a whole head in one read), and the bytes read while
  a head is still open (one endless line, which httptools holds in its own buffer until it
  ends). So a connection holds at most the limit and one read (256 KiB) of head.
- **Connections**: past ``http.max_connections`` connections (or as many requests in
  progress), a request is marked in its ASGI scope (:data:`~offload.core.http.bodylimit.OVER_CAPACITY`)
  and every surface's :class:`~offload.core.http.bodylimit.BodyLimit` answers it 503 in the
  route's own shape, closing the connection. uvicorn's own ``limit_concurrency`` answers
  in plain text, and counts the connection asking (so allows one fewer than it says).

The 408 and 431 come before any route is known, so they are plain text. A refusal due while
an earlier answer on the connection is still being sent waits for that answer to end (it
would cut into it), reading nothing more meanwhile.

It subclasses uvicorn's protocol (its connection and parser callbacks), so a uvicorn
upgrade is checked by tests/cli/test_headers_deadline.py. Every command that starts uvicorn
passes :func:`bounded_http` as uvicorn's ``http`` protocol.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from offload.config import HttpSettings
from offload.core.http.bodylimit import OVER_CAPACITY


def _plain(status: bytes, reason: bytes) -> bytes:
    return (
        b"HTTP/1.1 %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (status, len(reason), reason)
    )


#: The answer to a client whose headers did not arrive in time (before any route is known,
#: so in no surface's own shape: plain text).
TIMED_OUT = _plain(
    b"408 Request Timeout", b"request headers too slow: raise http.header_timeout_s to wait longer"
)


def too_large(limit_kb: int) -> bytes:
    """The answer to a client whose request line and headers passed the limit."""
    return _plain(
        b"431 Request Header Fields Too Large",
        b"request headers too large: the limit is %d KiB; raise http.max_header_kb to "
        b"accept more" % limit_kb,
    )


def over_capacity_message(open_now: int, limit: int) -> str:
    """Why a request past the connection limit was refused."""
    return (
        f"server busy: {open_now} connections or requests in progress, the limit is "
        f"{limit} (http.max_connections); try again shortly, or raise http.max_connections"
    )


@dataclass(frozen=True)
class Limits:
    """What :class:`BoundedHttp` bounds, from ``HttpSettings``."""

    header_timeout_s: float
    head_bytes: int
    max_connections: int
    answer_431: bytes

    @classmethod
    def of(cls, http: HttpSettings) -> Limits:
        """The limits of ``http``, checked."""
        if not http.header_timeout_s > 0:
            raise ValueError("the header timeout must be a positive number of seconds")
        if http.max_header_bytes <= 0 or http.max_connections <= 0:
            raise ValueError("the header and connection limits must be positive")
        return cls(
            http.header_timeout_s,
            http.max_header_bytes,
            http.max_connections,
            too_large(http.max_header_kb),
        )


def bounded_http(http: HttpSettings) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol, bounding each request's headers in time
    (``http.header_timeout_s``) and size (``http.max_header_kb``), and marking requests
    past ``http.max_connections`` for a 503."""

    class Configured(BoundedHttp):
        limits = Limits.of(http)

    return Configured


class BoundedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol with the :class:`Limits` of :func:`bounded_http`."""

    limits: Limits
    header_timer: asyncio.TimerHandle | None = None
    in_head = True  # the bytes read now belong to a request's line and headers
    head_read = 0  # bytes read since the open head began (counted per read)
    head_parsed = 0  # bytes of URL and header lines the parser handed over
    refusal: bytes | None = None  # the answer due once the answer in progress ends

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.arm_header_timer()

    def data_received(self, data: bytes) -> None:
        if self.refusal is not None:
            return  # refused: nothing more is read or kept
        if self.in_head:
            self.head_read += len(data)
        super().data_received(data)
        if self.in_head and self.head_read > self.limits.head_bytes and self.refusal is None:
            self.refuse(self.limits.answer_431)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.in_head, self.head_parsed = True, 0
        self.arm_header_timer()  # a later request on a kept-alive connection

    def on_url(self, url: bytes) -> None:
        if self.refusal is None:
            self.head_parsed += len(url)
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.refusal is None:
            self.head_parsed += len(name) + len(value) + 4  # ": " and CRLF
            if self.head_parsed > self.limits.head_bytes:
                self.refuse(self.limits.answer_431)
                return
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.disarm_header_timer()
        self.in_head, self.head_read = False, 0
        if self.refusal is not None:
            return
        if self.head_parsed > self.limits.head_bytes:
            self.refuse(self.limits.answer_431)
            return
        busy = max(len(self.connections), len(self.tasks) + 1)
        if busy > self.limits.max_connections:
            message = over_capacity_message(busy, self.limits.max_connections)
            self.scope[OVER_CAPACITY] = message  # type: ignore[literal-required]
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if self.refusal is None:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self.refusal is None:
            super().on_message_complete()
            self.in_head, self.head_read = True, 0

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.refusal is not None:
            self.refuse(self.refusal)  # the answer before it has ended

    def send_400_response(self, msg: str) -> None:
        if self.refusal is None:  # a refused connection's later bytes are not parsed
            super().send_400_response(msg)

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm_header_timer()
        super().connection_lost(exc)

    def refuse(self, answer: bytes) -> None:
        """Answer ``answer`` and close; after the answer in progress, if one is."""
        self.refusal = answer
        self.disarm_header_timer()
        if self.transport.is_closing():
            return
        if (self.cycle is not None and not self.cycle.response_complete) or self.pipeline:
            self.flow.pause_reading()
            return
        self.transport.write(answer)
        self.transport.close()

    def arm_header_timer(self) -> None:
        self.disarm_header_timer()
        timeout_s = self.limits.header_timeout_s
        self.header_timer = self.loop.call_later(timeout_s, self.headers_too_slow)

    def disarm_header_timer(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def headers_too_slow(self) -> None:
        self.header_timer = None
        if self.cycle is not None and not self.cycle.response_complete:
            # a request pipelined behind one still being answered: its time starts
            # once that answer is done (a 408 now would cut into the answer)
            self.arm_header_timer()
            return
        if not self.transport.is_closing():
            self.transport.write(TIMED_OUT)
            self.transport.close()
