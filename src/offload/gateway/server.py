"""The gateway: one MCP server in front of many upstream MCP servers.

A thin adapter: MCP requests in, calls to the upstreams, ``responses`` (indexing),
``catalog`` (compression) and ``index_tools`` (search, read), MCP results out.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from functools import partial
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from offload.config import GatewaySettings
from offload.core.untrusted import inline
from offload.errors import InvalidInput, OffloadError, StoreError, UpstreamError
from offload.gateway import index_tools, toolvectors
from offload.gateway.activation import Activations
from offload.gateway.catalog import (
    TOOL_PREFIX,
    Budget,
    CatalogPlan,
    Deferral,
    ServerCatalog,
    gateway_name,
    plan_catalog,
    split_name,
)
from offload.gateway.config import ClientRule, GatewayConfig
from offload.gateway.index_tools import IndexTools
from offload.gateway.responses import index_response, threshold_for, worth_indexing
from offload.gateway.storecalls import retry_busy
from offload.gateway.toolsearch import (
    Encoder,
    ToolDoc,
    ToolIndex,
    base_encoder,
    doc_for,
    doc_for_item,
)
from offload.gateway.toolvectors import StoredEncoder
from offload.gateway.upstreams import ChangeKind, Connector, Upstream
from offload.llm.minilm import ToolEncoderUnavailable
from offload.store.store import Store
from offload.store.write.puts import PutOptions

log = logging.getLogger("offload.gateway")
Ctx = ServerRequestContext[Any, Any]
_USAGE_NS = "gateway-usage"
_USAGE_BATCH = 50  # calls counted between two saves of the usage counts
# where a client receives the server instructions: the 2025 handshake, the 2026 discovery
_INSTRUCTIONS_METHODS = ("initialize", "server/discover")


class _GatewayServer(Server[Any]):
    """A lowlevel server that always advertises list_changed (HTTP builds its own options)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        """Initialization options with tools/resources/prompts list_changed on."""
        return super().create_initialization_options(
            notification_options or NotificationOptions(True, True, True),
            experimental_capabilities,
            extensions,
        )


def _text_result(text: str, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)


