"""``GET /v1/models``: the upstream's model list with the true context size and the
optional alias."""

from __future__ import annotations

import time

import httpx
from starlette.requests import Request
from starlette.responses import Response

from offload.proxy.state import ProxyState
from offload.proxy.transport.errors_http import TextJSON, openai_error
from offload.proxy.transport.forward import request_headers, response_headers


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
    try:
        return TextJSON(listing)
    except ValueError:  # NaN or Infinity in the upstream's listing: passed on as it came
        return Response(resp.content, resp.status_code, headers=response_headers(resp.headers))
