"""The proxy's own figures: ``GET /metrics`` (Prometheus text) and ``GET /api/stats``
(JSON)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from offload.proxy.state import ProxyState


async def metrics(request: Request, state: ProxyState) -> Response:
    """``GET /metrics``: Prometheus text."""
    gauges = {
        "context_size_tokens": (
            "the upstream's context size (n_ctx) the proxy budgets against",
            float(await state.n_ctx()),
        ),
        "exact_token_counts": (
            "1 while token counts come from the upstream's /tokenize, 0 while estimated offline",
            1.0 if state.counter.exact else 0.0,
        ),
        "token_calibration_ratio": (
            "offline token estimates are scaled by this to match the upstream's counts",
            state.counter.ratio,
        ),
    }
    return PlainTextResponse(
        state.metrics.prometheus(gauges), media_type="text/plain; version=0.0.4"
    )


async def stats(request: Request, state: ProxyState) -> Response:
    """``GET /api/stats``: JSON totals and sessions, live and cumulative."""
    await state.n_ctx()
    return JSONResponse(state.stats())
