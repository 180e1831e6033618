"""Moving bytes between the client and the upstream: headers, relays, disconnect races.

Bodies are relayed as raw bytes (``aiter_raw``: transfer-decoded, never content-decoded) so
the client sees exactly what the upstream sent; the proxy asks for an identity encoding so
it can also read what passes through. The upstream answer is an httpx response or the lean
client's (:mod:`offload.proxy.transport.http1`); both fit :class:`UpstreamReply`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Protocol, TypeVar

import anyio
import httpx
from starlette.requests import Request

from offload.core.sse import SseDecoder, SseEvent
from offload.errors import StoreError, UpstreamError

T = TypeVar("T")


class UpstreamReply(Protocol):
    """What the proxy needs of an upstream answer whose body is still to be read."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    def aiter_raw(self) -> AsyncIterator[bytes]: ...

    async def aread(self) -> bytes: ...

    async def aclose(self) -> None: ...


# An answer that breaks off mid-body, from either client, or whose completion the store
# refused (the writes of what its wire names failed: the answer ends in an error).
BROKEN_OFF = (httpx.HTTPError, UpstreamError, StoreError)

# A pooled connection the upstream closed just as a request went out on it fails like this,
# before any byte of an answer; llama-server closes its connection after every streamed
# answer despite advertising keep-alive, so the next request can lose that race.
_STALE_CONNECTION = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# ``expect``: the proxy has the whole body already; an upstream's 100 Continue would only be
# an interim answer to skip.
_NOT_FORWARDED = HOP_BY_HOP | {
    "host",
    "content-length",
    "accept-encoding",
    "x-offload-token",
    "expect",
}
_NOT_RETURNED = HOP_BY_HOP | {"content-length"}


def request_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The client's headers to send upstream (Authorization included, never logged)."""
    out = {k: v for k, v in headers.items() if k.lower() not in _NOT_FORWARDED}
    out["accept-encoding"] = "identity"
    return out


def response_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The upstream's response headers to give the client."""
    return {k: v for k, v in headers.items() if k.lower() not in _NOT_RETURNED}


async def send_upstream(client: httpx.AsyncClient, request: httpx.Request) -> httpx.Response:
    """Send ``request`` (its body already in memory) and return once the headers arrived.

    A request that fails before any answer, as on a kept-alive connection the upstream has
    just closed, is sent once more (on a fresh connection: the pool drops the dead one).
    """
    try:
        return await client.send(request, stream=True)
    except _STALE_CONNECTION:
        return await client.send(request, stream=True)


async def race_disconnect(request: Request, work: Callable[[], Awaitable[T]]) -> T | None:
    """Run ``work`` unless the client disconnects first; ``None`` when it did (work cancelled).

    Used while no response is streaming yet (waiting for the upstream's headers, or for a
    whole non-streaming answer); once a StreamingResponse runs, Starlette itself cancels the
    body on disconnect.
    """
    result: list[T] = []

    async def watch(scope: anyio.CancelScope) -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                scope.cancel()
                return

    # the work runs in this task (its errors propagate unwrapped); a watcher task cancels it
    with anyio.CancelScope() as scope:
        watcher = asyncio.create_task(watch(scope))
        try:
            result.append(await work())
        finally:
            watcher.cancel()
    return result[0] if result else None


async def read_all(resp: UpstreamReply) -> bytes:
    """The whole raw body, closing the response."""
    try:
        return b"".join([chunk async for chunk in resp.aiter_raw()])
    finally:
        await resp.aclose()


async def close_shielded(resp: UpstreamReply) -> None:
    """Close an upstream response even inside a cancelled scope (this is what tells the
    upstream to stop generating)."""
    with anyio.CancelScope(shield=True):
        await resp.aclose()


async def relay(
    resp: UpstreamReply,
    *,
    on_event_json: Callable[[str], None] | None = None,
    on_end: Callable[[bool], None] | None = None,
    on_break: Callable[[BaseException], bytes] | None = None,
) -> AsyncIterator[bytes]:
    """Yield the upstream body chunk by chunk, as it arrives.

    With ``on_event_json``, the data of every SSE event that holds a JSON object is handed
    over (as text) after its bytes have been passed on. ``on_end(completed)`` runs once at
    the end: ``completed`` is False when the client went away or the upstream broke off.
    With ``on_break`` the body is an event stream relayed whole events at a time (a client
    dispatches an event only at its blank line, so this delays nothing it could use), and
    when the upstream breaks off, the bytes ``on_break(error)`` makes (an error event in the
    client's shape) end the stream instead of a half event.
    """
    decoder = SseDecoder() if on_event_json is not None else None

    def watch(events: Iterable[SseEvent]) -> None:
        if on_event_json is not None:
            for event in events:
                if event.data.startswith("{"):
                    on_event_json(event.data)

    completed = False
    held = b""  # with on_break: the incomplete event at the end of what arrived
    try:
        async for chunk in resp.aiter_raw():
            if on_break is not None:
                chunk, held = _whole_events(held + chunk, len(held))
                if not chunk:
                    continue
            yield chunk
            if decoder is not None:
                watch(decoder.feed(chunk))
        if held:  # the body ended without a blank line after its last event
            yield held
            if decoder is not None:
                watch(decoder.feed(held))
        if decoder is not None:
            watch(decoder.close())
        completed = True
    except BROKEN_OFF as exc:
        completed = False  # the upstream broke off mid-stream
        if on_break is not None:
            yield on_break(exc)
    finally:
        await close_shielded(resp)
        if on_end is not None:
            on_end(completed)


# a blank line ends an SSE event; lines end with CRLF, LF or CR
_EVENT_ENDS = (b"\n\n", b"\r\r", b"\n\r\n")


def _whole_events(data: bytes, seen: int) -> tuple[bytes, bytes]:
    """``data`` split after its last complete event: (whole events, the rest). ``seen``:
    how many leading bytes were searched before (only the new ones, and the few before
    them a boundary may straddle, are searched again)."""
    start = max(0, seen - 2)
    end = 0
    for mark in _EVENT_ENDS:
        at = data.rfind(mark, start)
        if at >= 0:
            end = max(end, at + len(mark))
    if not end:
        return b"", data
    return data[:end], data[end:]
