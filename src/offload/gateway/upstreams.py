"""Connections to upstream MCP servers: one owning task per connection, reconnecting.

The mcp SDK's stdio client must be closed by the task that opened it, so each upstream
runs :meth:`Upstream.run` in its own task for its whole life. Other tasks call through
the live client; a call that finds the connection gone marks it lost, and the owning
task reconnects with a capped backoff while the other upstreams keep serving.
"""

from __future__ import annotations

import logging
import math
import re
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.client.session import MessageHandlerFnT
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from mcp import Client
from offload.config import GatewaySettings
from offload.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable
from offload.gateway.children import stdio_child
from offload.gateway.config import ServerConfig
from offload.gateway.httpbound import http_upstream
from offload.gateway.oversize import dropped_reason

log = logging.getLogger("offload.gateway")

State = Literal["starting", "ready", "unavailable", "stopped"]
# how servers word a 404 to an unknown session id (SDK server, SDK client fallback, others)
_SESSION_GONE = re.compile(
    r"session (not found|terminated|expired)|(unknown|invalid|expired) session", re.IGNORECASE
)
ChangeKind = Literal["tools", "resources", "prompts", "state"]
OnChange = Callable[["Upstream", ChangeKind], Awaitable[None]]
# the SDK's own protocol: a plain Callable alias does not match its named parameter
MessageHandler = MessageHandlerFnT
#: Builds the client of a connection (tests connect in-process servers this way).
Connector = Callable[[MessageHandler], Client]


async def _ignore_change(_u: Upstream, _k: ChangeKind) -> None:
    return None