class Gateway:
    """Upstreams, catalog state and the MCP server that serves their union."""

    def __init__(
        self,
        settings: GatewaySettings,
        config: GatewayConfig,
        store: Store,
        connectors: Mapping[str, Connector] | None = None,
        tool_encoder: Encoder | None = None,
    ) -> None:
        self.settings = settings
        self.config = config
        self.store = store
        # a contextual model for the tool index (offload.llm.minilm), built off the start
        self._tool_encoder = tool_encoder
        # this gateway's record of the saved tool vectors its catalog uses (toolvectors)
        self._vector_user = toolvectors.VectorUser(store)
        self.index = IndexTools(store, settings)
        self.upstreams = {
            s.name: Upstream(s, settings, self._on_upstream_change, (connectors or {}).get(s.name))
            for s in config.servers
            if s.enabled
        }
        # calls per upstream: what the store summed at the last save (every process on the
        # store adds its own: store/tallies.py) and what this one counted since
        self._usage_saved: dict[str, int] = dict(store.tallies(_USAGE_NS).get("calls", {}))
        self._usage_unsaved: dict[str, int] = {}
        self._usage_lock = threading.Lock()
        self.activations = Activations(settings.max_active_tools)
        # deferred resources, templates and prompts a client found, by label
        self.item_activations = Activations(settings.max_active_tools)
        self._plans: dict[tuple[bool, bool], CatalogPlan] = {}
        # what each kind of plan deferred last: the next plan keeps it while it fits
        self._deferrals: dict[tuple[bool, bool], Deferral] = {}
        self._refreshes = 0  # catalog refreshes started: only the newest applies its plans
        self._tool_index: ToolIndex | None = None
        self._stored_docs: set[str] = set()
        self._sessions: dict[int, ServerSession] = {}
        self._first_attempts = anyio.Event()
        self._started = False  # start() has seen every upstream's first attempt
        self._strengthening = threading.Lock()  # one contextual embedding at a time
        self._early: set[ChangeKind] = set()  # changes before that, planned by start()
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus)
        self.server = _GatewayServer(
            "offload-gateway",
            version="1",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
            on_subscriptions_listen=self.listen,
            get_tool_input_schema=self._input_schema,
        )
        # no OpenTelemetry span per message: it costs pass-through latency and nothing
        # here exports spans; the one middleware picks each client's instructions
        self.server.middleware = [self._client_instructions]

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Start every upstream and wait for each first attempt (bounded by the timeout)."""
        for upstream in self.upstreams.values():
            task_group.start_soon(upstream.run)
        async with anyio.create_task_group() as waits:
            for upstream in self.upstreams.values():
                waits.start_soon(upstream.wait_attempted, self.settings.connect_timeout_s + 1)
        # Changes from here on re-plan by themselves; the ones before (each upstream
        # getting ready) are all in the plan made now: one plan, one tool index and one
        # embedding of it per start instead of one per upstream.
        self._started = True
        early, self._early = self._early, set()
        await self.refresh_catalog(notify=bool(early))
        await self._notify_kinds(early)
        self._first_attempts.set()

    def stop(self) -> None:
        """Stop every upstream and save usage counts."""
        for upstream in self.upstreams.values():
            upstream.stop()
        self.listen.close()
        self._save_usage(force=True)
        self._vector_user.release()

    async def wait_stopped(self, timeout: float) -> None:
        """After :meth:`stop`: wait (at most ``timeout``) until every upstream has closed."""
        with anyio.move_on_after(timeout):
            for upstream in self.upstreams.values():
                await upstream.stopped.wait()

    async def serve(
        self, task_group: anyio.abc.TaskGroup, body: Callable[[], Awaitable[None]]
    ) -> None:
        """Start, run ``body`` (a transport loop), then stop.

        The upstreams start beside the transport: a client that leaves while they
        connect ends the gateway at once, and requests wait for the first attempts.
        """
        task_group.start_soon(self.start, task_group)
        try:
            await body()
        finally:
            self.stop()

    # -- per-client switches -------------------------------------------------------------------

    def client_name(self, ctx: Ctx) -> str:
        """The client's ``clientInfo.name`` ("" when it sent none)."""
        params = ctx.session.client_params
        info = params.client_info if params is not None else None
        return info.name if info is not None else ""

    def rule(self, ctx: Ctx) -> tuple[bool, bool]:
        """(index responses, compress catalog) for this request's client."""
        return self.rule_for(self.client_name(ctx))

    def rule_for(self, client: str) -> tuple[bool, bool]:
        """(index responses, compress catalog) for the client called ``client``."""
        rule = self.config.clients.get(client, ClientRule())
        index = (
            self.settings.index_responses if rule.index_responses is None else rule.index_responses
        )
        compress = (
            self.settings.compress_catalog
            if rule.compress_catalog is None
            else rule.compress_catalog
        )
        return index, compress

    async def _client_instructions(self, ctx: Ctx, call_next: CallNext) -> HandlerResult:
        """Middleware: the instructions a client receives come from its own catalog plan.

        Every request first waits for the upstreams' first connection attempts (bounded),
        so a client's instructions and first tool list see slow but healthy upstreams.
        """
        with anyio.move_on_after(self.settings.connect_timeout_s + 1):
            await self._first_attempts.wait()
        result = await call_next(ctx)
        if ctx.method not in _INSTRUCTIONS_METHODS or not isinstance(result, dict):
            return result
        name = self.client_name(ctx)
        # during initialize the client's params are not committed to the session yet
        raw = ctx.params.get("clientInfo") if isinstance(ctx.params, Mapping) else None
        if ctx.method == "initialize" and isinstance(raw, Mapping):
            name = str(raw.get("name") or "")
        index, compress = self.rule_for(name)
        result["instructions"] = self.plan(compress, index).instructions
        return result

    def _track(self, ctx: Ctx) -> None:
        connection = getattr(ctx.session, "_connection", None)
        if connection is not None and ctx.session.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            self._sessions[id(connection)] = ctx.session

    # -- catalog -------------------------------------------------------------------------------

    def _catalogs(self) -> list[ServerCatalog]:
        usage = self.usage
        return [
            ServerCatalog(
                name=u.name,
                tools=tuple(u.tools),
                resources=tuple(u.resources),
                templates=tuple(u.templates),
                prompts=tuple(u.prompts),
                instructions=u.instructions,
                calls=usage.get(u.name, 0),
                cut=u.catalog_cut,
            )
            for u in self.upstreams.values()
        ]

    def plan(self, compress: bool, strip: bool) -> CatalogPlan:
        """The catalog plan for a client with these switches (cached until a change)."""
        key = (compress, strip)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._make_plan(compress, strip)
            self._deferrals[key] = plan.deferral
        return plan

    def _make_plan(self, compress: bool, strip: bool) -> CatalogPlan:
        budget = Budget(
            threshold=self.settings.catalog_threshold,
            instructions_threshold=self.settings.instructions_threshold,
            search_tool=self.settings.search_tool,
            read_tool=self.settings.read_tool,
            call_tool=self.settings.call_tool_name,
        )
        unavailable = {
            u.name: u.error or u.state for u in self.upstreams.values() if u.state != "ready"
        }
        return plan_catalog(
            self._catalogs(),
            budget,
            compress=compress,
            strip_output=strip,
            gateway_tools=index_tools.definitions(self.settings, with_call_tool=compress),
            unavailable=unavailable,
            previous=self._deferrals.get((compress, strip)),
        )

    def _fresh_plans(self) -> tuple[dict[tuple[bool, bool], CatalogPlan], list[ToolDoc]]:
        """Every plan a client can ask for now (each client's, and the ``(True, index)``
        plans its searches read), and the documents of every deferred tool and item.

        Run in a worker thread: a large catalog (tens of thousands of tools) takes seconds of
        CPU to plan, and ``offload serve`` answers every surface on the event loop."""
        rules = [(self.settings.index_responses, self.settings.compress_catalog)]
        rules += [self.rule_for(client) for client in self.config.clients]
        keys = [(compress, index) for index, compress in rules]
        keys += [(True, index) for index, _compress in rules] + [(True, True)]
        plans = {key: self._make_plan(*key) for key in dict.fromkeys(keys)}
        everything = plans[(True, True)]
        tool_docs = [
            doc_for(n, t.model_dump(by_alias=True)) for n, t in everything.deferred.items()
        ]
        tool_docs += [doc_for_item(label, d) for label, d in everything.items.items()]
        return plans, tool_docs

    async def refresh_catalog(self, *, notify: bool = True) -> None:
        """Recompute plans (off the event loop), store new documents, rebuild tool search,
        tell clients."""
        self._refreshes += 1
        mine = self._refreshes
        fresh, tool_docs = await anyio.to_thread.run_sync(self._fresh_plans)
        if mine != self._refreshes:
            return  # a newer refresh started meanwhile: it plans what is current, and tells
        self._plans = fresh
        self._deferrals.update((key, p.deferral) for key, p in fresh.items())
        plan = self.plan(self.settings.compress_catalog, self.settings.index_responses)
        self.server.instructions = plan.instructions
        # every configured client's plan: its instructions may point at documents the
        # global plan does not store (a client compressing while the default does not)
        plans = [plan, *(self.plan(c, i) for i, c in map(self.rule_for, self.config.clients))]
        docs = {k: v for p in plans for k, v in p.documents.items() if k not in self._stored_docs}
        if docs:
            await anyio.to_thread.run_sync(self._store_documents, docs)
        # analysing (and embedding) a large catalog takes a while: not on the event loop;
        # the store's embedding model, when it has one, ranks tools as it ranks entries
        model = base_encoder(self.store.embedder, self._tool_encoder)
        base = await anyio.to_thread.run_sync(ToolIndex.build, tool_docs, model)
        self._tool_index = base
        if self._tool_encoder is not None and base.docs:
            # minutes on loaded cores for a large catalog: search ranks with the static
            # model until the stronger index replaces this one (unless a refresh did)
            threading.Thread(
                target=self._strengthen, args=(base, self._tool_encoder), daemon=True
            ).start()
        if plan.phases:
            log.info(
                "catalog %d -> %d bytes (phases %s; deferred tools: %s; resources/prompts: %s)",
                plan.full_size,
                plan.size,
                plan.phases,
                ", ".join(plan.deferred_servers) or "none",
                ", ".join(plan.deferred_item_servers) or "none",
            )
        if notify:
            await self.notify_tools_changed()

    def _strengthen(self, base: ToolIndex, encoder: Encoder) -> None:
        """Swap in ``base`` with the contextual model's tool vectors, if it is still the
        index in use (a catalog refresh meanwhile built a newer one).

        One at a time: a burst of catalog changes embeds the catalog being embedded and
        then the newest one only, not every one in between side by side on the same
        cores (each a catalog's worth of model calls that the next change throws away)."""
        with self._strengthening:
            if self._tool_index is not base:
                return  # superseded while it waited: the newer index's own thread embeds
            self._strengthen_now(base, encoder)

    def _strengthen_now(self, base: ToolIndex, encoder: Encoder) -> None:
        try:
            model = getattr(encoder, "model_id", type(encoder).__name__)
            saved = StoredEncoder(encoder, self.store, model, self._vector_user)
            strong = base.with_strong(encoder, views=saved)
        except ToolEncoderUnavailable as exc:
            log.warning("tool search keeps its static model: %s", exc)
            self._tool_encoder = None
            return
        if self._tool_index is base:
            self._tool_index = strong
            log.info(
                "tool index: %d tools with %s (%d texts embedded, the rest saved before; "
                "%d saved vectors no gateway uses pruned)",
                len(base.docs),
                model,
                saved.computed,
                saved.pruned,
            )

    @property
    def tool_index(self) -> ToolIndex | None:
        """The tool index search uses now (None before the first catalog)."""
        return self._tool_index

    def _store_documents(self, docs: dict[str, tuple[str, str]]) -> None:
        """Store catalog documents in one transaction (one commit for a whole catalog);
        contention that outlasts the retries leaves them for the next refresh (the tool
        index is in memory: search keeps working)."""
        scope = self.settings.scope
        puts = [
            (
                text,
                PutOptions(
                    kind=kind,
                    topic="",
                    tags=(),
                    summary="",
                    salience=0.5,
                    pinned=False,
                    source=label,
                    scope=scope,
                    label=label,
                    expires=None,
                ),
            )
            for label, (kind, text) in docs.items()
        ]
        try:
            retry_busy(partial(self.store.put_each, puts), f"storing {len(puts)} documents")
        except StoreError as exc:
            log.warning("catalog documents not stored yet (%s); retried on next change", exc)
            return
        self._stored_docs.update(docs)

    async def notify_tools_changed(self, event: Any = None) -> None:
        """``notifications/tools/list_changed`` on both protocol generations."""
        event = event or ToolsListChanged()
        await self.bus.publish(event)
        for key, session in list(self._sessions.items()):
            try:
                if isinstance(event, ToolsListChanged):
                    await session.send_tool_list_changed()
                elif isinstance(event, ResourcesListChanged):
                    await session.send_resource_list_changed()
                elif isinstance(event, PromptsListChanged):
                    await session.send_prompt_list_changed()
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, MCPError, RuntimeError):
                self._sessions.pop(key, None)

    async def _on_upstream_change(self, upstream: Upstream, kind: ChangeKind) -> None:
        try:
            await self._apply_change(kind)
        except StoreError as exc:
            # the store's trouble is no fault of the upstream: it stays ready
            log.warning("catalog change of %s not fully applied: %s", upstream.name, exc)

    async def _apply_change(self, kind: ChangeKind) -> None:
        # resources and prompts count in the catalog and may be deferred: a change to any
        # part re-plans the whole (and rebuilds the search over deferred parts)
        if not self._started:
            self._early.add(kind)  # start() plans once every upstream's first attempt is in
            return
        await self.refresh_catalog(notify=True)
        await self._notify_kinds({kind})

    async def _notify_kinds(self, kinds: set[ChangeKind]) -> None:
        """Tell clients the resource and prompt lists changed, where they did."""
        if "resources" in kinds:
            await self.notify_tools_changed(ResourcesListChanged())
        if "prompts" in kinds:
            await self.notify_tools_changed(PromptsListChanged())

    async def activate(self, ctx: Ctx, names: tuple[str, ...]) -> None:
        """Return deferred tools to this client's ``tools/list`` and tell this client.

        Appended in activation order (its prompt cache keeps the prefix); past
        ``max_active_tools`` its least recently used go back behind search.
        """
        change = self.activations.activate(_client_key(ctx), names)
        if not change:
            return
        log.info(
            "activated %s%s",
            ", ".join(change.added) or "nothing new",
            f"; back behind search: {', '.join(change.evicted)}" if change.evicted else "",
        )
        await self._notify_client(ctx)

    async def activate_items(self, ctx: Ctx, labels: tuple[str, ...]) -> None:
        """Return deferred resources, templates and prompts to this client's listings (at
        most ``max_active_tools`` of them, least recently used out first); tell it."""
        change = self.item_activations.activate(_client_key(ctx), labels)
        if not change:
            return
        log.info("listed again: %s", ", ".join(change.added) or "nothing new")
        plan = self.plan(True, True)
        touched = {plan.items[x].kind for x in (*change.added, *change.evicted) if x in plan.items}
        if touched & {"resource", "template"}:
            await self._notify_client(ctx, ResourcesListChanged())
        if "prompt" in touched:
            await self._notify_client(ctx, PromptsListChanged())

    async def _notify_client(self, ctx: Ctx, event: Any = None) -> None:
        """``list_changed`` (tools unless told) to the one client whose listing changed."""
        event = event or ToolsListChanged()
        if ctx.session.protocol_version in MODERN_PROTOCOL_VERSIONS:
            await self.bus.publish(event)  # the stream cannot be targeted
            return
        # a client that left cannot be told
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, MCPError, RuntimeError):
            if isinstance(event, ResourcesListChanged):
                await ctx.session.send_resource_list_changed()
            elif isinstance(event, PromptsListChanged):
                await ctx.session.send_prompt_list_changed()
            else:
                await ctx.session.send_tool_list_changed()

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        for plan in self._plans.values():
            for tool in (*plan.tools, *plan.deferred.values()):
                if tool.name == name:
                    return dict(tool.input_schema)
        return None

    # -- handlers --------------------------------------------------------------------------------

    async def _list_tools(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self._track(ctx)
        index, compress = self.rule(ctx)
        plan = self.plan(compress, index)
        tools = list(plan.tools)
        if index or compress:
            with_call = compress and bool(plan.deferred)
            tools.extend(index_tools.definitions(self.settings, with_call_tool=with_call))
        listed = self.activations.listed(_client_key(ctx))
        tools.extend(plan.deferred[n] for n in listed if n in plan.deferred)
        return types.ListToolsResult(tools=tools)

    async def _call_tool(
        self, ctx: Ctx, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        self._track(ctx)
        index, compress = self.rule(ctx)
        name, args = params.name, dict(params.arguments or {})
        try:
            if index or compress:
                if name == self.settings.search_tool:
                    return await self._index_search(ctx, args, compress, index)
                if name == self.settings.read_tool:
                    return await self._index_read(ctx, args)
                if compress and name == self.settings.call_tool_name:
                    target = args.get("name")
                    if not isinstance(target, str) or not target:
                        raise InvalidInput('name is required, e.g. "github__list_issues"')
                    inner = args.get("arguments") or {}
                    if not isinstance(inner, dict):
                        raise InvalidInput("arguments must be an object")
                    target = self.resolve_tool(target)
                    self.activations.touch(_client_key(ctx), target)
                    return await self.call_upstream(target, inner, index=index)
            name = self.resolve_tool(name)
            self.activations.touch(_client_key(ctx), name)
            return await self.call_upstream(name, args, index=index)
        except OffloadError as exc:
            return _text_result(str(exc), error=True)

    def resolve_tool(self, name: str) -> str:
        """``name`` as the gateway names the tool: ``server__tool`` of a known server as
        given; a bare name that exactly one upstream's tools have (as that server's own
        text names its tools: offload's hits end ``read(ref=…)``) is that upstream's
        ``server__tool``; any other name unchanged (the call then says it is unknown).
        Never a guess: a bare name two upstreams have is refused, naming both."""
        parts = split_name(name)
        if parts is not None and parts[0] in self.upstreams:
            return name
        holders = [
            s for s, u in sorted(self.upstreams.items()) if any(t.name == name for t in u.tools)
        ]
        if len(holders) > 1:
            named = ", ".join(gateway_name(s, name) for s in holders)
            raise InvalidInput(f"tool {name!r} is on {len(holders)} servers: call {named}")
        return gateway_name(holders[0], name) if holders else name

    async def call_upstream(
        self, name: str, args: dict[str, Any], *, index: bool
    ) -> types.CallToolResult:
        """Forward one tool call; index the response when it is oversized."""
        parts = split_name(name)
        upstream = self.upstreams.get(parts[0]) if parts else None
        if parts is None or upstream is None:
            known = ", ".join(sorted(self.upstreams)) or "(none)"
            raise InvalidInput(
                f"unknown tool {name!r}: gateway tools are named server__tool "
                f"(servers: {known}), or by the bare name of a tool one server has; "
                f"find tools with {self.settings.search_tool}"
            )
        server_name, tool = parts
        try:
            result = await upstream.call_tool(tool, args)
        except MCPError as exc:
            # an error is never indexed: the upstream's message is one inert, bounded line
            return _text_result(
                f"upstream {server_name!r} refused {tool}: {inline(exc.error.message, 2000)}",
                error=True,
            )
        except UpstreamError as exc:
            return _text_result(str(exc), error=True)
        await self._count(server_name)
        threshold = threshold_for(self.settings, upstream.config, tool) if index else None
        if threshold is None or not worth_indexing(result, threshold):
            return result
        replaced, _indexed = await anyio.to_thread.run_sync(
            lambda: index_response(
                result,
                store=self.store,
                settings=self.settings,
                label_base=gateway_name(server_name, tool),
                threshold=threshold,
            )
        )
        return replaced

    async def _index_search(
        self, ctx: Ctx, args: dict[str, Any], compress: bool, strip: bool
    ) -> types.CallToolResult:
        plan = self.plan(True, strip)
        tool_index = self._tool_index or ToolIndex()
        client = _client_key(ctx)
        # a client that does not compress lists every item: nothing is deferred for it
        items = plan.items if compress else {}

        def active(key: str) -> bool:
            if key in items:
                return self.item_activations.is_active(client, key)
            return self.activations.is_active(client, key) or not compress

        outcome = await anyio.to_thread.run_sync(
            lambda: self.index.search(
                args, tool_index=tool_index, tools=plan.deferred, active=active, items=items
            )
        )
        if compress:
            await self.activate(ctx, outcome.activated)
            await self.activate_items(ctx, outcome.items)
        return _text_result(outcome.text)

    async def _index_read(self, ctx: Ctx, args: dict[str, Any]) -> types.CallToolResult:
        items = self.plan(True, True).items
        outcome, tool = await anyio.to_thread.run_sync(lambda: self.index.read(args, items))
        text = outcome.text
        if outcome.items and self.rule(ctx)[1]:
            await self.activate_items(ctx, outcome.items)
        if tool is not None and tool in self.plan(True, True).deferred:
            if not self.activations.is_active(_client_key(ctx), tool):
                text += f"\n[{tool} is now active: call it directly or via {self.settings.call_tool_name}]"
            await self.activate(ctx, (tool,))
        return _text_result(text)

    @property
    def usage(self) -> dict[str, int]:
        """Calls per upstream: every process's on this store, as of the last save, plus
        this one's since."""
        with self._usage_lock:
            out = dict(self._usage_saved)
            for name, n in self._usage_unsaved.items():
                out[name] = out.get(name, 0) + n
            return out

    async def _count(self, server: str) -> None:
        with self._usage_lock:
            self._usage_unsaved[server] = self._usage_unsaved.get(server, 0) + 1
            due = sum(self._usage_unsaved.values()) >= _USAGE_BATCH
        # batched: one store write per 50 calls keeps pass-through overhead low; off the
        # event loop, since a busy store waits
        if due:
            await anyio.to_thread.run_sync(self._save_usage)

    def _save_usage(self, *, force: bool = False) -> None:
        with self._usage_lock:
            unsaved = self._usage_unsaved
            if not unsaved or not (force or sum(unsaved.values()) >= _USAGE_BATCH):
                return
            self._usage_unsaved = {}
        try:
            sums = retry_busy(
                lambda: self.store.add_tally(_USAGE_NS, "calls", unsaved), "usage counts"
            )
        except StoreError as exc:  # only the deferral order depends on it: keep serving
            log.warning("usage counts not saved (%s); saved with the next batch", exc)
            with self._usage_lock:
                for name, n in unsaved.items():
                    self._usage_unsaved[name] = self._usage_unsaved.get(name, 0) + n
            return
        with self._usage_lock:  # sums only grow: an older save's answer never goes back
            for name, n in sums.items():
                self._usage_saved[name] = max(self._usage_saved.get(name, 0), n)

    def _listed_items(self, ctx: Ctx, kind: str) -> tuple[CatalogPlan, list[Any]]:
        """This client's plan and its activated deferred items of ``kind``, in order."""
        index, compress = self.rule(ctx)
        plan = self.plan(compress, index)
        items = plan.items
        labels = self.item_activations.listed(_client_key(ctx))
        return plan, [items[x].item for x in labels if x in items and items[x].kind == kind]

    async def _list_resources(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        self._track(ctx)
        plan, extra = self._listed_items(ctx, "resource")
        return types.ListResourcesResult(resources=[*plan.resources, *extra])

    async def _list_templates(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        self._track(ctx)
        plan, extra = self._listed_items(ctx, "template")
        return types.ListResourceTemplatesResult(resource_templates=[*plan.templates, *extra])

    async def _read_resource(
        self, ctx: Ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        self._track(ctx)
        uri = str(params.uri)
        owners = [u for u in self.upstreams.values() if any(str(r.uri) == uri for r in u.resources)]
        owners += [u for u in self.upstreams.values() if u.templates and u not in owners]
        last: Exception | None = None
        for upstream in owners:
            try:
                result: types.ReadResourceResult = await upstream.request(
                    "resources/read", lambda c: c.read_resource(uri)
                )
                return result
            except (MCPError, UpstreamError) as exc:
                last = exc
        raise MCPError(
            types.INVALID_PARAMS,
            f"no upstream serves resource {uri!r}" + (f": {last}" if last else ""),
        )

    async def _list_prompts(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        self._track(ctx)
        plan, extra = self._listed_items(ctx, "prompt")
        return types.ListPromptsResult(prompts=[*plan.prompts, *extra])

    async def _get_prompt(
        self, ctx: Ctx, params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        parts = split_name(params.name)
        upstream = self.upstreams.get(parts[0]) if parts else None
        if parts is None or upstream is None:
            raise MCPError(
                types.INVALID_PARAMS,
                f"unknown prompt {params.name!r}; prompts are named server__prompt",
            )
        prompt, arguments = parts[1], params.arguments
        try:
            result: types.GetPromptResult = await upstream.request(
                "prompts/get", lambda c: c.get_prompt(prompt, arguments)
            )
        except UpstreamError as exc:
            raise MCPError(types.INTERNAL_ERROR, str(exc)) from exc
        return result


def _client_key(ctx: Ctx) -> object:
    """What identifies the client of a request: its connection on a 2025-era session;
    on the stateless 2026-07-28 protocol (a new connection per request), its name."""
    if ctx.session.protocol_version in MODERN_PROTOCOL_VERSIONS:
        params = ctx.session.client_params
        info = params.client_info if params is not None else None
        return f"{info.name}/{info.version}" if info is not None else ""
    return getattr(ctx.session, "_connection", None) or ctx.session


def tool_label(name: str) -> str:
    """The store label of a deferred tool's definition."""
    return f"{TOOL_PREFIX}{name}"
