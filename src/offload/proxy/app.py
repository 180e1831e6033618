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
- ``GET /metrics`` (Prometheus text) and ``GET /api/stats`` (JSON): the proxy's own.
- anything else (``/props``, ``/tokenize``, ``/health``, ``/slots``, ``/v1/embeddings`` …):
  passed through to the upstream unchanged.

Errors of our own are answered in the OpenAI error shape; an unreachable upstream is 502,
a timeout 504; upstream 4xx/5xx answers are passed through unchanged. A client that
disconnects cancels the upstream request (its connection is closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from offload.config import ProxySettings
from offload.core.tokens import TokenCounter
from offload.errors import (
    InvalidInput,
    OffloadError,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from offload.llm.upstream import (
    UpstreamClient,
    chat_template_of,
    n_ctx_of,
    split_base_url,
)
from offload.proxy import anthropic
from offload.proxy.counting import UpstreamCounter
from offload.proxy.errors_http import Guard, anthropic_error, openai_error
from offload.proxy.forward import (
    UpstreamReply,
    close_shielded,
    race_disconnect,
    read_all,
    relay,
    request_headers,
    response_headers,
    send_upstream,
)
from offload.proxy.http1 import Http1Pool
from offload.proxy.messages import wants_alternation
from offload.proxy.metrics import Metrics, RequestRecord, cache_figures
from offload.proxy.pipeline import Pipeline, RewriteResult
from offload.store.store import Store

log = logging.getLogger("offload.proxy")

KNOWN_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# used only when neither settings nor the upstream say; set proxy.n_ctx for such upstreams
FALLBACK_N_CTX = 8192
OVERFLOW = "exceed_context_size_error"
# after an overflow, aim this far under the upstream's own count
OVERFLOW_MARGIN = 0.95

R = TypeVar("R", bound=UpstreamReply)


class Rewriter(Protocol):
    """What the proxy needs of the rewrite pipeline."""

    def rewrite(
        self,
        messages: list[dict[str, Any]],
        n_ctx: int,
        *,
        session_hint: str = "",
        alternate: bool = False,
    ) -> RewriteResult: ...


RewriterFactory = Callable[[Store, ProxySettings, TokenCounter], Rewriter]


def default_rewriter(store: Store, settings: ProxySettings, counter: TokenCounter) -> Rewriter:
    """The real rewrite pipeline."""
    return Pipeline(store, settings, counter, scope="proxy")


class ProxyState:
    """Everything one proxy process shares between requests."""

    def __init__(
        self,
        settings: ProxySettings,
        store: Store,
        *,
        rewriter: RewriterFactory = default_rewriter,
        transport: httpx.AsyncBaseTransport | None = None,
        sync_transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.root, self.api = split_base_url(settings.upstream)
        # parsed once: httpx's URL parsing is a visible share of a request's own overhead
        self.chat_url = httpx.URL(f"{self.api}/chat/completions")
        self.counter = UpstreamCounter(
            self.root, timeout_s=settings.tokenize_timeout_s, transport=sync_transport
        )
        self.pipeline = rewriter(store, settings, self.counter)
        self.metrics = Metrics(store, max_sessions=settings.metrics_sessions)
        connect_timeout = min(10.0, settings.timeout_s)
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(settings.timeout_s, connect=connect_timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=128),
            transport=transport,
        )
        # Chat completions to a plain-HTTP upstream (a local model server, where the hop's
        # cost shows in every time to first byte) go through the lean client; TLS upstreams
        # and an injected transport keep httpx.
        self.chat_pool: Http1Pool | None = None
        chat = urlsplit(str(self.chat_url))
        if chat.scheme == "http" and transport is None:
            self.chat_pool = Http1Pool(
                f"http://{chat.netloc}",
                timeout_s=settings.timeout_s,
                connect_timeout_s=connect_timeout,
            )
        self.chat_target = chat.path + (f"?{chat.query}" if chat.query else "")
        self.control = UpstreamClient(settings.upstream, timeout=10.0, transport=transport)
        self.n_ctx_value: int | None = settings.n_ctx or None
        self.n_ctx_source = "settings" if settings.n_ctx else "unknown"
        # page chats only up to a user message; "auto" learns it from /props (a bad
        # setting fails here, at start)
        self.alternate = wants_alternation(settings.alternate_roles)
        self.upstream_model: str | None = None
        self._n_ctx_at = float("-inf")
        self._refresh: asyncio.Task[None] | None = None
        self._flusher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Read n_ctx and start the metrics flusher."""
        await self.refresh_n_ctx()
        self._flusher = asyncio.create_task(self._flush_loop())

    async def stop(self) -> None:
        """Stop the flusher, persist the last counts, close connections."""
        for task in (self._flusher, self._refresh):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await anyio.to_thread.run_sync(self.metrics.flush)
        await self.http.aclose()
        if self.chat_pool is not None:
            await self.chat_pool.aclose()
        await self.control.aclose()
        self.counter.close()

    async def _flush_loop(self) -> None:
        interval = max(0.05, self.settings.metrics_flush_s)
        while True:
            await asyncio.sleep(interval)
            if self.metrics.dirty:
                try:
                    await anyio.to_thread.run_sync(self.metrics.flush)
                except OffloadError as exc:  # a busy store: the counts stay dirty, retried
                    log.warning("metrics flush failed: %s", exc)

    async def n_ctx(self) -> int:
        """The upstream's context size: settings, else ``/props`` (re-read every
        ``props_refresh_s`` in the background), else the upstream's model list."""
        if self.settings.n_ctx:
            return self.settings.n_ctx
        if self.n_ctx_value is None:
            await self.refresh_n_ctx()
        elif time.monotonic() - self._n_ctx_at > self.settings.props_refresh_s and (
            self._refresh is None or self._refresh.done()
        ):
            self._refresh = asyncio.create_task(self.refresh_n_ctx())
        return self.n_ctx_value or FALLBACK_N_CTX

    async def refresh_n_ctx(self) -> None:
        """Re-read n_ctx (and the chat template) from the upstream now (a failure keeps
        the previous values)."""
        auto = self.settings.alternate_roles == "auto"
        if self.settings.n_ctx and not auto:
            return
        self._n_ctx_at = time.monotonic()
        try:
            props = await self.control.props()
            if auto:
                self.alternate = wants_alternation("auto", chat_template_of(props))
            if self.settings.n_ctx:
                return
            value = n_ctx_of(props)
            source = "props"
            if value is None:
                value, source = await self._n_ctx_from_models(), "models"
        except UpstreamError as exc:
            log.info("cannot read n_ctx from the upstream yet: %s", exc)
            return
        if value is not None:
            if value != self.n_ctx_value:
                log.info("upstream n_ctx %s (from %s)", value, source)
            self.n_ctx_value, self.n_ctx_source = value, source

    async def _n_ctx_from_models(self) -> int | None:
        resp = await self.control._send("GET", f"{self.api}/models", allow=frozenset({404}))
        try:
            data = resp.json().get("data") or []
        except (ValueError, AttributeError):
            return None
        for model in data:
            if not isinstance(model, dict):
                continue
            raw_meta = model.get("meta")
            meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
            for value in (
                meta.get("n_ctx"),
                model.get("max_model_len"),
                model.get("context_length"),
            ):
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value
        return None

    async def send_chat(self, body: bytes, headers: dict[str, str]) -> UpstreamReply:
        """POST a chat completion upstream (lean client when it applies); returns once the
        headers arrived. Raises :class:`UpstreamError` or :class:`httpx.HTTPError`."""
        if self.chat_pool is None:
            return await self.send_chat_httpx(body, headers)
        return await self.chat_pool.request("POST", self.chat_target, headers.items(), body)

    async def send_chat_httpx(self, body: bytes, headers: dict[str, str]) -> httpx.Response:
        """POST a chat completion upstream with httpx (for callers that need its response)."""
        req = self.http.build_request("POST", self.chat_url, content=body, headers=headers)
        return await send_upstream(self.http, req)

    def stats(self) -> dict[str, Any]:
        """``/api/stats``: the metrics snapshot plus what the proxy knows of its upstream."""
        snap = self.metrics.snapshot()
        snap["upstream"] = {
            "n_ctx": self.n_ctx_value,
            "n_ctx_source": self.n_ctx_source,
            "alternate_roles": self.alternate,
            "exact_token_counts": self.counter.exact,
            "tokenize_cache": self.counter.cache_len(),
            "calibration_ratio": self.counter.ratio,
        }
        return snap


def create_app(
    settings: ProxySettings,
    store: Store,
    *,
    rewriter: RewriterFactory = default_rewriter,
    transport: httpx.AsyncBaseTransport | None = None,
    sync_transport: httpx.BaseTransport | None = None,
) -> Guard:
    """The proxy as an ASGI app (guarded by Host/Origin checks and the optional token)."""
    state = ProxyState(
        settings, store, rewriter=rewriter, transport=transport, sync_transport=sync_transport
    )

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
        Route("/v1/models", _bind(models, state), methods=["GET"]),
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
    return Guard(
        app,
        bind_host=settings.host,
        allowed_hosts=settings.allowed_hosts,
        allowed_origins=settings.allowed_origins,
        bearer_token=settings.bearer_token,
    )


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
    return openai_error(500, f"internal proxy error: {type(exc).__name__}", "server_error")


# --- chat ----------------------------------------------------------------------------------


async def _json_body(request: Request) -> dict[str, Any]:
    return (await _raw_json_body(request))[1]


async def _raw_json_body(request: Request) -> tuple[bytes, dict[str, Any]]:
    """The body as sent and as parsed (it must be a JSON object)."""
    raw = await request.body()
    try:
        payload = json.loads(raw)
    except ValueError as exc:
        raise InvalidInput(f"malformed JSON body: {exc}") from exc
    if not isinstance(payload, dict):
        raise InvalidInput("the body must be a JSON object")
    return raw, payload


def validate_messages(messages: Any) -> list[dict[str, Any]]:
    """The chat messages, checked: a non-empty list of objects with a known role."""
    if not isinstance(messages, list) or not messages:
        raise InvalidInput("'messages' must be a non-empty array")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise InvalidInput(f"messages[{i}] must be an object")
        role = msg.get("role")
        if role not in KNOWN_ROLES:
            raise InvalidInput(
                f"messages[{i}].role {role!r} is not one of {', '.join(sorted(KNOWN_ROLES))}"
            )
        content = msg.get("content")
        if content is not None and not isinstance(content, str | list):
            raise InvalidInput(f"messages[{i}].content must be a string, an array or null")
    return messages


@dataclass
class _Exchange:
    """One chat request on its way upstream."""

    payload: dict[str, Any]
    result: RewriteResult
    n_ctx: int


async def chat_completions(request: Request, state: ProxyState) -> Response:
    """``POST /v1/chat/completions``."""
    if state.chat_pool is not None:
        state.chat_pool.prepare()  # the upstream connect overlaps parsing and the rewrite
    try:
        raw, payload = await _raw_json_body(request)
        messages = validate_messages(payload.get("messages"))
        return await run_chat(request, state, payload, messages, send=state.send_chat, raw=raw)
    except InvalidInput as exc:
        return openai_error(400, str(exc))


async def run_chat(
    request: Request,
    state: ProxyState,
    payload: dict[str, Any],
    messages: list[dict[str, Any]],
    *,
    send: Callable[[bytes, dict[str, str]], Awaitable[R]],
    transform: Callable[[R, bool, RewriteResult], Awaitable[Response]] | None = None,
    raw: bytes | None = None,
) -> Response:
    """Rewrite, forward, relay and count one chat request. ``send`` posts a body upstream
    (the lean client or httpx); ``transform`` lets the Anthropic route convert the answer
    instead of relaying it. ``raw``: the client's body, which is sent as it came when the
    rewrite left the messages as they were."""
    n_ctx = await state.n_ctx()
    exchange = await _rewrite(state, payload, messages, n_ctx)
    headers = request_headers(request.headers)
    headers["content-type"] = "application/json"
    stream = bool(payload.get("stream"))

    async def send_exchange(ex: _Exchange) -> R:
        if raw is not None and ex.result.messages == messages:
            body = raw  # nothing rewritten: the client's bytes, without a re-encoding
        else:
            body = json.dumps({**payload, "messages": ex.result.messages}).encode()
        return await send(body, headers)

    async def exchange_once() -> tuple[R, _Exchange, bytes | None]:
        """The answer, its exchange, and its body when it had to be read already."""
        nonlocal exchange
        resp = await send_exchange(exchange)
        if resp.status_code == 400:
            try:
                body = await resp.aread()  # httpx keeps it for a transform to read again
            finally:
                await close_shielded(resp)
            retry = await _overflow_retry(state, body, exchange, payload, messages)
            if retry is None:
                return resp, exchange, body
            exchange = retry
            resp = await send_exchange(exchange)
        return resp, exchange, None

    try:
        got = await race_disconnect(request, exchange_once)
    except (httpx.TimeoutException, UpstreamTimeout) as exc:
        _count_error(state, exchange.result)
        return openai_error(504, f"upstream did not answer in time: {exc}", "upstream_timeout")
    except (httpx.HTTPError, UpstreamUnavailable) as exc:
        _count_error(state, exchange.result)
        why = str(exc) if isinstance(exc, UpstreamError) else type(exc).__name__
        return openai_error(
            502, f"cannot reach upstream {state.api}: {why}", "upstream_unavailable"
        )
    if got is None:  # the client went away before the upstream answered
        _count_error(state, exchange.result)
        return Response(status_code=499)
    resp, exchange, read = got
    result = exchange.result
    if resp.status_code >= 400:
        body = read if read is not None else await error_body(resp)
        _count_error(state, result)
        if transform is not None:
            return await transform(resp, False, result)
        return Response(body, resp.status_code, headers=response_headers(resp.headers))

    if transform is not None:
        return await transform(resp, stream, result)

    if stream:
        seen: dict[str, Any] = {}

        def on_event(data: str) -> None:
            with contextlib.suppress(ValueError):
                obj = json.loads(data)
                if isinstance(obj, dict):
                    seen.update({k: obj[k] for k in ("usage", "timings") if k in obj})

        def on_end(completed: bool) -> None:
            record(state, result, seen, error=not completed)

        return StreamingResponse(
            relay(resp, on_event_json=on_event, on_end=on_end),
            status_code=resp.status_code,
            headers=response_headers(resp.headers),
        )

    body_or_none = await race_disconnect(request, lambda: read_all(resp))
    if body_or_none is None:
        await close_shielded(resp)
        _count_error(state, result)
        return Response(status_code=499)
    try:
        obj = json.loads(body_or_none)
    except ValueError:
        obj = {}
    record(state, result, obj if isinstance(obj, dict) else {})
    return Response(body_or_none, resp.status_code, headers=response_headers(resp.headers))


async def error_body(resp: UpstreamReply) -> bytes:
    """An error response's whole body, closing it (httpx keeps it for a second read)."""
    try:
        return await resp.aread()
    finally:
        await close_shielded(resp)


async def _rewrite(
    state: ProxyState, payload: dict[str, Any], messages: list[dict[str, Any]], n_ctx: int
) -> _Exchange:
    hint = payload.get("user")
    rewrite = functools.partial(
        state.pipeline.rewrite,
        session_hint=hint if isinstance(hint, str) else "",
        alternate=state.alternate,
    )
    result = await anyio.to_thread.run_sync(rewrite, messages, n_ctx)
    return _Exchange(payload, result, n_ctx)


async def _overflow_retry(
    state: ProxyState,
    body: bytes,
    exchange: _Exchange,
    payload: dict[str, Any],
    messages: list[dict[str, Any]],
) -> _Exchange | None:
    """After a 400 whose ``body`` is an ``exceed_context_size_error``: learn the true sizes
    and rewrite once more with the budget scaled so our counts land under the upstream's.
    None: not an overflow, pass the 400 on."""
    try:
        err = json.loads(body).get("error")
    except (ValueError, AttributeError):
        err = None
    if not isinstance(err, dict) or err.get("type") != OVERFLOW:
        return None
    upstream_n_ctx = err.get("n_ctx")
    n_prompt = err.get("n_prompt_tokens")
    if isinstance(upstream_n_ctx, int) and upstream_n_ctx > 0 and not state.settings.n_ctx:
        state.n_ctx_value, state.n_ctx_source = upstream_n_ctx, "overflow_error"
    else:
        await state.refresh_n_ctx()
    n_ctx = await state.n_ctx()
    wire = exchange.result.wire_tokens
    if isinstance(n_prompt, int) and n_prompt > 0 and wire > 0:
        state.counter.calibrate(exchange.result.messages, n_prompt)
        n_ctx = max(1, int(n_ctx * min(1.0, wire / n_prompt) * OVERFLOW_MARGIN))
    else:
        n_ctx = max(1, int(n_ctx * OVERFLOW_MARGIN))
    log.info("upstream overflow (%s prompt tokens); retrying with budget n_ctx=%s", n_prompt, n_ctx)
    return await _rewrite(state, payload, messages, n_ctx)


def record(
    state: ProxyState, result: RewriteResult, obj: dict[str, Any], *, error: bool = False
) -> None:
    """Count one request, with the cache figures its response reported."""
    prompt, cached = cache_figures(obj)
    cause = state.metrics.record(
        RequestRecord(
            session_id=result.session_id,
            **result.figures(),
            prompt_tokens=prompt,
            cached_tokens=cached,
            error=error,
        )
    )
    if cause is not None:
        log.info("session %s: prefix break (%s)", result.session_id[:12], cause)
    if prompt and not state.counter.exact:
        state.counter.calibrate(result.messages, prompt)


def _count_error(state: ProxyState, result: RewriteResult) -> None:
    record(state, result, {}, error=True)


# --- Anthropic Messages ----------------------------------------------------------------------


async def messages(request: Request, state: ProxyState) -> Response:
    """``POST /v1/messages``: Anthropic Messages over the upstream's chat completions."""
    try:
        body = await _json_body(request)
        payload = anthropic.to_openai(body)
        chat_messages = validate_messages(payload["messages"])
    except InvalidInput as exc:
        return anthropic_error(400, str(exc))
    model = str(body.get("model", ""))

    async def transform(resp: httpx.Response, stream: bool, result: RewriteResult) -> Response:
        if resp.status_code >= 400:
            return anthropic.error_response(resp)
        if stream:
            seen: dict[str, Any] = {}
            return StreamingResponse(
                anthropic.stream_events(
                    relay(
                        resp,
                        on_end=lambda ok: record(state, result, seen, error=not ok),
                    ),
                    model,
                    seen,
                ),
                media_type="text/event-stream",
            )
        return await anthropic.message_response(resp, model, lambda obj: record(state, result, obj))

    try:
        return await run_chat(
            request,
            state,
            payload,
            chat_messages,
            send=state.send_chat_httpx,
            transform=transform,
        )
    except InvalidInput as exc:
        return anthropic_error(400, str(exc))


# --- models, metrics, pass-through ---------------------------------------------------------


async def models(request: Request, state: ProxyState) -> Response:
    """``GET /v1/models``: the upstream's list with the true context size and the alias."""
    try:
        resp = await state.http.get(f"{state.api}/models", headers=request_headers(request.headers))
    except httpx.HTTPError as exc:
        return openai_error(
            502, f"cannot reach upstream {state.api}: {type(exc).__name__}", "upstream_unavailable"
        )
    if resp.status_code != 200:
        return Response(resp.content, resp.status_code, headers=response_headers(resp.headers))
    try:
        listing = resp.json()
    except ValueError:
        return Response(resp.content, resp.status_code, headers=response_headers(resp.headers))
    n_ctx = await state.n_ctx()
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list):
        return Response(resp.content, resp.status_code, headers=response_headers(resp.headers))
    for model in data:
        if isinstance(model, dict):
            model["context_length"] = n_ctx
            model["max_model_len"] = n_ctx
            meta = model.setdefault("meta", {})
            if isinstance(meta, dict):
                meta["n_ctx"] = n_ctx
    alias = state.settings.model_alias
    if alias and not any(isinstance(m, dict) and m.get("id") == alias for m in data):
        data.insert(
            0,
            {
                "id": alias,
                "object": "model",
                "owned_by": "offload",
                "created": int(time.time()),
                "context_length": n_ctx,
                "max_model_len": n_ctx,
                "meta": {"n_ctx": n_ctx},
            },
        )
    return JSONResponse(listing)


