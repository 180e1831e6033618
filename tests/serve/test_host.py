"""The one-port host over real loopback HTTP: every route bounds its request body
(``http.max_body_mb``) and refuses past it with a 413 in its own clients' error shape, and
answers a body that does not arrive in time (``http.body_timeout_s``) 408 in that shape;
what clients send cannot add series to ``/metrics`` without bound; ``/api/`` is the host's
own namespace (an unknown path there is a 404 naming its routes, not a trip upstream)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.client.streamable_http import streamable_http_client

import exposition
import loopback
from mcp import Client
from offload.config import load_settings
from offload.mcp.catalog import TOOLS
from offload.serve.host import build
from offload.store.store import Store
from realparts import ServerThread
from serving import ANSWER, ScriptedUpstream

LIMIT = 1024 * 1024  # http.max_body_mb = 1


@pytest.fixture(scope="module")
def host(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("host")
    settings = load_settings(
        env={"OFFLOAD_HOME": str(tmp / "home")},
        flags={"proxy.upstream": upstream.url, "mcp.scope": "host-test", "http.max_body_mb": 1},
    )
    served = build(settings, Store.open(settings), cwd=Path(tmp))
    server = ServerThread(served.app).start()  # its lifespan closes the store
    try:
        yield server.url
    finally:
        server.stop()


def declared(path: str, size: int, content_type: str = "application/json") -> bytes:
    """A request head declaring a ``size``-byte body (none of which is sent)."""
    return (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: {content_type}\r\n"
        f"accept: application/json, text/event-stream\r\ncontent-length: {size}\r\n\r\n"
    ).encode()


def openai_shaped(body: dict[str, Any]) -> bool:
    error = body["error"]
    return error["code"] == "request_too_large" and "http.max_body_mb" in error["message"]


def anthropic_shaped(body: dict[str, Any]) -> bool:
    return bool(body["type"] == "error" and body["error"]["type"] == "request_too_large")


def jsonrpc_shaped(body: dict[str, Any]) -> bool:
    return bool(body["jsonrpc"] == "2.0" and body["error"]["code"] == -32600)


def plain_shaped(body: dict[str, Any]) -> bool:
    return "http.max_body_mb" in body["error"]


SHAPES = [
    ("/v1/chat/completions", openai_shaped),
    ("/v1/messages", anthropic_shaped),
    ("/v1/responses", openai_shaped),
    ("/tokenize", openai_shaped),  # passed through to the upstream below the limit
    ("/mcp", jsonrpc_shaped),
    ("/api/stats", plain_shaped),
    ("/gateway/mcp", plain_shaped),  # not mounted: the host's own answer
]


@pytest.mark.parametrize(("path", "shaped"), SHAPES)
def test_every_route_refuses_a_body_over_the_limit_in_its_clients_error_shape(
    host: str, upstream: ScriptedUpstream, path: str, shaped: Any
) -> None:
    status, body = loopback.raw_exchange(host, declared(path, LIMIT + 1), [])
    assert status == 413
    assert shaped(json.loads(body))
    assert upstream.chats == []


def test_a_chunked_chat_request_is_refused_once_it_passes_the_limit(
    host: str, upstream: ScriptedUpstream
) -> None:
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        b"content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    piece = b" " * 65536
    chunks = [b"%x\r\n%s\r\n" % (len(piece), piece)] * (LIMIT // len(piece) + 1)
    status, body = loopback.raw_exchange(host, head, chunks)
    assert status == 413
    assert openai_shaped(json.loads(body))
    assert upstream.chats == []


@pytest.fixture(scope="module")
def quick_host(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A host whose request bodies must arrive within half a second of their headers."""
    tmp = tmp_path_factory.mktemp("quick")
    flags = {"proxy.upstream": upstream.url, "mcp.scope": "quick", "http.body_timeout_s": 0.5}
    settings = load_settings(env={"OFFLOAD_HOME": str(tmp / "home")}, flags=flags)
    served = build(settings, Store.open(settings), cwd=Path(tmp))
    server = ServerThread(served.app).start()
    try:
        yield server.url
    finally:
        server.stop()


def timed_out_shape(path: str, body: dict[str, Any]) -> bool:
    """The 408 body in the error shape of the clients of ``path``."""
    if path == "/mcp":
        return jsonrpc_shaped(body) and "http.body_timeout_s" in body["error"]["message"]
    if path == "/v1/messages":
        return bool(body["type"] == "error" and "http.body_timeout_s" in body["error"]["message"])
    if path.startswith("/v1/") or path == "/tokenize":
        error = body["error"]
        return bool(error["code"] == "request_timeout" and "body_timeout_s" in error["message"])
    return "http.body_timeout_s" in body["error"]


