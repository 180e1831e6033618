"""A chat upstream on a raw loopback socket, for the failures no HTTP framework will produce.

:class:`SocketUpstream` accepts connections, reads HTTP/1.1 requests off each one (request
line, headers, a ``content-length`` body) and hands every request to
:meth:`SocketUpstream.answer`, which a subclass writes: answer it, break off mid-stream,
close the connection without an answer, or block. :func:`running` puts one on a free
loopback port and, when the block ends, stops it and joins every thread it started.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"


@dataclass
class SocketUpstream:
    """Accepts connections on ``sock`` (given by :func:`running`), each in its own thread."""

    sock: socket.socket = field(init=False)
    release: threading.Event = field(default_factory=threading.Event)  # set at teardown
    threads: list[threading.Thread] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def serve(self) -> None:
        """Accept connections until the listening socket is shut down."""
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._connection, args=(conn,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            reader = conn.makefile("rb")
            n = 0
            while request_line := reader.readline():
                length = 0
                while (line := reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = reader.read(length)
                if not self.answer(conn, n, request_line, body):
                    return
                n += 1

    def answer(self, conn: socket.socket, n: int, request_line: bytes, body: bytes) -> bool:
        """Answer the ``n``-th request (from 0) read on ``conn``; False closes the connection.

        The request has been read whole, so closing now is the keep-alive race a client
        meets when the server gives up on a connection just as it reuses it."""
        raise NotImplementedError


Upstream = TypeVar("Upstream", bound=SocketUpstream)


@contextmanager
def running(upstream: Upstream) -> Iterator[Upstream]:
    """``upstream`` on a free loopback port; when the block ends, every blocked answer is
    released and every thread it started has ended."""
    sock = upstream.sock = socket.create_server(("127.0.0.1", 0))
    acceptor = threading.Thread(target=upstream.serve, daemon=True)
    acceptor.start()
    try:
        yield upstream
    finally:
        upstream.release.set()
        sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(); close() alone does not
        sock.close()
        acceptor.join(5)
        for thread in upstream.threads:
            thread.join(5)
        assert not acceptor.is_alive()
        assert not any(t.is_alive() for t in upstream.threads)
