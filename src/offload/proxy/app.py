"""The proxy's HTTP surface: an OpenAI-compatible reverse proxy in front of a model server.

Routes:

- ``POST /v1/chat/completions`` (streaming and not): the messages go through the rewrite
  pipeline (stubs, windowing) in a worker thread, then upstream; the answer comes back
  byte for byte. An upstream ``exceed_context_size_error`` re-reads n_ctx and retries once
  with the budget scaled by the upstream's own count.
- ``POST /v1/completions``: passed through (a raw prompt has no messages to rewrite).
- ``GET /v1/models``: the upstream's list with the true context size added
  (``context_length``, ``max_model_len``, ``meta.n_ctx``) and the optional model alias.
- ``POST /v1/messages``: Anthropic Messages, converted to and from chat (see anthropic.py).
- ``POST /v1/responses``: OpenAI Responses (stateless: the whole conversation in ``input``),
  converted to and from chat (see responses.py); any path below it (a stored response,
  compact, cancel) is a 404 that says so.
- ``POST /chat/completions``, ``POST /responses``, ``GET /models``: the same routes for a
  client given the base URL without ``/v1``.
- ``GET /metrics`` (Prometheus text) and ``GET /api/stats`` (JSON): the proxy's own.
- anything else (``/props``, ``/tokenize``, ``/health``, ``/slots``, ``/v1/embeddings`` …):
  passed through to the upstream unchanged.

Errors of our own are answered in the OpenAI error shape; an unreachable upstream is 502,
a timeout 504; upstream 4xx/5xx answers are passed through unchanged. A client that
disconnects cancels the upstream request (its connection is closed).

This module builds the app and its routing; the handlers live beside it: state.py (what
requests share), chat.py (the chat exchange), routes_anthropic.py, routes_responses.py,
routes_models.py, routes_stats.py and routes_passthrough.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from offload.config import HTTP_DEFAULTS, HttpSettings, ProxySettings, Settings
from offload.core.http.bodylimit import BodyLimit
from offload.core.http.listen import bind_url, exposure_warning, token_guard
from offload.core.urls import redact_url
from offload.proxy.routes.chat import chat_completions
from offload.proxy.routes.routes_anthropic import messages
from offload.proxy.routes.routes_models import models
from offload.proxy.routes.routes_passthrough import passthrough
from offload.proxy.routes.routes_responses import create_response, stored_response
from offload.proxy.routes.routes_stats import metrics, stats
from offload.proxy.state import ProxyState, RewriterFactory, default_rewriter
from offload.proxy.transport.errors_http import Guard, body_refusal, shape_for
from offload.store.paths import default_scope
from offload.store.store import Store

# one logger name for the whole proxy surface, whichever module logs
log = logging.getLogger("offload.proxy")


def create_app(
    settings: ProxySettings,
    store: Store,
    *,
    rewriter: RewriterFactory = default_rewriter,
    transport: httpx.AsyncBaseTransport | None = None,
    http: HttpSettings = HTTP_DEFAULTS,
) -> Guard:
    """The proxy as an ASGI app (guarded by Host/Origin checks and the optional token, every
    request body bounded in size and time by ``http``)."""
    state = ProxyState(settings, store, rewriter=rewriter, transport=transport)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await state.start()
        try:
            yield
        finally:
            await state.stop()

    routes = [
        Route("/v1/chat/completions", _bind(chat_completions, state), methods=["POST"]),
        Route("/v1/messages", _bind(messages, state), methods=["POST"]),
        Route("/v1/responses", _bind(create_response, state), methods=["POST"]),
        Route(
            "/v1/responses/{rest:path}",
            _bind(stored_response, state),
            methods=["GET", "POST", "DELETE"],
        ),
        Route("/v1/models", _bind(models, state), methods=["GET"]),
        # the same routes without /v1: what a client given the base URL without it asks
        # for (llama-server answers both), bounded and counted like the /v1 ones
        Route("/chat/completions", _bind(chat_completions, state), methods=["POST"]),
        Route("/responses", _bind(create_response, state), methods=["POST"]),
        Route("/models", _bind(models, state), methods=["GET"]),
        Route("/metrics", _bind(metrics, state), methods=["GET"]),
        Route("/api/stats", _bind(stats, state), methods=["GET"]),
        Route(
            "/{path:path}",
            _bind(passthrough, state),
            methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"],
        ),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.proxy = state
    app.add_exception_handler(Exception, _internal_error)
    return Guard.for_proxy(BodyLimit(app, http, body_refusal, anyio.fail_after), settings)


def banner(settings: ProxySettings) -> str:
    """What ``offload proxy`` prints on start: the address it binds and its upstream, and a
    warning when other machines can reach it."""
    head = (
        f"offload proxy on {bind_url(settings.host, settings.port)}"
        f"  (upstream {redact_url(settings.upstream)})"
    )
    parts = [
        (
            "/v1 and every path passed to the model server (offload has no token for them:"
            " only the upstream's own API key, if it checks one)",
            False,
        ),
        token_guard(settings.bearer_token, "/metrics, /api/stats", "[proxy] bearer_token"),
    ]
    warning = exposure_warning(settings.host, parts)
    return head if warning is None else f"{head}\n{warning}"


def proxy_settings(settings: Settings, cwd: Path | None = None) -> ProxySettings:
    """The proxy's settings with its store scope resolved: ``proxy.scope``, else the scope
    the project's MCP server and CLI use (:func:`default_scope`), so what the proxy pages
    out is found where they search."""
    scope = settings.proxy.scope or default_scope(settings, cwd or Path.cwd())
    return dataclasses.replace(settings.proxy, scope=scope)


def _bind(
    handler: Callable[[Request, ProxyState], Any], state: ProxyState
) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        response: Response = await handler(request, state)
        return response

    return endpoint


async def _internal_error(request: Request, exc: Exception) -> Response:
    # the top-level handler: a bug must still answer in the client's error shape
    log.exception("internal error on %s", request.url.path)
    message = f"internal proxy error: {type(exc).__name__}"
    return shape_for(request.url.path).response(500, message, "server_error")