class Upstream:
    """One upstream server: its live client, its catalog, and its health."""

    def __init__(
        self,
        config: ServerConfig,
        settings: GatewaySettings,
        on_change: OnChange = _ignore_change,
        connector: Connector | None = None,
    ) -> None:
        self.config = config
        self.name = config.name
        self.settings = settings
        self.timeout_s = config.timeout_s or settings.call_timeout_s
        self.on_change = on_change
        self.connector = connector
        self.state: State = "starting"
        self.error = ""
        self.tools: list[types.Tool] = []
        self.resources: list[types.Resource] = []
        self.templates: list[types.ResourceTemplate] = []
        self.prompts: list[types.Prompt] = []
        self.instructions = ""
        self.connects = 0
        self.noise = ""  # the last line it wrote that was not JSON-RPC
        self.catalog_cut = ""  # why its tools were cut to the bounds (empty: all kept)
        self._client: Client | None = None
        self._attempted = anyio.Event()
        self._wake = anyio.Event()
        self._lost = False
        self._stopping = False
        self._dirty: set[ChangeKind] = set()
        self._connecting: anyio.CancelScope | None = None
        self.stopped = anyio.Event()  # set when run() has closed its connection and returned

    # -- the owning task ------------------------------------------------------------------

    async def run(self) -> None:
        """Own the connection until :meth:`stop`: connect, serve, reconnect after a loss."""
        backoff = 0.25
        while not self._stopping:
            try:
                await self._serve_once()
                backoff = 0.25
            # the connection boundary: whatever ended it, report it and try again
            except Exception as exc:  # noqa: BLE001
                self._fail(_describe(exc))
            if self._stopping:
                break
            await self._sleep(backoff)
            backoff = min(backoff * 2, self.settings.reconnect_max_s)
        self.state = "stopped"
        self._attempted.set()
        self.stopped.set()

    async def _serve_once(self) -> None:
        self._lost = False
        with anyio.CancelScope() as scope:
            self._connecting = scope
            # the deadline covers spawning and the handshake only; lifted once connected
            scope.deadline = anyio.current_time() + self.settings.connect_timeout_s
            async with self._make_client() as client:
                await self._refresh(client, {"tools", "resources", "prompts"})
                scope.deadline = math.inf
                self._connecting = None
                self.instructions = client.instructions or ""
                self._client = client
                self.state = "ready"
                self.error = ""
                self.connects += 1
                self._attempted.set()
                log.info("upstream %s ready: %d tools", self.name, len(self.tools))
                await self.on_change(self, "state")
                try:
                    await self._serve(client)
                finally:
                    self._client = None
        if scope.cancelled_caught and not self._stopping:
            raise UpstreamTimeout(
                f"upstream {self.name!r} did not finish connecting within "
                f"{self.settings.connect_timeout_s:g}s"
            )

    async def _serve(self, client: Client) -> None:
        while not self._stopping and not self._lost:
            await self._wake.wait()
            self._wake = anyio.Event()
            if self._stopping or self._lost:
                break
            dirty, self._dirty = self._dirty, set()
            if dirty:
                await self._refresh_within(client, dirty)
                for kind in sorted(dirty):
                    await self.on_change(self, kind)
        if self._lost and not self._stopping:
            raise UpstreamUnavailable(f"upstream {self.name!r}: {self.error or 'connection lost'}")

    async def _refresh_within(self, client: Client, kinds: set[ChangeKind]) -> None:
        """A refresh after a change notice, within the call timeout: an upstream that says
        its lists changed and never answers the listing is reconnected, not waited on for
        ever (which held the connection, later notices and the gateway's stop)."""
        try:
            with anyio.fail_after(self.timeout_s):
                await self._refresh(client, kinds)
        except TimeoutError:
            raise UpstreamTimeout(
                f"upstream {self.name!r} did not list its changed {', '.join(sorted(kinds))} "
                f"within {self.timeout_s:g}s; reconnecting"
            ) from None

    def _fail(self, reason: str) -> None:
        was = self.state
        self.state = "unavailable"
        self.error = reason
        self._attempted.set()
        if was != "unavailable":
            log.warning("upstream %s unavailable: %s", self.name, reason)

    async def _sleep(self, seconds: float) -> None:
        with anyio.move_on_after(seconds):
            while not self._stopping:
                await self._wake.wait()
                self._wake = anyio.Event()

    def _make_client(self) -> Client:
        if self.connector is not None:
            return self.connector(self._on_message)
        cfg = self.config
        limit = self.settings.max_upstream_message_mb * 1024 * 1024
        if cfg.url:
            transport = http_upstream(cfg.url, dict(cfg.headers), limit)
            return Client(transport, mode="legacy", message_handler=self._on_message)
        params = StdioServerParameters(
            command=cfg.command,
            args=list(cfg.args),
            env=dict(cfg.env) or None,
            cwd=cfg.cwd or None,
        )
        return Client(stdio_child(params, limit), mode="legacy", message_handler=self._on_message)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, ValueError):
            # a line that is not JSON-RPC (a stray log line, garbage): the connection is
            # still good; a call it left unanswered ends by its timeout, which names it
            self.noise = _describe(message)
            log.warning("upstream %s wrote a line that is not JSON-RPC: %s", self.name, self.noise)
        elif isinstance(message, Exception):
            self.mark_lost(_describe(message))
        elif isinstance(message, types.ToolListChangedNotification):
            self._mark_dirty("tools")
        elif isinstance(message, types.ResourceListChangedNotification):
            self._mark_dirty("resources")
        elif isinstance(message, types.PromptListChangedNotification):
            self._mark_dirty("prompts")

    def _mark_dirty(self, kind: ChangeKind) -> None:
        self._dirty.add(kind)
        self._wake.set()

    async def _refresh(self, client: Client, kinds: set[ChangeKind]) -> None:
        caps = client.server_capabilities
        if "tools" in kinds and caps.tools is not None:
            self.tools = await self._list_tools(client)
        if "resources" in kinds and caps.resources is not None:
            self.resources = await _all_pages(client.list_resources, "resources")
            self.templates = await _all_pages(client.list_resource_templates, "resource_templates")
        if "prompts" in kinds and caps.prompts is not None:
            self.prompts = await _all_pages(client.list_prompts, "prompts")

    async def _list_tools(self, client: Client) -> list[types.Tool]:
        """Its tools, page by page, cut to what fits ``max_upstream_tools`` and
        ``max_upstream_catalog_mb`` (no page is asked for once the count is full)."""
        fit = CatalogFit(
            self.settings.max_upstream_tools, self.settings.max_upstream_catalog_mb * 1024 * 1024
        )
        cursor: str | None = None
        for _page in range(MAX_PAGES):
            result = await client.list_tools(cursor=cursor)
            for tool in result.tools:
                fit.offer(tool)
            cursor = result.next_cursor
            if not cursor or fit.full:
                break
        cut = fit.cut()
        if cut and cut != self.catalog_cut:
            log.warning("upstream %s: %s", self.name, cut)
        self.catalog_cut = cut
        return fit.kept

    # -- used by other tasks ---------------------------------------------------------------

    async def wait_attempted(self, timeout: float) -> None:
        """Wait until the first connection attempt succeeded or failed (or ``timeout``)."""
        with anyio.move_on_after(timeout):
            await self._attempted.wait()

    def mark_lost(self, reason: str) -> None:
        """The connection is gone: let the owning task reconnect."""
        if self._stopping:
            return
        self._lost = True
        self.error = reason
        self.state = "unavailable"
        self._wake.set()

    def stop(self) -> None:
        """Ask the owning task to close the connection and return."""
        self._stopping = True
        self._wake.set()
        if self._connecting is not None:  # still in its handshake: give up on it now
            self._connecting.cancel()

    def client(self) -> Client:
        """The live client, or UpstreamUnavailable saying why there is none."""
        if self._client is None or self.state != "ready":
            why = f": {self.error}" if self.error else ""
            raise UpstreamUnavailable(
                f"upstream {self.name!r} is {self.state}{why}; it reconnects on its own, try again"
            )
        return self._client

    async def call_tool(self, tool: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        """Call ``tool`` upstream within the server's timeout; failures raise UpstreamError."""
        client = self.client()
        try:
            with anyio.fail_after(self.timeout_s):
                return await client.call_tool(tool, arguments)
        except TimeoutError as exc:
            noise = f" (it wrote output that is not JSON-RPC: {self.noise})" if self.noise else ""
            raise UpstreamTimeout(
                f"upstream {self.name!r} did not answer {tool} within {self.timeout_s:g}s{noise}"
            ) from exc
        except (ValueError, RuntimeError) as exc:
            # the SDK's validation of the answer (pydantic, output schema): the upstream
            # answered, but not with a tool result; the client gets an error result
            raise UpstreamError(
                f"upstream {self.name!r} answered {tool} with an invalid tool result: "
                f"{_describe(exc)}"
            ) from exc
        except MCPError as exc:
            self._dropped(tool, exc)
            if self._session_gone(exc):
                self.mark_lost(str(exc))
                raise UpstreamUnavailable(
                    f"upstream {self.name!r} no longer knows this session during {tool} "
                    f"({exc}; it restarted or expired it); reconnecting, try again"
                ) from exc
            if _connection_gone(exc):
                self.mark_lost(str(exc))
                raise UpstreamUnavailable(
                    f"upstream {self.name!r} failed during {tool}: {exc}; reconnecting"
                ) from exc
            raise
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            self.mark_lost(_describe(exc))
            raise UpstreamUnavailable(
                f"upstream {self.name!r} failed during {tool}: connection lost; reconnecting"
            ) from exc

    async def request(self, what: str, fn: Callable[[Client], Awaitable[Any]]) -> Any:
        """Run another request (resources, prompts) with the same timeout and error mapping."""
        client = self.client()
        try:
            with anyio.fail_after(self.timeout_s):
                return await fn(client)
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"upstream {self.name!r} did not answer {what} within {self.timeout_s:g}s"
            ) from exc
        except (ValueError, RuntimeError) as exc:
            raise UpstreamError(
                f"upstream {self.name!r} answered {what} invalidly: {_describe(exc)}"
            ) from exc
        except MCPError as exc:
            self._dropped(what, exc)
            if _connection_gone(exc) or self._session_gone(exc):
                self.mark_lost(str(exc))
                raise UpstreamUnavailable(f"upstream {self.name!r} failed: {exc}") from exc
            raise
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            self.mark_lost(_describe(exc))
            raise UpstreamUnavailable(f"upstream {self.name!r}: connection lost") from exc

    def _dropped(self, what: str, exc: MCPError) -> None:
        """An answer past ``[gateway] max_upstream_message_mb`` was dropped: said in the log
        and to the caller as UpstreamError (the connection is still good)."""
        reason = dropped_reason(exc.error.message)
        if reason is not None:
            log.warning("upstream %s answered %s past the bound: %s", self.name, what, reason)
            raise UpstreamError(f"upstream {self.name!r} answered {what}, but {reason}") from exc

    def _session_gone(self, exc: MCPError) -> bool:
        """A Streamable HTTP upstream answered 404 to our session id (restarted, expired).

        The spec says to start a new session then; the SDK client surfaces the 404 only
        as an error (the SDK server's "Session not found", its own "Session terminated").
        """
        return self.config.transport == "http" and bool(_SESSION_GONE.search(exc.error.message))


