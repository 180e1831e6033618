"""A bound on every HTTP request body's size and time, as plain ASGI middleware shared by
every surface.

A body whose ``Content-Length`` is over the limit is refused before a byte of it is read;
otherwise the body is counted as it arrives and refused the moment it passes the limit
(a chunked upload has no length to check up front). An accepted body is handed to the
app as one message, so the app's own ``request.body()`` costs no second copy: the memory a
request holds is its size, not a multiple of it.

The whole body must also arrive within a deadline counted from the request's headers (when
the server hands the request to the app): a client that sends its headers and then a byte a
minute, or stops mid-body, would otherwise hold a connection and a task for ever. Past it
the request is answered 408 and the connection closed. Core runs no event loop of its own,
so the caller passes the timer (:data:`Deadline`, e.g. ``anyio.fail_after``).

A request the server marked as past its connection limit (:data:`OVER_CAPACITY`) is
answered 503 before its body is read.

The refusals (413, 408, 503) are in the shape of the surface's clients: each surface passes a
:data:`Refusal` (the proxy OpenAI's or Anthropic's error JSON per route, MCP a JSON-RPC
error, the host's own pages ``{"error": ...}``).

Pure ASGI, not Starlette's ``BaseHTTPMiddleware`` (which hides client disconnects from
streaming routes); it imports no web framework.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from contextlib import AbstractContextManager
from typing import Any

from offload.config import HttpSettings

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]

#: ``(path, status, message) -> (content type, body)`` of a refusal for the route at ``path``.
Refusal = Callable[[str, int, str], tuple[bytes, bytes]]
#: ``seconds -> context manager`` that raises ``TimeoutError`` when what it wraps runs past
#: ``seconds`` (cancelling it): ``anyio.fail_after``.
Deadline = Callable[[float], AbstractContextManager[object]]

TOO_LARGE = 413
TIMEOUT = 408
BUSY = 503
#: The ASGI scope key by which the server marks a request that came past its connection
#: limit (``http.max_connections``); its value is the refusal's message. The server knows
#: the count but not the route; :class:`BodyLimit`, which every surface wraps itself in,
#: knows the route's error shape and answers 503 in it.
OVER_CAPACITY = "offload.over_capacity"


def too_large_message(limit: int) -> str:
    """The one-line reason a request body was refused."""
    return (
        f"request body too large: the limit is {limit // (1024 * 1024)} MiB "
        f"({limit} bytes); raise http.max_body_mb to accept more"
    )


def too_slow_message(timeout_s: float) -> str:
    """The one-line reason a request whose body did not arrive in time was refused."""
    return (
        f"request body too slow: the whole body must arrive within {timeout_s:g} s of the "
        "request's headers; raise http.body_timeout_s to wait longer"
    )


def plain_json(path: str, status: int, message: str) -> tuple[bytes, bytes]:
    """A ``{"error": message}`` refusal (the host's own pages)."""
    import json

    return b"application/json", json.dumps({"error": message}).encode()


def jsonrpc(path: str, status: int, message: str) -> tuple[bytes, bytes]:
    """A JSON-RPC error refusal with no id (the request was never parsed): MCP routes."""
    import json

    body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
    return b"application/json", json.dumps(body).encode()


class BodyTooLarge(Exception):
    """The body passed the limit while it was being read (internal to this module)."""


class BodyLimit:
    """``app`` with every HTTP request body bounded to ``http.max_body_bytes`` bytes and
    ``http.body_timeout_s`` seconds (timed by ``deadline``)."""

    def __init__(self, app: Any, http: HttpSettings, refusal: Refusal, deadline: Deadline) -> None:
        if http.max_body_bytes <= 0:
            raise ValueError("the body limit must be a positive number of bytes")
        if not http.body_timeout_s > 0:
            raise ValueError("the body timeout must be a positive number of seconds")
        self.app = app
        self.limit = http.max_body_bytes
        self.timeout_s = http.body_timeout_s
        self.refusal = refusal
        self.deadline = deadline

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        busy = scope.get(OVER_CAPACITY)
        if isinstance(busy, str):
            await self._refuse(scope, send, BUSY, busy)
            return
        if self._declared(scope) > self.limit:
            await self._refuse(scope, send, TOO_LARGE, too_large_message(self.limit))
            return
        try:
            with self.deadline(self.timeout_s):
                first = await self._read(receive)
        except BodyTooLarge:
            await self._refuse(scope, send, TOO_LARGE, too_large_message(self.limit))
            return
        except TimeoutError:
            await self._refuse(scope, send, TIMEOUT, too_slow_message(self.timeout_s))
            return
        pending: list[Message] = [first]

        async def replay() -> Message:
            # the whole body once, then the client's own messages (a disconnect)
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)

    def _declared(self, scope: MutableMapping[str, Any]) -> int:
        """The declared ``Content-Length`` (0 when absent or not a number: then counted)."""
        for name, value in scope.get("headers") or ():
            if name.lower() == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return 0
        return 0

    async def _read(self, receive: Receive) -> Message:
        """The whole body as one ``http.request`` message (or the first message that is not
        one: a disconnect), refusing past the limit as bytes arrive."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return message
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                raise BodyTooLarge
            if chunk:
                chunks.append(chunk)
            if not message.get("more_body", False):
                body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                return {"type": "http.request", "body": body, "more_body": False}

    async def _refuse(
        self, scope: MutableMapping[str, Any], send: Send, status: int, message: str
    ) -> None:
        content_type, body = self.refusal(scope.get("path", ""), status, message)
        headers = [
            (b"content-type", content_type),
            (b"content-length", str(len(body)).encode()),
            # the rest of the body is not read: the connection cannot be reused
            (b"connection", b"close"),
        ]
        if status == BUSY:
            headers.append((b"retry-after", b"1"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
