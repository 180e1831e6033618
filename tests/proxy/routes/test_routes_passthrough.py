"""Paths the proxy does not serve itself, forwarded to the upstream as they came."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import loopback
from offload.config import ProxySettings
from offload.proxy.app import create_app
from offload.store.store import Store
from proxy.proxy_servers import serving


@contextmanager
def closing_upstream() -> Iterator[str]:
    """An upstream that closes every connection as soon as a request's headers are in,
    without reading its body (unread bytes make the close a reset): what a client meets
    when a server refuses a path it does not serve before reading a large body."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                reader = conn.makefile("rb")
                while reader.readline() not in (b"\r\n", b""):
                    pass
                reader.close()  # the socket's own close then closes it, unread bytes and all

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        server.shutdown(socket.SHUT_RDWR)
        server.close()
        thread.join(5)
        assert not thread.is_alive()


def test_an_upstream_that_cuts_off_a_large_body_on_an_unknown_path_is_not_called_unreachable(
    tmp_path: Path,
) -> None:
    body = b'{"messages": [{"role": "user", "content": "' + b"x" * 8_000_000 + b'"}]}'
    with (
        closing_upstream() as upstream,
        Store(tmp_path / "s.db") as store,
        serving(create_app(ProxySettings(upstream=upstream, n_ctx=4096), store)) as server,
    ):
        resp = loopback.post(
            server.url + "/v1/chat/completions/",  # a trailing slash: not the proxy's route
            content=body,
            headers={"content-type": "application/json"},
            timeout=60,
        )
    assert resp.status_code == 502
    message = resp.json()["error"]["message"]
    assert "closed the connection on POST /v1/chat/completions/" in message
    assert "cannot reach" not in message