#: The most pages of a listing asked for.
MAX_PAGES = 100


class CatalogFit:
    """An upstream's tools as listed, kept while they fit: at most ``max_tools`` tools and
    ``max_bytes`` bytes of their definitions (as JSON), in the order the upstream lists
    them; a tool that does not fit is left out (a later, smaller one may still fit), so the
    same listing always keeps the same tools."""

    def __init__(self, max_tools: int, max_bytes: int) -> None:
        self.max_tools = max_tools
        self.max_bytes = max_bytes
        self.kept: list[types.Tool] = []
        self.size = 0
        self.seen = 0
        self.left_bytes = 0  # left out for their size

    @property
    def full(self) -> bool:
        """The count is reached: no further tool can be kept."""
        return len(self.kept) >= self.max_tools

    def offer(self, tool: types.Tool) -> None:
        """Keep ``tool`` if it fits beside those kept."""
        self.seen += 1
        if self.full:
            return
        size = len(tool.model_dump_json(by_alias=True, exclude_none=True))
        if self.size + size > self.max_bytes:
            self.left_bytes += 1
            return
        self.kept.append(tool)
        self.size += size

    def cut(self) -> str:
        """What was left out and why, in one line (empty when every tool was kept)."""
        if self.seen == len(self.kept):
            return ""
        listed = f"at least {self.seen}" if self.full else str(self.seen)
        why = []
        if self.full:
            why.append(f"[gateway] max_upstream_tools is {self.max_tools}")
        if self.left_bytes:
            why.append(
                f"{self.left_bytes} did not fit [gateway] max_upstream_catalog_mb "
                f"({self.max_bytes // (1024 * 1024)} MiB of definitions)"
            )
        return (
            f"kept {len(self.kept)} of {listed} tools it lists ({'; '.join(why)}); the "
            "rest are not offered: raise the setting to take them"
        )


