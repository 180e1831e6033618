"""Serving over stdio: what MCP clients spawn.

A client may write its last requests and close stdin at once (a script piping requests
in). The SDK's loop ends when stdin does and drops the requests still running, so the
streams are relayed here: when stdin ends, the server's side of it stays open until every
request read has been answered (or :data:`DRAIN_S` has passed), then closes.

The SDK reads stdin a whole line at a time, however long: one line without end grew the
server's memory without bound. Lines are read here (:class:`BoundedLines`), each at most
``http.max_body_mb`` (the bound on an HTTP request body, the same message over another
transport): a longer line is read to its end in pieces and dropped, with one line on
stderr and a JSON-RPC error (id null: the line was never parsed) to the client, and the
next line is served. As the SDK does for its own reader, fd 0 points at the null device
while serving (a handler or a child reads end of file, never the client's messages).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO, cast

import anyio
import anyio.to_thread
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import (
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
)

from offload.config import HTTP_DEFAULTS

#: How long the requests still running when stdin closes may take to be answered.
DRAIN_S = 300.0
#: The notification by which a client withdraws a request it sent.
CANCELLED = "notifications/cancelled"

Incoming = SessionMessage | Exception
#: How much of a dropped line is read at a time (the most of it ever held).
_PIECE = 1 << 20
#: JSON-RPC's code for a request that is not a valid one.
INVALID_REQUEST = -32600


def too_long_message(size: int, limit: int) -> str:
    """Why a line of ``size`` bytes (or more) was dropped."""
    return (
        f"a message of {size} bytes on stdin was dropped: the limit is {limit} bytes "
        "(http.max_body_mb); the server reads the next line"
    )


class BoundedLines:
    """The lines of ``source`` (a binary stream) as text, for the SDK's stdio reader: each
    at most ``limit`` bytes; a longer one is read to its end in pieces, never held whole,
    and reported to ``on_drop(size)`` instead of being given."""

    def __init__(
        self, source: BinaryIO, limit: int, on_drop: Callable[[int], Awaitable[None]]
    ) -> None:
        self.source = source
        self.limit = limit
        self.on_drop = on_drop

    def __aiter__(self) -> BoundedLines:
        return self

    async def __anext__(self) -> str:
        while True:
            got = await anyio.to_thread.run_sync(self._next)
            if got is None:
                raise StopAsyncIteration
            if isinstance(got, bytes):
                return got.decode("utf-8", "replace")
            await self.on_drop(got)

    def _next(self) -> bytes | int | None:
        """The next line; the size of a line too long, read to its end; None at the end."""
        line = self.source.readline(self.limit + 1)
        if not line:
            return None
        if line.endswith(b"\n") or len(line) <= self.limit:
            return line
        size = len(line)
        while not line.endswith(b"\n"):
            line = self.source.readline(_PIECE)
            if not line:
                break
            size += len(line)
        return size


@contextmanager
def claimed_stdin() -> Iterator[BinaryIO]:
    """The client's stdin, read from a private copy of fd 0 while fd 0 itself points at the
    null device; restored after. The copy is never closed: a worker thread may still be
    blocked reading it when serving ends."""
    try:
        private = os.dup(0)  # not inheritable: no child gets the client's messages
        null = os.open(os.devnull, os.O_RDONLY)
    except OSError:  # no fd 0 to divert (best effort, as the SDK's): read it in place
        yield sys.stdin.buffer
        return
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    try:
        yield os.fdopen(private, "rb", closefd=False)
    finally:
        os.dup2(private, 0)


class _Relay:
    """The requests read and not answered yet, by id."""

    def __init__(self) -> None:
        self.open: set[Any] = set()
        self.answered = anyio.Event()

    async def inbound(
        self, source: ObjectReceiveStream[Incoming], sink: ObjectSendStream[Incoming]
    ) -> None:
        async with source, sink:
            async for item in source:
                if isinstance(item, SessionMessage):
                    self._note(item.message)
                await sink.send(item)
            with anyio.move_on_after(DRAIN_S):
                while self.open:
                    await self.answered.wait()
                    self.answered = anyio.Event()

    def _note(self, message: Any) -> None:
        """Count a request as open; a request the client cancelled is answered by no one
        (the protocol says so), so it is open no longer: it must not hold the exit for
        :data:`DRAIN_S` once stdin closes."""
        if isinstance(message, JSONRPCRequest):
            self.open.add(message.id)
        elif isinstance(message, JSONRPCNotification) and message.method == CANCELLED:
            params = message.params or {}
            self.open.discard(params.get("requestId"))
            self.answered.set()

    async def outbound(
        self, source: ObjectReceiveStream[SessionMessage], sink: ObjectSendStream[SessionMessage]
    ) -> None:
        async with source, sink:
            async for item in source:
                await sink.send(item)
                if isinstance(item.message, JSONRPCResponse | JSONRPCError):
                    self.open.discard(item.message.id)
                    self.answered.set()


async def serve_stdio(
    server: Server[Any],
    source: BinaryIO,
    max_line: int = HTTP_DEFAULTS.max_body_bytes,
    who: str = "offload mcp",
) -> None:
    """Serve one client on ``source`` (its stdin) and stdout until it closes them and has
    its answers; a line of ``source`` longer than ``max_line`` bytes is dropped (said on
    stderr after ``who``, the command serving)."""
    server_writes, to_client = anyio.create_memory_object_stream[SessionMessage](0)
    refusals = server_writes.clone()  # the answers to dropped lines go out with the rest

    async def dropped(size: int) -> None:
        message = too_long_message(size, max_line)
        print(f"{who}: {message}", file=sys.stderr, flush=True)
        error = ErrorData(code=INVALID_REQUEST, message=message)
        await refusals.send(SessionMessage(JSONRPCError(jsonrpc="2.0", id=None, error=error)))

    lines = BoundedLines(source, max_line, dropped)
    # the SDK only iterates what it is given as stdin
    stdin = cast("anyio.AsyncFile[str]", lines)
    async with stdio_server(stdin=stdin) as (read_stream, write_stream):
        to_server, server_reads = anyio.create_memory_object_stream[Incoming](0)
        relay = _Relay()
        async with anyio.create_task_group() as tg:
            tg.start_soon(relay.inbound, read_stream, to_server)
            tg.start_soon(relay.outbound, to_client, write_stream)
            async with server_writes, refusals:
                await server.run(
                    server_reads, server_writes, server.create_initialization_options()
                )


def run_stdio(server: Server[Any], max_line: int = HTTP_DEFAULTS.max_body_bytes) -> None:
    """Blocking :func:`serve_stdio` on this process's stdin (lines of at most ``max_line``
    bytes)."""
    with claimed_stdin() as source:
        anyio.run(serve_stdio, server, source, max_line)
