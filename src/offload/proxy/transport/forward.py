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

from offload.core.http.sse import EventBound, SseDecoder, SseEvent
from offload.errors import StoreError, UpstreamError, UpstreamTooLarge

#: The bound on an upstream's open event when none is given (``proxy.max_event_mb``'s default).
MAX_EVENT_BYTES = 4 * 1024 * 1024
#: The bound on a whole upstream answer when none is given (``proxy.max_answer_mb``'s default).
MAX_ANSWER_BYTES = 64 * 1024 * 1024

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


async def read_all(resp: UpstreamReply, limit: int = MAX_ANSWER_BYTES) -> bytes:
    """The whole raw body, closing the response; a body past ``limit`` bytes is not held:
    the response is closed (which cancels the upstream's work) and
    :class:`UpstreamTooLarge` raised."""
    parts: list[bytes] = []
    size = 0
    try:
        async for chunk in resp.aiter_raw():
            size += len(chunk)
            if size > limit:
                raise answer_too_large(size, limit)
            parts.append(chunk)
        return b"".join(parts)
    finally:
        await close_shielded(resp)


async def read_capped(resp: UpstreamReply, limit: int = MAX_ANSWER_BYTES) -> bytes:
    """At most the first ``limit`` bytes of the body (an error's body: what it says is
    passed on, cut), closing the response."""
    parts: list[bytes] = []
    size = 0
    try:
        async for chunk in resp.aiter_raw():
            parts.append(chunk[: limit - size])
            size += len(parts[-1])
            if size >= limit:
                break
        return b"".join(parts)
    finally:
        await close_shielded(resp)


def answer_too_large(size: int, limit: int) -> UpstreamTooLarge:
    """The error of a whole upstream answer that passed ``limit`` bytes."""
    return UpstreamTooLarge(
        f"the upstream's answer passed {size} bytes, over the limit of {limit} bytes "
        "(proxy.max_answer_mb); its request was cancelled"
    )


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
    max_event: int = MAX_EVENT_BYTES,
) -> AsyncIterator[bytes]:
    """Yield the upstream body chunk by chunk, as it arrives.

    With ``on_event_json``, the data of every SSE event that holds a JSON object is handed
    over (as text) after its bytes have been passed on. ``on_end(completed)`` runs once at
    the end: ``completed`` is False when the client went away or the upstream broke off.
    With ``on_break`` the body is an event stream relayed whole events at a time (a client
    dispatches an event only at its blank line, so this delays nothing it could use), and
    when the upstream breaks off, the bytes ``on_break(error)`` makes (an error event in the
    client's shape) end the stream instead of a half event. An event still open past
    ``max_event`` bytes (a line without end, lines without a blank one) is such a break:
    the upstream request is closed, which cancels it.
    """
    decoder = SseDecoder() if on_event_json is not None else None

    def watch(events: Iterable[SseEvent]) -> None:
        if on_event_json is not None:
            for event in events:
                if event.data.startswith("{"):
                    on_event_json(event.data)

    completed = False
    bound = EventBound() if on_break is not None else None
    held: list[bytes] = []  # with on_break: the open event at the end of what arrived
    try:
        async for chunk in resp.aiter_raw():
            if bound is not None:
                chunk, held = _whole_events(bound, chunk, held, max_event)
                if not chunk:
                    continue
            yield chunk
            if decoder is not None:
                watch(decoder.feed(chunk))
        if held:  # the body ended without a blank line after its last event
            rest = b"".join(held)
            yield rest
            if decoder is not None:
                watch(decoder.feed(rest))
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


def event_too_long(pending: int, limit: int) -> UpstreamTooLarge:
    """The error of an upstream event stream whose open event passed ``limit`` bytes."""
    return UpstreamTooLarge(
        f"the upstream sent {pending} bytes of one server-sent event without ending it, past "
        f"the limit of {limit} bytes (proxy.max_event_mb); its request was cancelled"
    )


async def bounded_events(chunks: AsyncIterator[bytes], limit: int) -> AsyncIterator[bytes]:
    """``chunks`` as they come, raising :class:`UpstreamTooLarge` once the event they hold
    open passes ``limit`` bytes (so a reader keeping the open event keeps at most that)."""
    bound = EventBound()
    async for chunk in chunks:
        bound.feed(chunk)
        if bound.pending > limit:
            raise event_too_long(bound.pending, limit)
        yield chunk


def _whole_events(
    bound: EventBound, chunk: bytes, held: list[bytes], limit: int
) -> tuple[bytes, list[bytes]]:
    """(the whole events that ``chunk`` completes, with what was ``held`` before them; the
    open event after them, as parts): linear in the bytes, however they are chunked."""
    end = bound.feed(chunk)
    if bound.pending > limit:
        raise event_too_long(bound.pending, limit)
    if not end:
        if chunk:
            held.append(chunk)
        return b"", held
    whole = b"".join((*held, chunk[:end])) if held else chunk[:end]
    return whole, [chunk[end:]] if end < len(chunk) else []
