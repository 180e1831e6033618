"""Error answers in the client's API shape, and the proxy's own guards (Host, Origin, token).

The guard is plain ASGI middleware, not Starlette's ``BaseHTTPMiddleware``, which would hide
client disconnects from streaming routes.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from offload.config import ProxySettings

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
# the proxy's own endpoints: these (and only these) require the bearer token when one is set;
# model routes carry the upstream's key in Authorization, which is forwarded untouched
OWN_PATHS = frozenset({"/metrics", "/api/stats"})


def openai_error(
    status: int, message: str, type_: str = "invalid_request_error", code: str | int | None = None
) -> JSONResponse:
    """An OpenAI-shaped error: ``{"error": {"message", "type", "param", "code"}}``."""
    return JSONResponse(
        {"error": {"message": message, "type": type_, "param": None, "code": code or status}},
        status_code=status,
    )


def anthropic_error(
    status: int, message: str, type_: str = "invalid_request_error"
) -> JSONResponse:
    """An Anthropic-shaped error: ``{"type": "error", "error": {"type", "message"}}``."""
    return JSONResponse(
        {"type": "error", "error": {"type": type_, "message": message}}, status_code=status
    )


def _hostname(host_header: str) -> str:
    host = host_header.strip().lower()
    if host.startswith("["):  # [::1]:8900
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


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
    ) -> None:
        self.app = app
        hosts = set(LOOPBACK_HOSTS) | {h.lower() for h in allowed_hosts}
        if bind_host not in ("0.0.0.0", "::", ""):
            hosts.add(bind_host.lower())
        self.hosts = frozenset(hosts)
        self.origins = frozenset(o.rstrip("/").lower() for o in allowed_origins)
        self.token = bearer_token.encode()

    @classmethod
    def for_proxy(cls, app: ASGIApp, settings: ProxySettings) -> Guard:
        """``app`` guarded as the ``[proxy]`` settings say (bind host, allowed hosts and
        origins, bearer token)."""
        return cls(
            app,
            bind_host=settings.host,
            allowed_hosts=settings.allowed_hosts,
            allowed_origins=settings.allowed_origins,
            bearer_token=settings.bearer_token,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        problem = self._problem(scope, headers)
        if problem is not None:
            status, message = problem
            body = json.dumps(
                {"error": {"message": message, "type": "forbidden", "param": None, "code": status}}
            ).encode()
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
        if host is not None and _hostname(host) not in self.hosts:
            return 403, "Host not allowed (DNS rebinding protection); see proxy.allowed_hosts"
        origin = headers.get("origin")
        if origin is not None and origin.lower() != "null":
            name = (urlsplit(origin).hostname or "").lower()
            if name not in LOOPBACK_HOSTS and origin.rstrip("/").lower() not in self.origins:
                return 403, "Origin not allowed; see proxy.allowed_origins"
        elif origin is not None:
            return 403, "Origin not allowed"
        if self.token and scope["path"] in OWN_PATHS:
            given = headers.get("x-offload-token", "")
            auth = headers.get("authorization", "")
            if auth[:7].lower() == "bearer ":
                given = given or auth[7:].strip()
            if not secrets.compare_digest(given.encode(), self.token):
                return 401, "missing or wrong bearer token for the proxy's own endpoints"
        return None
