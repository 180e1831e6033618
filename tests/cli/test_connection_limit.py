"""The connection limit over real loopback HTTP: past ``http.max_connections`` open
connections a request is answered 503 in its route's own shape (the host's JSON, the
proxy's OpenAI and Anthropic errors, MCP's JSON-RPC) with ``Connection: close`` and
``Retry-After``; once connections close, requests are served again."""

from __future__ import annotations

import socket
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

import loopback
from offload.cli.headers_deadline import bounded_http
from offload.config import HttpSettings, McpSettings, ProxySettings, load_settings
from offload.core.http.bodylimit import BodyLimit, plain_json
from offload.mcp.context import McpContext
from offload.mcp.http import http_app
from offload.mcp.server import build_server
from offload.proxy.app import create_app
from offload.store.store import Store
from realparts import MCP_INIT, ServerThread, wait_until

# the held connections must outlive the test: a header deadline far away
HTTP = HttpSettings(max_connections=2, header_timeout_s=60)


async def hello(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
    """``hello`` to every HTTP request."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"hello"})


@contextmanager
def running(app: Any, http: HttpSettings = HTTP) -> Iterator[str]:
    """``app`` under the bounded protocol on loopback; its URL."""
    server = ServerThread(app, http=bounded_http(http)).start()
    try:
        yield server.url
    finally:
        server.stop()


def hold(url: str, n: int) -> list[socket.socket]:
    """``n`` connections that sent nothing (each accepted before any later one is)."""
    return [loopback.stall(url, b"") for _ in range(n)]


def test_past_the_connection_limit_a_request_is_a_503_and_served_again_once_some_close() -> None:
    app = BodyLimit(hello, HTTP, plain_json, anyio.fail_after)
    with running(app) as url:
        assert loopback.get(url).text == "hello"  # alone: under the limit
        held = hold(url, 2)
        refused = loopback.get(url)
        assert refused.status_code == 503
        assert "http.max_connections" in refused.json()["error"]
        assert refused.headers["connection"] == "close" and refused.headers["retry-after"]
        for sock in held:
            sock.close()
        wait_until(lambda: loopback.get(url).status_code == 200, 30, what="served again")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A fresh store file."""
    with Store(tmp_path / "offload.db") as s:
        yield s


def test_the_proxy_answers_a_request_past_the_limit_in_each_clients_shape(store: Store) -> None:
    settings = ProxySettings(upstream="http://127.0.0.1:9", n_ctx=4096)  # never reached
    with running(create_app(settings, store, http=HTTP)) as url:
        held = hold(url, 2)
        chat = loopback.post(url + "/v1/chat/completions", json={"messages": []})
        messages = loopback.post(url + "/v1/messages", json={"messages": []})
        for sock in held:
            sock.close()
    assert chat.status_code == 503 and messages.status_code == 503
    error = chat.json()["error"]
    assert error["code"] == "server_busy" and error["type"] == "server_error"
    assert "http.max_connections" in error["message"]
    body = messages.json()
    assert body["type"] == "error" and "http.max_connections" in body["error"]["message"]


def test_mcp_answers_a_request_past_the_limit_with_a_json_rpc_error(tmp_path: Path) -> None:
    settings = load_settings(env={}, flags={"store.home": str(tmp_path / "home")})
    with Store.open(settings) as store:
        server = build_server(McpContext.build(settings, store, tmp_path))
        with running(http_app(server, McpSettings(port=0), http=HTTP)) as url:
            held = hold(url, 2)
            headers = {"accept": "application/json, text/event-stream"}
            resp = loopback.post(url + "/mcp", json=MCP_INIT, headers=headers)
            for sock in held:
                sock.close()
    assert resp.status_code == 503
    body = resp.json()
    assert body["jsonrpc"] == "2.0" and "http.max_connections" in body["error"]["message"]
