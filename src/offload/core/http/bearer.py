"""ASGI wrappers guarding the MCP endpoints (the MCP server's ``/mcp``, the gateway's):
:class:`HostGuard` lets through only requests whose Host names this server,
:class:`OriginGuard` only those without an Origin or with the served one, and
:class:`BearerGuard` only requests carrying a bearer token, compared in constant time."""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterable, MutableMapping
from typing import Any

from offload.core.http.bodylimit import App, Receive, Send, jsonrpc
from offload.core.http.listen import Origins, parse_host, url_host

#: The status of a request whose Host is not this server's (as the MCP SDK answers it).
MISDIRECTED = 421


class HostGuard:
    """Pure ASGI wrapper: an HTTP request's Host must be one of ``names`` (compared without
    regard to case) with a valid port or none, else a 421 JSON-RPC error (DNS rebinding: a
    page on another site reaches a loopback server under its own name). The Host passed on
    is the name lower-cased, so the MCP SDK's own check (exact and case-sensitive, and
    accepting anything after ``name:``) sees what this one accepted."""

    def __init__(self, app: App, names: Iterable[str]) -> None:
        self.app = app
        self.names = frozenset(n.lower().strip("[]") for n in names)

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = list(scope.get("headers") or [])
        given = [value for name, value in headers if name == b"host"]
        parsed = parse_host(given[0].decode("latin-1")) if len(given) == 1 else None
        if parsed is None or parsed[0] not in self.names:
            shown = given[0].decode("latin-1")[:100] if given else "(none)"
            message = (
                f"Host {shown!r} is not a name this server answers to (DNS-rebinding "
                "protection): send the host it listens on, like 127.0.0.1:PORT"
            )
            await _refuse(scope, send, MISDIRECTED, message)
            return
        name, port = parsed
        host = url_host(name) + (f":{port}" if port else "")
        headers = [(k, host.encode() if k == b"host" else v) for k, v in headers]
        await self.app({**scope, "headers": headers}, receive, send)


#: The status of a request from a page of another origin.
FORBIDDEN = 403


class OriginGuard:
    """Pure ASGI wrapper: an HTTP request that carries an Origin (a browser's) must come
    from one ``origins`` accepts, else a 403 JSON-RPC error. The Origin is not passed on:
    the MCP SDK's own check compares it as written (``http://LOCALHOST:PORT`` refused,
    ``null`` and a trailing slash by accident), and this one has decided."""

    def __init__(self, app: App, origins: Origins, setting: str = "") -> None:
        self.app = app
        self.origins = origins
        self.others = f" and those of {setting}" if setting else ""

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = list(scope.get("headers") or [])
        given = [value.decode("latin-1") for name, value in headers if name == b"origin"]
        if given:
            server = scope.get("server")
            port = server[1] if server else None
            if len(given) > 1 or not self.origins.accepts(given[0], port):
                message = (
                    f"Origin {given[0][:100]!r} is not allowed: only the served origin"
                    f"{self.others} may call this server from a browser"
                )
                await _refuse(scope, send, FORBIDDEN, message)
                return
            headers = [(k, v) for k, v in headers if k != b"origin"]
        await self.app({**scope, "headers": headers}, receive, send)


async def _refuse(scope: MutableMapping[str, Any], send: Send, status: int, message: str) -> None:
    content_type, body = jsonrpc(scope.get("path", ""), status, message)
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BearerGuard:
    """Pure ASGI wrapper: HTTP requests must carry ``Authorization: Bearer <token>``.

    Not ``BaseHTTPMiddleware``: that hides client disconnects from streaming responses.
    """

    def __init__(self, app: App, token: str, setting: str) -> None:
        self.app = app
        self.expected = token.encode()
        error = f"missing or wrong bearer token; send Authorization: Bearer <{setting}>"
        self.refusal = json.dumps({"error": error}, separators=(",", ":")).encode()

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            # the scheme is case-insensitive (RFC 9110 11.1): "bearer t0ken" is the token
            scheme, _, token = given.partition(b" ")
            matches = hmac.compare_digest(token, self.expected)  # constant time, always run
            if not (matches and scheme.lower() == b"bearer"):
                body = self.refusal
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="offload"'),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