def test_every_route_answers_a_stalled_body_408_in_its_clients_error_shape(
    quick_host: str, upstream: ScriptedUpstream
) -> None:
    paths = [path for path, _shaped in SHAPES]
    # all at once, they wait out one deadline together: 10 of 100 bytes, then silence
    stalled = [loopback.stall(quick_host, declared(path, 100) + b'{"model": ') for path in paths]
    assert loopback.get(f"{quick_host}/api/stats", timeout=10).status_code == 200
    for path, sock in zip(paths, stalled, strict=True):
        status, body = loopback.read_to_close(sock)
        assert status == 408, path
        assert timed_out_shape(path, json.loads(body)), (path, body)
    assert upstream.chats == []


@pytest.mark.anyio
async def test_calls_of_made_up_tool_names_are_counted_under_one_unknown_series(
    host: str,
) -> None:
    async with Client(streamable_http_client(f"{host}/mcp")) as client:
        for n in range(3):
            made_up = await client.call_tool(f"junk_{n}", {})
            assert made_up.is_error
        assert not (await client.call_tool("peek", {})).is_error
    families = exposition.read(loopback.get(f"{host}/metrics", timeout=10).text)
    calls = {s["tool"]: v for s, v in families["offload_mcp_tool_calls_total"].samples}
    assert calls["unknown"] >= 3 and calls["peek"] >= 1
    assert set(calls) <= {t.name for t in TOOLS} | {"unknown"}


@pytest.mark.parametrize("path", ["/api/stat", "/api/nosuch/route", "/api/", "/api"])
def test_a_path_under_api_that_names_no_route_is_a_404_naming_the_routes(
    host: str, path: str
) -> None:
    for method in ("GET", "POST"):
        resp = loopback.request(method, f"{host}{path}", timeout=10)
        assert resp.status_code == 404
        body = resp.json()
        assert "/api/stats" in body["routes"] and "/api/entries" in body["routes"]
        assert path in body["error"] and "/api/stats" in body["error"]


@pytest.mark.parametrize("path", ["/api/stats", "/api/entries", "/metrics"])
def test_a_host_route_with_a_trailing_slash_redirects_to_the_route(host: str, path: str) -> None:
    resp = loopback.get(f"{host}{path}/?page=2", timeout=10)
    assert resp.status_code == 308
    assert resp.headers["location"] == f"{path}?page=2"
    assert loopback.get(f"{host}{path}/", timeout=10, follow_redirects=True).status_code == 200


def test_the_favicon_is_the_dashboards_no_icon_and_other_paths_still_reach_the_upstream(
    host: str,
) -> None:
    icon = loopback.get(f"{host}/favicon.ico", timeout=10)
    assert icon.status_code == 204 and icon.content == b""
    props = loopback.get(f"{host}/props", timeout=10)  # the model server's own route
    assert props.status_code == 200 and "default_generation_settings" in props.json()


def test_a_responses_request_reaches_the_upstream_as_chat_through_the_proxy(
    host: str, upstream: ScriptedUpstream
) -> None:
    body = {"model": "m", "instructions": "be brief", "input": "hello host"}
    resp = loopback.post(f"{host}/v1/responses", json=body, timeout=30)
    assert resp.status_code == 200
    assert resp.json()["output"][0]["content"][0]["text"] == ANSWER
    assert upstream.chats[-1]["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello host"},
    ]


def banner_for(tmp_path: Path, host: str, **flags: object) -> str:
    """The start-up lines ``offload serve`` would print on ``host`` (nothing is bound)."""
    settings = load_settings(
        env={"OFFLOAD_HOME": str(tmp_path / "home")},
        flags={"proxy.host": host, "proxy.port": 8912, **flags},
    )
    store = Store.open(settings)
    try:
        return build(settings, store, cwd=tmp_path).banner()
    finally:
        store.close()


def test_a_wildcard_bind_is_printed_as_bound_with_a_warning_naming_what_is_open(
    tmp_path: Path,
) -> None:
    lines = banner_for(tmp_path, "0.0.0.0", **{"mcp.bearer_token": "t0ken"}).splitlines()
    assert (
        lines[0]
        == "offload serve on http://0.0.0.0:8912 (from this machine: http://127.0.0.1:8912)"
    )
    warning = lines[1]
    assert warning.startswith("warning: listening on 0.0.0.0 (every interface), not loopback")
    opened, _, guarded = warning.partition("Open to them: ")[2].partition("Behind a bearer token")
    assert "the proxy /v1" in opened and "/metrics" in opened and "[proxy] bearer_token" in opened
    assert "/mcp" in guarded and "/mcp" not in opened
    assert "t0ken" not in warning
    assert lines[2].startswith("  proxy      http://127.0.0.1:8912/v1")


def test_a_loopback_bind_prints_its_address_and_no_warning(tmp_path: Path) -> None:
    text = banner_for(tmp_path, "127.0.0.1")
    assert text.splitlines()[0] == "offload serve on http://127.0.0.1:8912"
    assert "warning" not in text
