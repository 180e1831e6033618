"""Error answers in the client's API shape, and the proxy's own guards (Host, Origin, token).

The guard is plain ASGI middleware, not Starlette's ``BaseHTTPMiddleware``, which would hide
client disconnects from streaming routes.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from offload.config import ProxySettings
from offload.core.http.listen import Origins, parse_host, served_names

# the proxy's own endpoints: these (and only these) require the bearer token when one is set;
# model routes carry the upstream's key in Authorization, which is forwarded untouched
OWN_PATHS = frozenset({"/metrics", "/api/stats"})
# the routes whose body is JSON: a content type that a browser sends cross-origin without a
# CORS preflight (a "simple request") is refused on them
JSON_PATHS = frozenset(
    {
        "/v1/chat/completions",
        "/v1/messages",
        "/v1/responses",
        "/chat/completions",
        "/responses",
        "/v1/completions",
        "/v1/embeddings",
        "/tokenize",
    }
)
SIMPLE_TYPES = frozenset({"text/plain", "application/x-www-form-urlencoded", "multipart/form-data"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class TextJSON(JSONResponse):
    """JSON whose strings may hold what an upstream's JSON held: a lone surrogate (half an
    emoji, escaped) goes out as its escape, where encoding it failed the request."""

    def render(self, content: Any) -> bytes:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode("utf-8", "backslashreplace")


def openai_error(
    status: int, message: str, type_: str = "invalid_request_error", code: str | int | None = None
) -> JSONResponse:
    """An OpenAI-shaped error: ``{"error": {"message", "type", "param", "code"}}``."""
    return TextJSON(_openai_body(status, message, type_, code), status_code=status)


def _openai_body(
    status: int, message: str, type_: str, code: str | int | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code or status}}


# Anthropic's error types by HTTP status (its API documents these); others: by class
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def anthropic_type(status: int) -> str:
    """Anthropic's error type for an HTTP status."""
    known = _ANTHROPIC_TYPES.get(status)
    if known is not None:
        return known
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def anthropic_error(status: int, message: str, type_: str | None = None) -> JSONResponse:
    """An Anthropic-shaped error: ``{"type": "error", "error": {"type", "message"}}`` (the
    type from the status unless given)."""
    return TextJSON(_anthropic_body(status, message, type_), status_code=status)


def _anthropic_body(status: int, message: str, type_: str | None = None) -> dict[str, Any]:
    return {"type": "error", "error": {"type": type_ or anthropic_type(status), "message": message}}


@dataclass(frozen=True)
class ErrorShape:
    """How one client API says an error: as a whole response, or as an event in a stream
    that has already begun (OpenAI: a ``data: {"error": ...}`` event; Anthropic:
    ``event: error``). ``type_`` is the proxy's OpenAI-style type; Anthropic's comes from
    the status."""

    anthropic: bool

    def body(
        self, status: int, message: str, type_: str, code: str | int | None = None
    ) -> dict[str, Any]:
        """The error object (``code``: OpenAI's, the status unless given)."""
        if self.anthropic:
            return _anthropic_body(status, message)
        return _openai_body(status, message, type_, code)

    def response(
        self, status: int, message: str, type_: str, code: str | int | None = None
    ) -> JSONResponse:
        """The error as a whole response."""
        return TextJSON(self.body(status, message, type_, code), status_code=status)

    def event(self, status: int, message: str, type_: str) -> bytes:
        """The error as one server-sent event."""
        data = json.dumps(self.body(status, message, type_), ensure_ascii=False)
        if self.anthropic:
            return f"event: error\ndata: {data}\n\n".encode("utf-8", "backslashreplace")
        return f"data: {data}\n\n".encode("utf-8", "backslashreplace")


OPENAI = ErrorShape(anthropic=False)
ANTHROPIC = ErrorShape(anthropic=True)
#: The routes that answer in Anthropic's shape (everything else speaks OpenAI's).
ANTHROPIC_PATHS = frozenset({"/v1/messages"})


