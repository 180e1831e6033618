"""A deadline on reading a request's headers, which uvicorn does not bound.

uvicorn closes a connection idle after a response (``timeout_keep_alive``), but a client
that connects and sends part of a request line or its headers, then nothing (slowloris),
holds its connection for ever: the request never reaches the app, so the body deadline
(``http.body_timeout_s``) never starts. :func:`header_deadline` is uvicorn's httptools
protocol with a timer from the connection's start, and from each later request's first
byte, to the end of that request's headers; past it the client gets 408 and the connection
is closed. It subclasses uvicorn's protocol (its connection and parser callbacks), so a
uvicorn upgrade is checked by tests/cli/test_headers_deadline.py. Every command that starts uvicorn passes it as uvicorn's ``http`` protocol.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_REASON = b"request headers too slow: raise http.header_timeout_s to wait longer"
#: The answer to a client whose headers did not arrive in time (before any route is known,
#: so in no surface's own shape: plain text).
TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_REASON), _REASON)
)


def header_deadline(timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol, closing a connection whose request headers have not
    all arrived ``timeout_s`` seconds after the connection or the request began."""
    if not timeout_s > 0:
        raise ValueError("the header timeout must be a positive number of seconds")

    class HeaderDeadline(HttpToolsProtocol):
        header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.arm_header_timer()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self.arm_header_timer()  # a later request on a kept-alive connection

        def on_headers_complete(self) -> None:
            self.disarm_header_timer()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self.disarm_header_timer()
            super().connection_lost(exc)

        def arm_header_timer(self) -> None:
            self.disarm_header_timer()
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

    return HeaderDeadline