async def _all_pages(fn: Callable[..., Awaitable[Any]], attr: str) -> list[Any]:
    items: list[Any] = []
    cursor: str | None = None
    for _page in range(MAX_PAGES):
        result = await fn(cursor=cursor)
        items.extend(getattr(result, attr))
        cursor = result.next_cursor
        if not cursor:
            break
    return items


#: What the SDK's client says, with code ``CONNECTION_CLOSED``, when it resolves a request
#: itself because the connection ended (stdio and HTTP) or an HTTP stream ended unanswered.
_LOCAL_CLOSE = re.compile(
    r"Connection closed|SSE stream (failed: .*|ended without a response)", re.DOTALL
)


def _connection_gone(exc: MCPError) -> bool:
    """The SDK's own word that the connection ended, not an upstream's error: the code
    (-32000) is also the generic server error a JSON-RPC server answers with, and an
    upstream's message may say anything ("database connection closed"); taken for a loss,
    either tore down the connection and every call on it."""
    error = exc.error
    return error.code == types.CONNECTION_CLOSED and bool(_LOCAL_CLOSE.fullmatch(error.message))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, UpstreamError):
        return str(exc)
    if isinstance(exc, FileNotFoundError):
        return f"command not found ({exc.filename or exc})"
    if isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, anyio.get_cancelled_exc_class())]
        if inner:
            return _describe(inner[0])
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def stderr_log_handler() -> logging.Handler:
    """A stderr handler for the CLI (stdout belongs to the MCP client on stdio)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("offload gateway: %(message)s"))
    return handler
