"""``offload serve`` as a real process bounds what the server itself reads: headers past
``http.max_header_kb`` get a plain 431, and past ``http.max_connections`` open connections
each route answers 503 in its own clients' shape (the proxy's OpenAI error, JSON-RPC on
``/mcp``, the dashboard's ``{"error"}``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import loopback
from realparts import MCP_INIT
from serving import ServeProcess

pytestmark = pytest.mark.slow


def test_serve_refuses_headers_past_the_limit_and_requests_past_the_connection_limit(
    tmp_path: Path,
) -> None:
    env = {"OFFLOAD_HTTP__MAX_HEADER_KB": "8", "OFFLOAD_HTTP__MAX_CONNECTIONS": "3"}
    with ServeProcess(tmp_path, env=env) as serve:
        url = serve.url
        big = b"x-big: " + b"a" * 9 * 1024 + b"\r\n"
        status, body = loopback.read_to_close(
            loopback.stall(url, b"GET /api/stats HTTP/1.1\r\nhost: 127.0.0.1\r\n" + big + b"\r\n")
        )
        assert status == 431 and b"http.max_header_kb" in body
        held = [loopback.stall(url, b"") for _ in range(3)]
        try:
            chat = loopback.post(url + "/v1/chat/completions", json={"messages": []})
            headers = {"accept": "application/json, text/event-stream"}
            mcp = loopback.post(url + "/mcp", json=MCP_INIT, headers=headers)
            stats = loopback.get(url + "/api/stats")
        finally:
            for sock in held:
                sock.close()
    assert (chat.status_code, mcp.status_code, stats.status_code) == (503, 503, 503)
    assert chat.json()["error"]["code"] == "server_busy"
    assert mcp.json()["error"]["code"] == -32600
    assert "http.max_connections" in stats.json()["error"]