async def metrics(request: Request, state: ProxyState) -> Response:
    """``GET /metrics``: Prometheus text."""
    gauges = {
        "n_ctx": ("context size the proxy budgets against", float(await state.n_ctx())),
        "exact_token_counts": (
            "1 while token counts come from the upstream's /tokenize",
            1.0 if state.counter.exact else 0.0,
        ),
        "calibration_ratio": ("offline token counts are scaled by this", state.counter.ratio),
    }
    return PlainTextResponse(
        state.metrics.prometheus(gauges), media_type="text/plain; version=0.0.4"
    )


async def stats(request: Request, state: ProxyState) -> Response:
    """``GET /api/stats``: JSON totals and sessions, live and cumulative."""
    await state.n_ctx()
    return JSONResponse(state.stats())


async def passthrough(request: Request, state: ProxyState) -> Response:
    """Any other path: forwarded to the upstream's root unchanged, streamed back."""
    url = state.root + request.url.path
    if request.url.query:
        url += "?" + request.url.query
    body = await request.body()
    req = state.http.build_request(
        request.method, url, content=body or None, headers=request_headers(request.headers)
    )
    try:
        resp = await race_disconnect(request, lambda: send_upstream(state.http, req))
    except httpx.TimeoutException as exc:
        return openai_error(504, f"upstream did not answer in time: {exc}", "upstream_timeout")
    except httpx.HTTPError as exc:
        return openai_error(
            502, f"cannot reach upstream {state.root}: {type(exc).__name__}", "upstream_unavailable"
        )
    if resp is None:
        return Response(status_code=499)
    return StreamingResponse(
        relay(resp), status_code=resp.status_code, headers=response_headers(resp.headers)
    )
