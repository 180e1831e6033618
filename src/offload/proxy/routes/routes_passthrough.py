"""Every other path (``/props``, ``/tokenize``, ``/health``, ``/v1/completions`` …):
forwarded to the upstream unchanged and streamed back."""

from __future__ import annotations

import httpx
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from offload.proxy.state import ProxyState
from offload.proxy.transport.errors_http import openai_error
from offload.proxy.transport.forward import (
    race_disconnect,
    relay,
    request_headers,
    response_headers,
    send_upstream,
)


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
    except httpx.ConnectError as exc:
        return openai_error(
            502, f"cannot reach upstream {state.root}: {type(exc).__name__}", "upstream_unavailable"
        )
    except httpx.HTTPError as exc:
        # connected, then cut off: a server that does not serve a path often answers it
        # (404) and closes before reading a large body, which the send then meets
        return openai_error(
            502,
            f"the upstream {state.root} closed the connection on {request.method} "
            f"{request.url.path} before answering ({type(exc).__name__}); that path is not "
            "one of the proxy's own routes (/v1/chat/completions, /v1/messages, …): check it",
            "upstream_error",
        )
    if resp is None:
        return Response(status_code=499)
    return StreamingResponse(
        relay(resp), status_code=resp.status_code, headers=response_headers(resp.headers)
    )
