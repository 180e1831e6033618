"""An ASGI wrapper that lets through only HTTP requests carrying a bearer token (the MCP
server's ``/mcp`` and the gateway's HTTP endpoint); the token is compared in constant time."""

from __future__ import annotations

import hmac
import json
from collections.abc import MutableMapping
from typing import Any

from offload.core.http.bodylimit import App, Receive, Send


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
