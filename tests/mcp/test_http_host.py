"""The Host and Origin checks of ``/mcp`` over real loopback HTTP: the Host name is matched
without regard to case and the port must be a port and nothing after it (the MCP SDK's own
check refused ``LOCALHOST:PORT`` and accepted ``127.0.0.1:PORT:80``); the Origin is
compared as RFC 6454 says (the SDK's refused ``http://LOCALHOST:PORT`` and a trailing
slash); a foreign Host or Origin is refused before the bearer token is looked at, in
JSON-RPC's shape."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

import loopback
from offload.config import McpSettings, load_settings
from offload.mcp.context import McpContext
from offload.mcp.http import http_app
from offload.mcp.server import build_server
from offload.store.store import Store
from realparts import MCP_INIT, ServerThread

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """``/mcp`` without a token and with one: (url, url)."""
    tmp = tmp_path_factory.mktemp("mcp-host")
    settings = load_settings(env={}, flags={"store.home": str(tmp / "home")})
    with Store.open(settings) as store:
        server = build_server(McpContext.build(settings, store, tmp))
        open_app = http_app(server, McpSettings(port=0))
        guarded = http_app(
            build_server(McpContext.build(settings, store, tmp)),
            McpSettings(port=0, bearer_token=TOKEN),
        )
        plain, token = ServerThread(open_app).start(), ServerThread(guarded).start()
        try:
            yield plain.url, token.url
        finally:
            plain.stop()
            token.stop()


def post(url: str, host: str, **headers: str) -> httpx.Response:
    return loopback.post(url + "/mcp", json=MCP_INIT, headers={**HEADERS, "host": host, **headers})


def port_of(url: str) -> str:
    return url.rsplit(":", 1)[1]


def test_the_host_name_is_matched_without_regard_to_case(servers: tuple[str, str]) -> None:
    url, _ = servers
    port = port_of(url)
    for host in (
        f"LOCALHOST:{port}",
        f"LocalHost:{port}",
        f"127.0.0.1:{port}",
        f"[::1]:{port}",
        "LOCALHOST",
    ):
        assert post(url, host).status_code == 200, host


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:{port}:80",
        "localhost:{port}x",
        "localhost:",
        "localhost:99999",
        "evil.example:{port}",
        "127.0.0.1.evil.example:{port}",
        "[::1]x:{port}",
    ],
)
def test_a_host_that_is_not_a_served_name_with_a_port_is_refused_in_json_rpc(
    servers: tuple[str, str], host: str
) -> None:
    url, _ = servers
    resp = post(url, host.format(port=port_of(url)))
    assert resp.status_code == 421
    body = resp.json()
    assert body["jsonrpc"] == "2.0" and body["error"]["code"] == -32600
    assert "DNS-rebinding" in body["error"]["message"]


def test_a_foreign_host_is_refused_before_the_token_is_checked(servers: tuple[str, str]) -> None:
    _, url = servers
    port = port_of(url)
    assert post(url, f"evil.example:{port}").status_code == 421  # no token: still the Host
    assert post(url, f"localhost:{port}").status_code == 401
    assert post(url, f"LOCALHOST:{port}", authorization=f"Bearer {TOKEN}").status_code == 200


@pytest.mark.parametrize(
    "origin",
    [
        "http://LOCALHOST:{port}",
        "HTTP://127.0.0.1:{port}",
        "http://localhost:{port}/",
        "http://[::1]:{port}",
    ],
)
def test_the_served_origin_is_matched_as_rfc_6454_compares_it(
    servers: tuple[str, str], origin: str
) -> None:
    url, _ = servers
    port = port_of(url)
    resp = post(url, f"127.0.0.1:{port}", origin=origin.format(port=port))
    assert resp.status_code == 200, resp.text


@pytest.mark.parametrize(
    "origin",
    [
        "null",
        "http://localhost:3000",
        "http://localhost:{port}/x",
        "http://evil.example:{port}",
        "http://user@localhost:{port}",
        "ftp://localhost:{port}",
    ],
)
def test_another_origin_is_refused_in_json_rpc_before_the_token(
    servers: tuple[str, str], origin: str
) -> None:
    for url in servers:  # the token server: refused for the Origin, not the token
        port = port_of(url)
        resp = post(url, f"127.0.0.1:{port}", origin=origin.format(port=port))
        assert resp.status_code == 403, resp.text
        error = resp.json()["error"]
        assert error["code"] == -32600 and "only the served origin" in error["message"]