def shape_for(path: str) -> ErrorShape:
    """The error shape of the route at ``path``."""
    return ANTHROPIC if path in ANTHROPIC_PATHS else OPENAI


# OpenAI-style codes of the refusals of :class:`BodyLimit` (a body too large, too slow)
_BODY_CODES = {413: "request_too_large", 408: "request_timeout", 503: "server_busy"}
_BODY_TYPES = {503: "server_error"}


def body_refusal(path: str, status: int, message: str) -> tuple[bytes, bytes]:
    """A 413, 408 or 503 body in the shape of the route at ``path`` (for :class:`BodyLimit`)."""
    code = _BODY_CODES.get(status, status)
    type_ = _BODY_TYPES.get(status, "invalid_request_error")
    body = shape_for(path).body(status, message, type_, code)
    return b"application/json", json.dumps(body).encode()


class Guard:
    """Refuse requests whose Host or Origin is not ours (DNS rebinding) and, when a token is
    configured, requests to the proxy's own endpoints that do not present it."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        bind_host: str = "127.0.0.1",
        allowed_hosts: Iterable[str] = (),
        allowed_origins: Iterable[str] = (),
        bearer_token: str = "",
        token_paths: Iterable[str] = OWN_PATHS,
    ) -> None:
        self.app = app
        self.token_paths = frozenset(token_paths)
        self.hosts = frozenset(served_names(bind_host)) | {h.lower() for h in allowed_hosts}
        self.origins = Origins(sorted(self.hosts), list(allowed_origins))
        self.token = bearer_token.encode()

    @classmethod
    def for_proxy(
        cls, app: ASGIApp, settings: ProxySettings, *, token_paths: Iterable[str] = OWN_PATHS
    ) -> Guard:
        """``app`` guarded as the ``[proxy]`` settings say (bind host, allowed hosts and
        origins, bearer token on ``token_paths``)."""
        return cls(
            app,
            bind_host=settings.host,
            allowed_hosts=settings.allowed_hosts,
            allowed_origins=settings.allowed_origins,
            bearer_token=settings.bearer_token,
            token_paths=token_paths,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        problem = self._problem(scope, headers)
        if problem is not None:
            status, message = problem
            body = json.dumps(shape_for(scope["path"]).body(status, message, "forbidden")).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)

    def _problem(self, scope: Scope, headers: dict[str, str]) -> tuple[int, str] | None:
        host = headers.get("host")
        # the name without regard to case, a port of digits from 1 to 65535 and nothing
        # after it; anything else is no host of ours
        parsed = None if host is None else parse_host(host.strip())
        if host is not None and (parsed is None or parsed[0] not in self.hosts):
            return 403, "Host not allowed (DNS rebinding protection); see proxy.allowed_hosts"
        origin = headers.get("origin")
        if origin is not None and not self._origin_ok(origin, scope):
            return 403, "Origin not allowed (only the served origin); see proxy.allowed_origins"
        if scope["method"] in _BODY_METHODS and scope["path"] in JSON_PATHS:
            media = headers.get("content-type", "").partition(";")[0].strip().lower()
            if media in SIMPLE_TYPES:
                # what a browser may send cross-origin without asking first (CORS)
                return 415, f"Content-Type {media} not accepted: send application/json"
        if self.token and scope["path"] in self.token_paths:
            given = headers.get("x-offload-token", "")
            auth = headers.get("authorization", "")
            if auth[:7].lower() == "bearer ":
                given = given or auth[7:].strip()
            if not secrets.compare_digest(given.encode(), self.token):
                return 401, "missing or wrong bearer token for the proxy's own endpoints"
        return None

    def _origin_ok(self, origin: str, scope: Scope) -> bool:
        """A configured origin, or the one this request was served at: one of our host
        names on the port it came in on (a page on another local port is another origin)."""
        server = scope.get("server")
        return self.origins.accepts(origin, server[1] if server else None)
