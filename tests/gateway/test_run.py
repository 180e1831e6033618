"""Serving the gateway: the line ``offload gateway --http`` starts with, its token, and the
deadline on a request body."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import loopback
from offload.config import GatewaySettings, HttpSettings
from offload.gateway.config import GatewayConfig
from offload.gateway.run import banner, http_app
from offload.gateway.server import Gateway
from offload.store.store import Store
from realparts import ServerThread


def test_the_http_start_line_names_the_address_bound_and_warns_off_loopback() -> None:
    assert (
        banner("127.0.0.1", 8902) == "offload gateway: Streamable HTTP at http://127.0.0.1:8902/mcp"
    )
    head, warning = banner("0.0.0.0", 8902).split("\n")
    assert head == "offload gateway: Streamable HTTP at http://0.0.0.0:8902/mcp"
    assert warning.startswith("warning: listening on 0.0.0.0 (every interface), not loopback")
    assert (
        "Open to them: the gateway /mcp: every upstream's tools (set [gateway] bearer_token)"
        in warning
    )
    guarded = banner("0.0.0.0", 8902, "s3cret").split("\n")[1]
    assert "the gateway /mcp: every upstream's tools ([gateway] bearer_token)" in guarded


@pytest.mark.parametrize("token", ["", "s3cret"])
def test_with_a_bearer_token_set_the_gateways_http_endpoint_answers_only_requests_bearing_it(
    tmp_path: Path, token: str
) -> None:
    store = Store(tmp_path / "offload.db")
    gateway = Gateway(GatewaySettings(bearer_token=token), GatewayConfig((), {}), store)
    server = ServerThread(http_app(gateway, "127.0.0.1")).start()
    url = f"{server.url}/mcp"
    try:
        # a DELETE without a session: the MCP endpoint's quick refusal (400), past the guard
        bare = loopback.request("DELETE", url, timeout=10)
        wrong = loopback.request("DELETE", url, headers={"authorization": "Bearer no"}, timeout=10)
        right = loopback.request(
            "DELETE", url, headers={"authorization": f"Bearer {token or 'any'}"}, timeout=10
        )
    finally:
        server.stop()
        store.close()
    if not token:
        assert bare.status_code != 401 and right.status_code != 401
        return
    assert (bare.status_code, wrong.status_code) == (401, 401)
    assert right.status_code not in (401, 403), right.text
    assert "[gateway] bearer_token" in bare.json()["error"]


def test_the_gateways_http_endpoint_answers_a_stalled_body_408_in_json_rpc(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "offload.db")
    gateway = Gateway(GatewaySettings(), GatewayConfig((), {}), store)
    app = http_app(gateway, "127.0.0.1", http=HttpSettings(body_timeout_s=0.5))
    server = ServerThread(app).start()
    head = (
        b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"accept: application/json, text/event-stream\r\ncontent-length: 100\r\n\r\n"
    )
    try:
        status, body = loopback.read_to_close(loopback.stall(server.url, head + b'{"id": 1'))
    finally:
        server.stop()
        store.close()
    assert status == 408
    error = json.loads(body)["error"]
    assert error["code"] == -32600 and "http.body_timeout_s" in error["message"]


def test_the_gateways_http_endpoint_matches_its_host_without_regard_to_case(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "offload.db")
    gateway = Gateway(GatewaySettings(), GatewayConfig((), {}), store)
    server = ServerThread(http_app(gateway, "127.0.0.1")).start()
    try:

        def delete(host: str) -> int:
            return loopback.request(
                "DELETE", server.url + "/mcp", headers={"host": host}
            ).status_code

        upper, quirk = delete(f"LOCALHOST:{server.port}"), delete(f"127.0.0.1:{server.port}:80")
    finally:
        server.stop()
        store.close()
    assert upper not in (421, 403) and quirk == 421  # past the Host check; refused by it


def test_the_gateways_http_endpoint_compares_the_origin_as_rfc_6454_says(tmp_path: Path) -> None:
    store = Store(tmp_path / "offload.db")
    gateway = Gateway(GatewaySettings(), GatewayConfig((), {}), store)
    server = ServerThread(http_app(gateway, "127.0.0.1")).start()
    try:

        def delete(origin: str) -> int:
            headers = {"host": f"127.0.0.1:{server.port}", "origin": origin}
            return loopback.request("DELETE", server.url + "/mcp", headers=headers).status_code

        upper = delete(f"http://LOCALHOST:{server.port}")
        slash = delete(f"http://localhost:{server.port}/")
        refused = [delete(o) for o in ("null", "http://localhost:1", "http://evil.example")]
    finally:
        server.stop()
        store.close()
    assert upper not in (421, 403) and slash not in (421, 403)  # past both checks
    assert refused == [403, 403, 403]
