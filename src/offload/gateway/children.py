"""Stdio upstream processes that never outlive the gateway.

The SDK's stdio client stops its server when the client closes, but a gateway killed by
SIGTERM (or exiting while a child is still in its handshake) never runs that code, and the
children, each in its own session, were left running under PID 1. Here every child is
spawned in its own process group and recorded while it lives; the owning task stops it
on close (stdin closed, a short grace, then the whole group killed), and
:func:`kill_all` is the last resort the gateway's exit path always runs.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import anyio
import anyio.abc
import mcp_types as types
from mcp.client._transport import TransportStreams
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from offload.core.text.lines import DroppedLine, StreamLines
from offload.gateway.oversize import answered_id, dropped_answer, too_large

log = logging.getLogger("offload.gateway")

_GRACE_S = 1.0  # a child that exits by itself when its stdin closes
_TERM_S = 1.0  # then SIGTERM to its group, then SIGKILL
_live: set[int] = set()  # pids (= process group ids) of the children alive now
CANCELLED = "notifications/cancelled"


def live_children() -> frozenset[int]:
    """The pids of the upstream children alive now (each leads its own process group)."""
    return frozenset(_live)


def kill_all() -> None:
    """SIGKILL every live child's process group, at once (the exit path's last resort)."""
    for pid in list(_live):
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        _live.discard(pid)


def _parse(line: bytes) -> SessionMessage | Exception:
    text = line.decode("utf-8", "replace")
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(text, by_name=False))
    except ValueError as exc:  # not JSON-RPC: the session hands it to the message handler
        return exc


class _Pending:
    """The ids of our requests to a child not answered yet: a dropped line that answers
    one of them is answered here with an error naming the bound."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.ids: set[types.RequestId] = set()

    def sent(self, message: SessionMessage) -> None:
        sent = message.message
        if isinstance(sent, types.JSONRPCRequest):
            self.ids.add(sent.id)
        elif isinstance(sent, types.JSONRPCNotification) and sent.method == CANCELLED:
            # a request given up (its timeout) is answered by no one: not kept for ever
            self.ids.discard((sent.params or {}).get("requestId"))

    def received(self, line: bytes | DroppedLine) -> SessionMessage | Exception:
        """What the session gets for ``line``: the message, an error answering the request a
        dropped line answered, or a ValueError (handed on as output that is not JSON-RPC)."""
        if isinstance(line, DroppedLine):
            rid = answered_id(line.head, line.tail)
            if rid is not None and rid in self.ids:
                self.ids.discard(rid)
                return SessionMessage(dropped_answer(rid, line.size, self.limit))
            return ValueError(too_large(line.size, self.limit).replace("its answer", "a line", 1))
        got = _parse(line)
        if isinstance(got, SessionMessage) and isinstance(
            got.message, types.JSONRPCResponse | types.JSONRPCError
        ):
            self.ids.discard(got.message.id)
        return got


@asynccontextmanager
async def stdio_child(
    params: StdioServerParameters, max_line: int
) -> AsyncIterator[TransportStreams]:
    """Run ``params`` as a child speaking JSON-RPC lines on stdin/stdout; stop it on exit.
    A line longer than ``max_line`` bytes is dropped as it arrives, never held whole."""
    process = await anyio.open_process(
        [params.command, *params.args],
        env=get_default_environment() | (params.env or {}),
        cwd=params.cwd,
        stderr=sys.stderr,
        start_new_session=True,
    )
    _live.add(process.pid)  # no await since the spawn: a cancellation cannot slip in here
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    pending = _Pending(max_line)

    async def reader() -> None:
        assert process.stdout is not None
        lines = StreamLines(max_line)
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async with read_writer:
                async for chunk in process.stdout:
                    for line in lines.feed(chunk):
                        if isinstance(line, DroppedLine) or line.strip():
                            await read_writer.send(pending.received(line))

    async def writer() -> None:
        assert process.stdin is not None
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async with write_reader:
                async for message in write_reader:
                    pending.sent(message)
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((data + "\n").encode("utf-8", "surrogatepass"))
        await read_writer.aclose()  # the child stopped reading: end the session

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(writer)
            try:
                yield read_stream, write_stream
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process)
        for stream in (read_stream, write_stream, read_writer, write_reader):
            stream.close()


async def _stop(process: anyio.abc.Process) -> None:
    try:
        if process.stdin is not None:
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await process.stdin.aclose()
        with anyio.move_on_after(_GRACE_S):
            while process.returncode is None:
                await anyio.sleep(0.02)
        # the group may hold grandchildren even when the leader exited
        await terminate_posix_process_tree(process, _TERM_S)
    finally:
        _live.discard(process.pid)
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if process.stdout is not None:
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await process.stdout.aclose()
        log.debug("upstream child %d stopped", process.pid)
