"""The tests' own HTTP requests to the servers they run on loopback, through one client.

``httpx.get(...)`` builds a client for every call, and with it an SSL context (certifi's
CA bundle parsed: ~50 ms of CPU here), though no loopback test speaks TLS; a test that
polls a starting server that way spends more CPU than the server it waits for. One
module-wide client builds it once. It keeps no idle connection, so every request opens
its own and closes it after, exactly as ``httpx.get`` does: no test sees a reused
connection it did not ask for. ``get``, ``post``, ``stream`` and ``request`` take what
httpx's functions of the same names take; :func:`raw_exchange` sends bytes as they are
(a head without its body, a chunked body without its end); :func:`stall` sends a head and
part of a body and then nothing, and :func:`read_to_close` reads the answer to such a
request up to the server closing the connection.
"""

from __future__ import annotations

import socket

import httpx

# The timeout is a ceiling for a hung server, not a wait: at load 15-25 on two cores a
# request that costs the server a fraction of a second of CPU took over 5 s to answer (a
# test that means a timeout passes its own, e.g. ``timeout=0.5``).
CLIENT = httpx.Client(timeout=60.0, limits=httpx.Limits(max_keepalive_connections=0))

get = CLIENT.get
post = CLIENT.post
stream = CLIENT.stream
request = CLIENT.request


def raw_exchange(url: str, head: bytes, chunks: list[bytes]) -> tuple[int, bytes]:
    """Send ``head`` and ``chunks`` over a fresh socket, then read the answer to its end
    (the server closes after a refusal); (status, body)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(head)
        for chunk in chunks:
            sock.sendall(chunk)
        data = b""
        while b"\r\n\r\n" not in data or len(data) < _expected(data):
            got = sock.recv(65536)
            if not got:
                break
            data += got
    status = int(data.split(b" ", 2)[1])
    return status, data.partition(b"\r\n\r\n")[2]


def stall(url: str, sent: bytes) -> socket.socket:
    """A connection that sent ``sent`` (a head and part of its body, or less), then nothing."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=60)
    sock.sendall(sent)
    return sock


def read_to_close(sock: socket.socket) -> tuple[int, bytes]:
    """Everything the server sends on ``sock`` until it closes the connection (a server
    that never closes fails the socket's timeout); (status, body). Closes ``sock``."""
    data = b""
    with sock:
        for _ in range(100_000):  # bounded: at most the socket timeout per round
            got = sock.recv(65536)
            if not got:
                break
            data += got
    return int(data.split(b" ", 2)[1]), data.partition(b"\r\n\r\n")[2]


def _expected(data: bytes) -> int:
    head, _, _ = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(head) + 4 + int(value)
    return 1 << 62
