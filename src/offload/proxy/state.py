"""What one proxy process shares between requests: the upstream clients, the rewrite
pipeline, the metrics and what is known of the upstream (n_ctx, chat template)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

import anyio
import httpx

from offload.config import ProxySettings
from offload.core.tokens import TokenCounter
from offload.errors import OffloadError, UpstreamError
from offload.llm.upstream import (
    UpstreamClient,
    chat_template_of,
    n_ctx_of,
    split_base_url,
    tls_context,
    tool_support_of,
)
from offload.proxy.figures.metrics import Metrics
from offload.proxy.rewrite.messages import wants_alternation
from offload.proxy.rewrite.phases import RewriteResult
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.stubs.parts import names_proxy_tools
from offload.proxy.rewrite.stubs.writes import Figures
from offload.proxy.transport.counting import DefinitionCounts, UpstreamCounter
from offload.proxy.transport.forward import UpstreamReply, send_upstream
from offload.proxy.transport.http1 import Http1Pool
from offload.store.store import Store

# one logger name for the whole proxy surface, whichever module logs
log = logging.getLogger("offload.proxy")

# used only when neither settings nor the upstream say; set proxy.n_ctx for such upstreams
FALLBACK_N_CTX = 8192
# how often the proxy closes what ended worker threads left open (see release_ended)
RELEASE_S = 5.0
# no request for this long and the proxy's caches (token counts, stubs) are cut to the
# newest 1/CACHE_SHARE of their bounds: the counts and stubs of the sessions' last turns
# stay, the cold rest, made again when met, is memory given back after a burst of load
CACHES_QUIET_S = 30.0
CACHE_SHARE = 16


class Rewriter(Protocol):
    """What the proxy needs of the rewrite pipeline."""

    def rewrite(
        self,
        messages: list[dict[str, Any]],
        n_ctx: int,
        *,
        session_hint: str = "",
        alternate: bool = False,
        wait_writes: bool = True,
        reserve: int = 0,
        fixed: int = 0,
    ) -> RewriteResult: ...

    def name_proxy_tools(self, on: bool) -> None: ...

    def shrink_caches(self, share: int) -> None: ...

    def remember_sent(self) -> int: ...

    def flush(self, timeout: float | None = None) -> None: ...

    def write_figures(self) -> Figures: ...


RewriterFactory = Callable[[Store, ProxySettings, TokenCounter], Rewriter]


def default_rewriter(store: Store, settings: ProxySettings, counter: TokenCounter) -> Rewriter:
    """The real rewrite pipeline (scope ``proxy`` when the edge did not name one)."""
    return Pipeline(store, settings, counter, scope=settings.scope or "proxy")


class ProxyState:
    """Everything one proxy process shares between requests."""

    def __init__(
        self,
        settings: ProxySettings,
        store: Store,
        *,
        rewriter: RewriterFactory = default_rewriter,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.root, self.api = split_base_url(settings.upstream)
        # parsed once: httpx's URL parsing is a visible share of a request's own overhead
        self.chat_url = httpx.URL(f"{self.api}/chat/completions")
        self.counter = UpstreamCounter(self.root, timeout_s=settings.tokenize_timeout_s)
        self.pipeline = rewriter(store, settings, self.counter)
        self.definitions = DefinitionCounts(self.counter)
        self.last_request = time.monotonic()  # when the last chat request was rewritten
        # what the proxy's own memory tools read (retrieval_loop): the pipeline's store, scope
        self.store = store
        self.memory_scope = settings.scope or "proxy"
        # whether the upstream's chat template renders tools (/props; None: it does not say)
        self.tool_support: bool | None = None
        self.metrics = Metrics(store, max_sessions=settings.metrics_sessions)
        connect_timeout = min(10.0, settings.timeout_s)
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(settings.timeout_s, connect=connect_timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=128),
            transport=transport,
            verify=tls_context(),
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
        self._precounts: set[asyncio.Task[int]] = set()

    async def start(self) -> None:
        """Read n_ctx and start the metrics flusher."""
        await self.refresh_n_ctx()
        self._flusher = asyncio.create_task(self._flush_loop())

    def precount(self, text: str) -> None:
        """Count ``text`` in the background (a worker thread), so that a request carrying it
        later finds the count cached; only while the upstream counts exactly."""
        if not text or not self.counter.exact:
            return
        task = asyncio.create_task(anyio.to_thread.run_sync(self.counter.count, text))
        self._precounts.add(task)
        task.add_done_callback(self._precounts.discard)

    async def stop(self) -> None:
        """Stop the flusher, persist the last counts and each session's last request (as
        digests), close connections."""
        for task in (self._flusher, self._refresh, *self._precounts):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        try:  # the store writes still running beside answers: finished, not dropped
            await anyio.to_thread.run_sync(self.pipeline.flush, self.settings.timeout_s)
        except OffloadError as exc:
            log.warning("finishing the pending store writes failed: %s", exc)
        await _logged(self.metrics.flush, "metrics flush")
        try:  # the first request after a restart measures its reuse against these
            await anyio.to_thread.run_sync(self.pipeline.remember_sent)
        except OffloadError as exc:
            log.warning("keeping the last requests sent failed: %s", exc)
        await self.http.aclose()
        if self.chat_pool is not None:
            await self.chat_pool.aclose()
        await self.control.aclose()
        self.counter.close()

    async def _flush_loop(self) -> None:
        interval = max(0.05, self.settings.metrics_flush_s)
        last_release = time.monotonic()
        while True:
            await asyncio.sleep(interval)
            if time.monotonic() - last_release >= RELEASE_S:
                last_release = time.monotonic()
                # in a worker thread: the call also lets anyio stop workers that idled
                await _logged(self.release_ended, "releasing idle threads and caches")
            if self.metrics.dirty:
                await _logged(self.metrics.flush, "metrics flush")

    def release_ended(self) -> None:
        """Close what worker threads that have ended left open: their /tokenize
        connections, their store connections; once quiet, cut the caches."""
        self.counter.release_ended()
        self.store.release_idle()
        if time.monotonic() - self.last_request >= CACHES_QUIET_S:
            self.shrink_caches()

    def shrink_caches(self) -> None:
        """Cut the token counts and the pipeline's caches to the newest 1/CACHE_SHARE of
        their bounds."""
        self.counter.shrink(self.counter.cache_size // CACHE_SHARE)
        self.definitions.shrink(1)
        self.pipeline.shrink_caches(CACHE_SHARE)

    def learn_tool_support(self, support: bool | None) -> None:
        """Record whether the upstream's template renders tools; stubs and recall blocks
        then name only the memory tools the model is offered."""
        self.tool_support = support
        self.pipeline.name_proxy_tools(names_proxy_tools(self.settings.retrieval, support))

    async def n_ctx(self) -> int:
        """The upstream's context size: settings (held under what the upstream itself
        reports, see :meth:`learn_n_ctx`), else ``/props`` (re-read every
        ``props_refresh_s`` in the background), else the upstream's model list."""
        if self.settings.n_ctx:
            return self.n_ctx_value or self.settings.n_ctx
        if self.n_ctx_value is None:
            await self.refresh_n_ctx()
        elif time.monotonic() - self._n_ctx_at > self.settings.props_refresh_s and (
            self._refresh is None or self._refresh.done()
        ):
            self._refresh = asyncio.create_task(self.refresh_n_ctx())
        return self.n_ctx_value or FALLBACK_N_CTX

    def learn_n_ctx(self, value: int, source: str) -> None:
        """What the upstream says its context size is (``/props``, an overflow error). A
        ``proxy.n_ctx`` above it is held to it, with one warning: the upstream refuses
        every request between the two sizes, which the proxy could have paged out."""
        configured = self.settings.n_ctx
        if configured and value >= configured:  # the setting fits (again)
            self.n_ctx_value, self.n_ctx_source = configured, "settings"
            return
        if value != self.n_ctx_value:
            if configured:
                log.warning(
                    "proxy.n_ctx %s is above the upstream's %s (from %s): budgeting under "
                    "%s; lower proxy.n_ctx or leave it 0 to read it from the upstream",
                    configured,
                    value,
                    source,
                    value,
                )
            else:
                log.info("upstream n_ctx %s (from %s)", value, source)
        self.n_ctx_value, self.n_ctx_source = value, source

    async def refresh_n_ctx(self) -> None:
        """Re-read n_ctx (and the chat template) from the upstream now (a failure keeps
        the previous values)."""
        auto = self.settings.alternate_roles == "auto"
        self._n_ctx_at = time.monotonic()
        try:
            props = await self.control.props()
            if auto:
                self.alternate = wants_alternation("auto", chat_template_of(props))
            self.learn_tool_support(tool_support_of(props))
            value = n_ctx_of(props)
            if self.settings.n_ctx:
                if value is not None:
                    self.learn_n_ctx(value, "props")
                return
            source = "props"
            if value is None:
                value, source = await self._n_ctx_from_models(), "models"
        except UpstreamError as exc:
            log.info("cannot read n_ctx from the upstream yet: %s", exc)
            return
        if value is not None:
            self.learn_n_ctx(value, source)

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
        # the window's levels as shares of n_ctx (the dashboard's occupancy plots mark them)
        snap["window"] = {
            "high_water": self.settings.high_water,
            "target": self.settings.target,
            "ceiling": self.settings.emergency,
        }
        # the store writes run beside the upstream (their time is not the rewrite's)
        w = self.pipeline.write_figures()
        snap["writes"] = {
            "done": w.writes,
            "failed": w.failed,
            "pending": w.pending,
            "cpu_ms": round(w.cpu_s * 1000, 1),
            "answers_waited": w.waited,  # answers that completed only after waiting for them
        }
        return snap


async def _logged(work: Callable[[], object], what: str) -> None:
    """Run ``work`` in a worker thread; a failure is logged, never raised: a busy store
    (the figures stay dirty and are written next time) or a fault of any other kind, which
    must not end the loop that runs it (and the idle release with it) for the process's
    life."""
    try:
        await anyio.to_thread.run_sync(work)
    except OffloadError as exc:
        log.warning("%s failed: %s", what, exc)
    except Exception:
        log.exception("%s failed", what)
