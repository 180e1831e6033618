"""The host's lifespan: every sub-app's own ASGI lifespan, in order, stopped in reverse."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from offload.errors import OffloadError
from offload.serve.heap import trim_heap

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message

    from offload.gateway.server import Gateway
    from offload.store import Store


class Served(Protocol):
    """What the lifespans use of host.Served (which imports this module)."""

    @property
    def store(self) -> Store: ...

    @property
    def proxy(self) -> ASGIApp: ...

    @property
    def mcp(self) -> ASGIApp: ...

    @property
    def gateway(self) -> Gateway | None: ...

    @property
    def gateway_app(self) -> ASGIApp | None: ...


# how often a serving process closes what idles (see housekeeping)
HOUSEKEEPING_S = 5.0
# gateway upstreams get this long to close their connections before they are cancelled
UPSTREAM_STOP_S = 5.0


@contextlib.asynccontextmanager
async def lifespans(served: Served) -> AsyncIterator[None]:
    """Start the proxy, the MCP session manager, the gateway's upstreams and its session
    manager, in that order; stop them in reverse, then close the store.

    The store is closed here, not only after ``uvicorn.run`` returns: on SIGTERM uvicorn
    re-raises the signal once shutdown is complete, so code after it never runs.
    """
    async with AsyncExitStack() as stack:
        stack.callback(served.store.close)
        await stack.enter_async_context(asgi_lifespan(served.proxy, "proxy"))
        await stack.enter_async_context(asgi_lifespan(served.mcp, "mcp"))
        if served.gateway is not None and served.gateway_app is not None:
            await stack.enter_async_context(gateway_upstreams(served.gateway))
            await stack.enter_async_context(asgi_lifespan(served.gateway_app, "gateway"))
        await stack.enter_async_context(housekeeping(served.store))
        yield


@contextlib.asynccontextmanager
async def housekeeping(store: Store, every_s: float = HOUSEKEEPING_S) -> AsyncIterator[None]:
    """While serving, every ``every_s``: close the store connections of worker threads that
    have ended, and hand memory freed since back to the system (every time, not only when a
    connection closed: the heap's free pages are mostly what searches, puts and the
    in-memory index's merges freed, and glibc keeps them until it is asked; a soak's RSS
    kept ~30 % of its peak in them).

    The call itself goes through the worker pool, which is what lets anyio stop workers
    idle for 10 s (it prunes them only when it is next used): after a burst of load the
    extra threads, their connections and their memory go within ~20 s, not at the next
    burst.
    """

    async def tick() -> None:
        while True:
            await anyio.sleep(every_s)
            await anyio.to_thread.run_sync(store.release_idle)
            await anyio.to_thread.run_sync(trim_heap)

    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def asgi_lifespan(app: ASGIApp, name: str) -> AsyncIterator[None]:
    """Run ``app``'s own ASGI lifespan, as a server would: startup on entry, shutdown on exit.

    The app runs in a task of its own for the whole span, so whatever its lifespan opens
    (task groups, the MCP session manager) is closed by the task that opened it.
    """
    to_app, app_inbox = anyio.create_memory_object_stream[dict[str, Any]](1)
    app_outbox, from_app = anyio.create_memory_object_stream[dict[str, Any]](1)
    scope: dict[str, Any] = {
        "type": "lifespan",
        "asgi": {"version": "3.0", "spec_version": "2.0"},
        "state": {},
    }

    async def receive() -> Message:
        return await app_inbox.receive()

    async def send(message: Message) -> None:
        await app_outbox.send(dict(message))

    async def run_app() -> None:
        async with app_outbox:  # closed when the app returns, so nobody waits forever
            await app(scope, receive, send)

    async with anyio.create_task_group() as tg, to_app, from_app:
        tg.start_soon(run_app)
        await to_app.send({"type": "lifespan.startup"})
        await _expect(from_app, "lifespan.startup", name)
        try:
            yield
        finally:
            await to_app.send({"type": "lifespan.shutdown"})
            await _expect(from_app, "lifespan.shutdown", name)


async def _expect(stream: MemoryObjectReceiveStream[dict[str, Any]], phase: str, name: str) -> None:
    try:
        message = await stream.receive()
    except anyio.EndOfStream:
        raise OffloadError(f"{name}: its app returned during {phase}") from None
    if message.get("type") != f"{phase}.complete":
        raise OffloadError(f"{name}: {phase} failed: {message.get('message', '')}")


@contextlib.asynccontextmanager
async def gateway_upstreams(gateway: Gateway) -> AsyncIterator[None]:
    """The gateway's upstream connections, each owned by its task for its whole life.

    Started in the background: a slow or broken upstream does not hold up the proxy and
    the MCP tools (the gateway's catalog fills in, with list_changed, as upstreams connect).
    """
    from offload.gateway.children import kill_all

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(gateway.start, tg)
            try:
                yield
            finally:
                gateway.stop()
                # the upstream tasks close their connections and return; cancel stragglers
                tg.cancel_scope.deadline = anyio.current_time() + UPSTREAM_STOP_S
    finally:
        kill_all()  # a stdio upstream child never outlives the gateway
