"""Serving over stdio: what MCP clients spawn.

A client may write its last requests and close stdin at once (a script piping requests
in). The SDK's loop ends when stdin does and drops the requests still running, so the
streams are relayed here: when stdin ends, the server's side of it stays open until every
request read has been answered (or :data:`DRAIN_S` has passed), then closes.
"""

from __future__ import annotations

from typing import Any

import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

#: How long the requests still running when stdin closes may take to be answered.
DRAIN_S = 300.0
#: The notification by which a client withdraws a request it sent.
CANCELLED = "notifications/cancelled"

Incoming = SessionMessage | Exception


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


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one client on stdin/stdout until it closes them and has its answers."""
    async with stdio_server() as (read_stream, write_stream):
        to_server, server_reads = anyio.create_memory_object_stream[Incoming](0)
        server_writes, to_client = anyio.create_memory_object_stream[SessionMessage](0)
        relay = _Relay()
        async with anyio.create_task_group() as tg:
            tg.start_soon(relay.inbound, read_stream, to_server)
            tg.start_soon(relay.outbound, to_client, write_stream)
            async with server_writes:
                await server.run(
                    server_reads, server_writes, server.create_initialization_options()
                )


def run_stdio(server: Server[Any]) -> None:
    """Blocking :func:`serve_stdio`."""
    anyio.run(serve_stdio, server)
