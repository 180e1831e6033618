"""One request's rewrite: the client's messages in, a bounded, cache-friendly wire out.

The HTTP app calls :meth:`Pipeline.rewrite` once per chat request (synchronously, from a
worker thread); ``offload replay`` calls the same method turn by turn without an upstream.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

from offload.config import ProxySettings
from offload.core.hashing import CTX_PREFIX
from offload.core.tokens import TokenCounter
from offload.errors import InvalidInput, OffloadError, ReferenceError_, StoreBusy
from offload.proxy.rewrite import loops
from offload.proxy.rewrite.call_args import CallStubber
from offload.proxy.rewrite.ceilings import Ceilings, client_compacted, harness_key
from offload.proxy.rewrite.messages import (
    Message,
    chain,
    head_end,
    is_group_start,
    is_page_boundary,
    message_tokens,
    protect_start,
    session_key,
    validate,
    validate_head,
)
from offload.proxy.rewrite.phases import (
    Boundaries,
    Counted,
    RewriteResult,
    Route,
    Sent,
    Start,
    Stubbing,
    Windowed,
    common_prefix,
    growth_per_turn,
    reverify,
    still_applies,
    turn_counts,
    unforced,
    wire_index,
)
from offload.proxy.rewrite.recall import Recalled, Recaller, read_back
from offload.proxy.rewrite.reuse import (
    break_cause,
    keep_sent,
    shared_after_restart,
    shared_prefix,
    take_sent,
)
from offload.proxy.rewrite.session import (
    STATE_NAMESPACE,
    Live,
    LiveSessions,
    SessionLocks,
    SessionState,
    SideRecord,
    side_key,
)
from offload.proxy.rewrite.stubs.message_stubs import EventTime, StubMaker
from offload.proxy.rewrite.stubs.parts import (
    PROXY_READ,
    RangePart,
    RangeStub,
    names_proxy_tools,
    read_call,
)
from offload.proxy.rewrite.stubs.writes import Figures, Writes
from offload.proxy.rewrite.window import (
    Budget,
    Compaction,
    Layout,
    cut_level,
    needs_room,
    plan,
    trigger,
)
from offload.proxy.rewrite.wire import WireBuilder
from offload.store.store import Store

#: What a range stub is assumed to cost while planning (they measure ~90-130 tokens).
RANGE_ESTIMATE = 140
#: The window a range stub's gist and contents list are sized for. Below it they shrink in
#: proportion: a range stub is rendered again at every page-out, and in a small window,
#: where page-outs come every few turns, its full size (200-300 tokens) takes room the
#: recent turns need.
RANGE_SIZED_FOR = 8192
#: How long the last request a stop kept for a session waits for that session's return
#: (a session that never comes back leaves no row behind for longer).
SENT_KEPT_S = 7 * 86400
#: How often one request is rebuilt because another process saved its session's state
#: first. Each rebuild means that other request succeeded, so this bounds only a pathology
#: (requests of one session arriving faster than one rewrite takes), answered StoreBusy.
REBUILDS = 16


class _Moved(OffloadError):
    """Another process saved the session's state after this rewrite read it."""


class Pipeline:
    """Rewrites chat requests; thread-safe across sessions (one lock per session).

    The wire is a deterministic function of the session's persisted state and the
    messages: the pinned head verbatim, one range stub for the paged-out run, the
    stubbed middle, and the rest verbatim (see :mod:`offload.proxy.rewrite.window`).
    """

    def __init__(
        self,
        store: Store,
        settings: ProxySettings,
        counter: TokenCounter,
        *,
        scope: str = "proxy",
    ) -> None:
        self.store = store
        self.settings = settings
        self.counter = counter
        self.scope = scope
        # with transparent retrieval off the model has no proxy tools: stubs name the MCP
        # server's and the CLI's calls only ("auto" learns it: name_proxy_tools)
        tools = names_proxy_tools(settings.retrieval, None)
        # what the stubs replace is stored beside the upstream's prefill, not before it
        self.writes = Writes(on_failed=self._write_failed)
        self.stubs = StubMaker(
            store,
            counter,
            scope=scope,
            proxy_tools=tools,
            deltas=settings.delta_stubs,
            writes=self.writes,
        )
        self.recall = Recaller(store, settings, counter, scope)
        self.ceilings = Ceilings(store)
        self.calls = CallStubber(self.stubs, functools.partial(read_call, proxy_tools=tools))
        self.wire = WireBuilder(self.stubs, self.calls)
        self._locks = SessionLocks()
        self._live = LiveSessions()

    def name_proxy_tools(self, on: bool) -> None:
        """Whether stubs and recall blocks made from now on name the proxy's own memory
        tools: under ``retrieval = "auto"`` the proxy learns only from the upstream whether
        the model can call them (a range stub already on the wire keeps its text until
        the range grows)."""
        self.stubs.name_proxy_tools(on)
        self.calls.name_read_call(functools.partial(read_call, proxy_tools=on))
        self.recall.name_reader(PROXY_READ if on else "read")

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every store write handed to the writer so far is done (a clean
        stop; ``offload replay`` after each turn)."""
        self.writes.flush(timeout)

    def write_figures(self) -> Figures:
        """The writer's figures: writes done, failed, pending and their CPU time."""
        return self.writes.figures()

    def _write_failed(self, digest: str, exc: BaseException) -> None:
        """A write handed to the writer failed (its answers get the error): the content
        is stored again when next needed, and every session's record is dropped, so the
        next turn resumes from the saved state, which is checked against the store."""
        self.stubs.unstored(digest)
        for key, _ in self._live.items():
            self._live.drop(key)

    def shrink_caches(self, share: int) -> None:
        """Cut the caches of counts, stubs and rendered messages to the newest 1/``share``
        of their bounds (what a proxy does once quiet)."""
        self.stubs.shrink_caches(share)
        self.recall.shrink_caches(share)

    def rewrite(
        self,
        messages: list[dict[str, Any]],
        n_ctx: int,
        *,
        session_hint: str = "",
        alternate: bool = False,
        wait_writes: bool = True,
        reserve: int = 0,
        fixed: int = 0,
    ) -> RewriteResult:
        """The wire for ``messages`` under a context of ``n_ctx`` tokens.

        ``session_hint`` separates conversations whose opening messages are identical.
        ``alternate``: the upstream's chat template refuses two messages of one role in a
        row, so a chat is paged only up to a user message (a range stub between two user
        messages takes the assistant's turn either way). ``wait_writes`` False: return
        as soon as the wire is built, while the store writes of what its stubs replace
        run in the writer thread; the caller must wait for ``result.held`` before it
        acknowledges anything that names them (the proxy: before the answer completes).
        ``reserve``: tokens the request needs under the ceiling beside its wire (what a
        retrieval round appends): when the wire leaves fewer, a compaction fires, down to
        the target as any other, whatever the band says (:func:`~offload.proxy.rewrite.window.needs_room`).
        ``fixed``: tokens the prompt holds beside its messages (the request's tool
        definitions), taken off the room the messages get (:meth:`Budget.of`).

        Raises :class:`offload.errors.InvalidInput` for malformed messages or a bad
        ``n_ctx`` (nothing is stored then).
        """
        if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx <= 0:
            raise InvalidInput(f"n_ctx must be a positive integer, got {n_ctx!r}")
        msgs, head, session = self._validated(messages, session_hint)
        # every write not done when the rewrite starts is one its answer waits for: a write
        # of its own that fails before the rewrite ends still fails the answer
        since = self.writes.done()
        lock = self._locks.get(session)
        with lock:
            try:
                harness = harness_key(msgs[:head])
                budget = Budget.of(self.settings, n_ctx, fixed)
                if self.settings.learn_client_ceiling:  # off: nothing learned is applied
                    budget = self.ceilings.budget(harness, budget)
                result = self._rewrite_saved(session, msgs, head, budget, alternate, reserve)
                if result.ceiling_learned:
                    self.ceilings.learn(harness, result.ceiling_learned)
                result = replace(result, held=self.writes.held(since))
            except BaseException:
                # No half-built in-memory record survives a failure; the persisted state
                # is only ever replaced whole, after the wire is built.
                self._forget(session)
                raise
        if wait_writes:
            result.held.wait()  # a failed write drops every session's record (_write_failed)
        return result

    def _validated(self, messages: Any, hint: str) -> tuple[list[Message], int, str]:
        """(``messages`` validated, the length of their head, their session's key). The
        leading messages equal to those of the session's previous request were checked
        then: only the others are, so a turn checks what it added."""
        checked = validate_head(messages)
        head = head_end(messages)
        session = session_key(messages[:head], hint)
        previous = self._live.get(session)
        known = common_prefix(previous.client, messages) if previous is not None else 0
        return validate(messages, max(checked, known)), head, session

    def _forget(self, session: str) -> None:
        """Drop this process's records of ``session`` and of its side record."""
        self._live.drop(session)
        self._live.drop(side_key(session))

    # -- one request -----------------------------------------------------------------------

    def _rewrite_saved(
        self,
        session: str,
        msgs: list[Message],
        head: int,
        budget: Budget,
        alternate: bool,
        reserve: int = 0,
    ) -> RewriteResult:
        """:meth:`_rewrite`, again on the newer state whenever another process saved the
        session's state while this one was rewriting it.

        A new state is saved only over the version it was computed from (compare and swap),
        so two processes serving one session at once never overwrite each other's state:
        the outcome is that of serving their requests one after the other, and the next
        turn follows every acknowledged one whichever process serves it.
        """
        for attempt in range(REBUILDS):
            try:
                return self._rewrite(session, msgs, head, budget, alternate, attempt > 0, reserve)
            except _Moved:
                self._forget(session)
        raise StoreBusy(
            f"the state of proxy session {session} changed {REBUILDS} times while one request "
            "was rewritten; retry the request"
        )

    def _rewrite(
        self,
        session: str,
        msgs: list[Message],
        head: int,
        budget: Budget,
        alternate: bool,
        moved: bool = False,
        reserve: int = 0,
    ) -> RewriteResult:
        """One request in phases: its route, its counts, the wire it starts from, the
        windowing, the saved state, what is sent, and what is remembered and reported."""
        route = self._route(session, msgs, head, budget, moved)
        counted = self._count(route, msgs)
        protect = protect_start(msgs, head, self.settings.tail_messages)
        start = self._start(session, msgs, head, protect, route, counted, budget)
        start = self.wire.large_arrival(msgs, head, start, counted.tokens)
        win = self._window(session, msgs, head, protect, start, counted, budget, alternate, reserve)
        version = self._save(route, start.state, win.state, msgs, counted.learned)
        cause = start.cause
        previous = route.previous
        if (
            cause is None
            and previous is not None
            and win.wire[: len(previous.wire)] != previous.wire
        ):
            cause = "windowing" if win.windowed else "client_edit"
        sent = self._send(session, msgs, head, win.state, win.wire, win.tokens, budget, alternate)
        return self._finish(session, msgs, route, counted, win, version, sent, cause)

    def _count(self, route: Route, msgs: list[Message]) -> Counted:
        """Each client message's tokens (those the previous record counted are reused),
        and the wire tokens the client compacted itself at, when it just did."""
        previous = route.previous
        known = route.reuse if previous is not None and route.reuse else 0
        ct = (previous.client_tokens[:known] if previous is not None else []) + [
            self.stubs.tokens(m) for m in msgs[known:]
        ]
        turns = turn_counts(msgs, previous.client_turns[: known + 1] if previous else ())
        learned = 0  # the client compacted itself: the wire tokens it had been sent
        if (
            self.settings.learn_client_ceiling
            and previous is not None
            and route.cause == "client_edit"
            and client_compacted(sum(previous.client_tokens), sum(ct))
        ):
            learned = sum(previous.wire_tokens)
        return Counted(known, ct, learned, turns)

    def _start(
        self,
        session: str,
        msgs: list[Message],
        head: int,
        protect: int,
        route: Route,
        counted: Counted,
        budget: Budget,
    ) -> Start:
        """The wire on the state the request continues, before any windowing: the
        previous wire extended on a steady turn, built anew otherwise; head and tail
        messages stubbed in an emergency go back to verbatim once they fit."""
        previous, state, ct, known = route.previous, route.state, counted.tokens, counted.known
        appended = len(msgs)
        if previous is not None and known and state == previous.state:
            # Steady turn: the wire up to the first new message is the previous one.
            cut = wire_index(state, known)
            wire = previous.wire[:cut] + msgs[known:]
            tokens = previous.wire_tokens[:cut] + ct[known:]
            stubs = previous.stubs  # forced stubs all lie before ``known``
            appended = known
        else:
            wire, tokens, stubs, _ = self.wire.build(session, msgs, state, state.layout, ct)
        restored = unforced(state, protect, ct, tokens, budget)
        if restored is None:
            return Start(state, wire, tokens, stubs, route.cause, appended)
        wire, tokens, stubs, _ = self.wire.build(session, msgs, restored, restored.layout, ct)
        return Start(restored, wire, tokens, stubs, route.cause or "stubs_restored", len(msgs))

    def _window(
        self,
        session: str,
        msgs: list[Message],
        head: int,
        protect: int,
        start: Start,
        counted: Counted,
        budget: Budget,
        alternate: bool,
        reserve: int = 0,
    ) -> Windowed:
        """The wire after windowing: the frontier moved when a trigger fires, and the
        state this request leaves (floor and mark set whenever a trigger fired);
        ``reserve`` fires one when the wire leaves fewer tokens under the ceiling."""
        state, wire, tokens, stubs = start.state, start.wire, start.tokens, start.stubs
        ct = counted.tokens
        total = sum(tokens)
        least, growth = 0, 0.0
        if total > budget.high:  # below it the band cannot matter: skip the O(n) sums
            # the least a compaction could leave now: the head, a range stub, the tail
            least = sum(tokens[:head]) + RANGE_ESTIMATE + sum(ct[protect:])
            growth = growth_per_turn(msgs, ct, head, counted.turns)
        fire, emergency = trigger(total, state.floor, budget, growth, least)
        fire = fire or needs_room(total, reserve, budget)
        windowed = False
        made = 0
        new_state = state
        if emergency:
            arrived = self._arrive(msgs, head, protect, start, ct, budget)
            if arrived is not None:
                return replace(arrived, state=reverify(arrived.state, state, msgs))
        if fire:
            layout, rng = self._compact(
                session, msgs, head, protect, state, counted, budget, alternate
            )
            if layout != state.layout:
                windowed = True
                new_state = replace(state, layout=layout, range=rng, threshold=budget.threshold)
                wire, tokens, stubs, made = self.wire.build(
                    session, msgs, new_state, state.layout, ct, state.threshold
                )
                made += rng is not state.range
                total = sum(tokens)
            new_state = replace(new_state, floor=total, mark=len(msgs))
        new_state = reverify(new_state, state, msgs)
        return Windowed(new_state, wire, tokens, stubs, made, windowed, emergency and windowed)

    def _arrive(
        self,
        msgs: list[Message],
        head: int,
        protect: int,
        start: Start,
        ct: list[int],
        budget: Budget,
    ) -> Windowed | None:
        """The wire with this turn's new messages stubbed as they arrive (the newest one,
        which the model has not seen yet, excepted) when that keeps it under the ceiling
        without a compaction, so the previous wire stays a prefix. Only while the head, the
        least the middle costs and the verbatim tail alone break the ceiling: the tail may
        be stubbed then, and a compaction would stub it too. None when that does not do."""
        state, tokens = start.state, start.tokens
        first = max(start.appended, state.layout.stubbed, head)
        if first >= len(msgs) - 1 or protect < state.layout.paged:
            return None
        # the least the middle can cost: its wire, or the range stub paging all of it
        # (none yet: any range stub costs more than nothing)
        middle = sum(tokens[wire_index(state, head) : wire_index(state, protect)])
        middle = min(middle, state.range.tokens) if state.range is not None else 0
        if sum(ct[:head]) + middle + sum(ct[protect:]) <= budget.ceiling:
            return None  # the tail fits verbatim, so it is sent verbatim
        # the biggest savings first, only until the wire fits
        savings: list[tuple[int, int, Stubbing]] = []
        for i in range(first, len(msgs) - 1):
            forced = self.wire.forced(msgs, i, ct, state.threshold)
            if forced is not None:
                savings.append((self.wire.stub_tokens(msgs[i], forced) - ct[i], i, forced))
        savings.sort(key=lambda s: (s[0], s[1]))
        total = sum(tokens)
        chosen: list[tuple[int, int, Stubbing]] = []
        for one in savings:
            if total <= budget.ceiling:
                break
            chosen.append(one)
            total += one[0]
        if not chosen or total > budget.ceiling:
            return None
        wire, tokens = list(start.wire), list(tokens)
        for saving, i, stubbing in chosen:
            w = wire_index(state, i)
            wire[w] = self.wire.stubbed(msgs, i, stubbing)
            tokens[w] += saving
        now = state.layout.forced | {i for _, i, _ in chosen}
        arrived = replace(state, layout=replace(state.layout, forced=now))
        count = len(chosen)
        return Windowed(arrived, wire, tokens, start.stubs + count, count, False, True)

    def _save(
        self,
        route: Route,
        before: SessionState,
        after: SessionState,
        msgs: list[Message],
        learned: int,
    ) -> int:
        """Save the state this request leaves, when it changed (always for a side record),
        over the version it was computed from; the version now saved. Raises
        :class:`_Moved` when another process replaced that version since."""
        value: dict[str, Any] | None = None
        if route.side:
            value = SideRecord(after, len(msgs), chain("", msgs), learned).to_json()
        elif after != before or route.promoted:
            value = after.to_json()
        if value is None:
            return route.version
        saved = self.store.replace_state(STATE_NAMESPACE, route.key, value, route.version)
        if not saved:  # computed from a state another process has replaced since
            raise _Moved
        return saved

    def _finish(
        self,
        session: str,
        msgs: list[Message],
        route: Route,
        counted: Counted,
        win: Windowed,
        version: int,
        sent: Sent,
        cause: str | None,
    ) -> RewriteResult:
        """Remember this request for the session's next one, and report its figures."""
        previous, known, recalled = route.previous, counted.known, sent.recalled
        read = read_back(previous.recalled, msgs[known:]) if previous is not None and known else 0
        refs = recalled.refs if recalled is not None else ()
        reused, cause, compared = self._reuse(route, win.windowed, sent, cause)
        live = Live(
            win.state, version, list(msgs), counted.tokens, win.wire, win.tokens, win.stubs, refs
        )
        live.learned = counted.learned if route.side else 0
        live.sent, live.sent_tokens = sent.out, sent.tokens
        live.client_turns = counted.turns
        self._live.put(route.key, live)
        return RewriteResult(
            messages=sent.out,
            session_id=session,
            client_tokens=sum(counted.tokens),
            wire_tokens=sum(sent.tokens),
            stubs_made=win.made,
            stubbed_messages=win.stubs,
            windowed=win.windowed,
            emergency=win.emergency,
            prefix_kept=compared and cause is None,
            break_cause=cause,
            recall_tokens=recalled.tokens if recalled is not None else 0,
            recall_hits=len(recalled.refs) if recalled is not None else 0,
            recall_read=read,
            loop_broken=sent.looped,
            ceiling_learned=route.learned,
            reused_tokens=reused,
        )

    def _send(
        self,
        session: str,
        msgs: list[Message],
        head: int,
        state: SessionState,
        wire: list[Message],
        wire_tokens: list[int],
        budget: Budget,
        alternate: bool,
    ) -> Sent:
        """The request as sent: ``wire``, this turn's recall block after its newest
        message (the next turn drops it: only the block and what follows it are ever
        recomputed), then a loop note if one is due."""
        out, out_tokens = list(wire), list(wire_tokens)
        recalled = None
        if not alternate:
            recalled = self._recall(session, msgs, head, state, wire, sum(wire_tokens), budget)
        if recalled is not None:
            out.append(recalled.message)
            out_tokens.append(recalled.tokens)
        looped = loops.spiral(msgs, self.settings.loop_repeats)
        if looped is not None:
            loop_note = loops.note(*looped)
            cost = message_tokens(self.counter, loop_note)
            if sum(out_tokens) + cost <= budget.ceiling:
                out.append(loop_note)
                out_tokens.append(cost)
            else:
                looped = None
        return Sent(out, out_tokens, recalled, looped is not None)

    def _recall(
        self,
        session: str,
        msgs: list[Message],
        head: int,
        state: SessionState,
        wire: list[Message],
        total: int,
        budget: Budget,
    ) -> Recalled | None:
        """This turn's recall block, placed after the newest message (so the next turn,
        which drops it, recomputes only the block: never the history before it), within
        the room left under the ceiling. None after an assistant message (a prefill the
        model continues), after a tool result (the agent's own work: it has the memory
        tools for that, and a block on each such turn would cost the upstream its tokens
        each time) or on the head alone."""
        if len(msgs) <= head or msgs[-1]["role"] in ("assistant", "tool", "function"):
            return None
        generation = state.range.ref if state.range is not None else ""
        return self.recall.block(
            session,
            msgs,
            head,
            len(wire),
            wire,
            budget.ceiling - total,
            budget.n_ctx,
            generation,
        )

    def _route(
        self, session: str, msgs: list[Message], head: int, budget: Budget, moved: bool
    ) -> Route:
        """Which saved state this request continues and where its outcome is saved.

        A request that does not extend the session's last one (nor fits its saved
        frontier) is a departure: a side request, or the client's own edit or compaction.
        It is served on the state it fits (the frontier, else a fresh one) and saved as the
        session's side record, so the frontier stays for the conversation's next turn. A
        request that continues the side record makes it the frontier (see
        :class:`SideRecord`).
        """
        tail = self.settings.tail_messages
        previous, stale = self._current(session)
        state, reuse, cause, version = self._resume(session, previous, msgs, head, budget, tail)
        if (moved or stale) and cause == "restart":
            cause = "moved"
        if cause != "client_edit":
            return Route(session, previous, state, reuse, cause, version)
        key = side_key(session)
        side, _ = self._current(key)
        if side is not None:
            n = len(side.client)
            if (
                len(msgs) > n
                and msgs[:n] == side.client
                and still_applies(side.state, msgs, head, tail, n)
            ):
                return Route(session, side, side.state, n, None, version, False, True, side.learned)
            return Route(key, previous, state, reuse, cause, side.version, True)
        value, side_version = self.store.get_state_versioned(STATE_NAMESPACE, key)
        record = SideRecord.from_json(value)
        if (
            record is not None
            and len(msgs) > record.count
            and still_applies(record.state, msgs, head, tail, len(msgs))
            and chain("", msgs[: record.count]) == record.digest
            and self._whole(record.state)
        ):
            promoted = "moved" if moved or stale else "restart"
            return Route(
                session, None, record.state, 0, promoted, version, False, True, record.learned
            )
        return Route(key, previous, state, reuse, cause, side_version, True)

    def _reuse(
        self, route: Route, windowed: bool, sent: Sent, cause: str | None
    ) -> tuple[int, str | None, bool]:
        """(the token prefix ``out`` shares with the session's previous request as sent,
        the break cause, whether there was a previous request to compare with): the one
        in memory, else after a restart the one kept at the last clean stop."""
        previous = route.previous
        if previous is not None:
            shared = shared_prefix(self.counter, previous.sent, previous.sent_tokens, sent.out)
            return shared.tokens, break_cause(previous.sent, shared.first_diff, cause), True
        if cause != "restart" or route.side:
            return 0, cause, False
        before = take_sent(self.store, route.key, route.version)
        if before is None:
            return 0, cause, False
        after = "windowing" if windowed else cause
        reused, cause = shared_after_restart(before, sent.out, sent.tokens, after)
        return reused, cause, True

    def remember_sent(self) -> int:
        """Keep each session's last request as sent in the store, for the first request
        after a restart to measure its reuse against (:func:`reuse.keep_sent`); called at
        a clean stop. How many were kept."""
        return keep_sent(self.store, self._live.items(), SENT_KEPT_S)

    def _current(self, session: str) -> tuple[Live | None, bool]:
        """This process's record of ``session`` if the store still holds the state it was
        built from (same version), and whether a record was dropped as stale.

        The store's session state is the truth; the record is a cache of it. Another
        process on the same store (another machine behind a load balancer) that served a
        turn in between wrote a newer version, and the wire must then follow that state,
        as it would in the process that wrote it. One indexed read per turn.
        """
        previous = self._live.get(session)
        if previous is None:
            return None, False
        if self.store.state_version(STATE_NAMESPACE, session) == previous.version:
            return previous, False
        self._live.drop(session)
        return None, True

    def _resume(
        self,
        session: str,
        previous: Live | None,
        msgs: list[Message],
        head: int,
        budget: Budget,
        tail: int,
    ) -> tuple[SessionState, int, str | None, int]:
        """(state to use, client messages reusable from ``previous``, break cause so far,
        the store's version of the session's state)."""
        # A different n_ctx (a reloaded model, the app's overflow retry) keeps the frontier:
        # the stub threshold is part of the state and only changes at a compaction.
        fresh = SessionState.fresh(budget.threshold, head)
        if previous is not None:
            k = common_prefix(previous.client, msgs)
            st = previous.state
            if not still_applies(st, msgs, head, tail, k):
                return fresh, 0, "client_edit", previous.version
            cause = "client_edit" if k < len(previous.client) else None
            return st, k, cause, previous.version
        value, version = self.store.get_state_versioned(STATE_NAMESPACE, session)
        saved = SessionState.from_json(value)
        if saved is None:
            return fresh, 0, "new_session", version
        if not still_applies(saved, msgs, head, tail, len(msgs)) or not self._whole(saved):
            return fresh, 0, "client_edit", version
        if chain("", msgs[: saved.verified]) != saved.digest:
            return fresh, 0, "client_edit", version
        return saved, 0, "restart", version

    def _compact(
        self,
        session: str,
        msgs: list[Message],
        head: int,
        protect: int,
        state: SessionState,
        counted: Counted,
        budget: Budget,
        alternate: bool,
    ) -> tuple[Layout, RangeStub | None]:
        """The layout after a compaction and the range stub it needs (its part stored)."""
        paged0 = state.layout.paged
        ct = counted.tokens
        growth = growth_per_turn(msgs, ct, max(head, state.mark), counted.turns)
        boundary = is_page_boundary if alternate else is_group_start
        starts = Boundaries(msgs, boundary)

        rendered: dict[int, tuple[RangeStub, RangePart]] = {}  # gists are costly: render once
        detail = min(1.0, budget.n_ctx / RANGE_SIZED_FOR)

        def render(end: int) -> RangeStub:
            if end not in rendered:
                rendered[end] = self.stubs.render_range(
                    session, msgs, head, paged0, end, state.range, sum(ct[head:end]), detail
                )
            return rendered[end][0]

        # Plan with the cost of a range stub: first that of paging the whole middle, then
        # that of the candidate the plan picks.
        if protect > paged0:
            range_cost = render(protect).tokens
        elif state.range is not None:
            range_cost = state.range.tokens
        else:
            range_cost = RANGE_ESTIMATE
        # The planned cost only ever rises, so the stub the plan picks never costs more
        # than was planned for (its digits and its role shift its cost by a few tokens).
        compaction = Compaction(
            state.layout,
            len(msgs),
            protect,
            starts,
            ct,
            lambda i: self.wire.cost(msgs, i, ct, budget.threshold),
            lambda i: self.wire.forced_cost(msgs, i, ct, budget.threshold),
            range_cost,
            budget,
            cut_level(budget, growth),
        )
        new_layout, candidate = state.layout, None
        for _ in range(6):
            new_layout = plan(replace(compaction, range_tokens=range_cost))
            if new_layout.paged <= paged0:
                candidate = None
                break
            candidate = render(new_layout.paged)
            if candidate.tokens <= range_cost:
                break
            range_cost = candidate.tokens
        if candidate is None:
            return new_layout, state.range
        paged = new_layout.paged
        when = functools.partial(self.wire.event_time, msgs, paged)
        return new_layout, self._page_out(session, *rendered[paged], when)

    def _page_out(
        self, session: str, stub: RangeStub, part: RangePart, when: EventTime = None
    ) -> RangeStub:
        """Store a part (``when``: asked, if it is stored, when what it tells happened);
        when auto-recall searches this session's memory, its index takes the part as
        rendered here rather than reading it back."""
        made = self.stubs.page_out(session, stub, part, when)
        if self.settings.recall_ratio > 0 and self.settings.recall_scope == "session":
            self.recall.memory.remember(
                made.ref,
                part.first,
                part.transcript,
                part.lines,
                part.earlier,
                part.messages(self.recall.memory.terms_of),
            )
        return made

    def _whole(self, state: SessionState) -> bool:
        """Whether the part a saved state's range stub names is stored: a state read back
        from the store was saved before its part's write was done (the write runs beside
        the upstream), so a process that stopped in between, or a write that failed,
        leaves a state naming a part that is not there; the session then starts afresh.
        One indexed read, only when a state is read back."""
        if state.range is None:
            return True
        if self.writes.pending(state.range.ref[len(CTX_PREFIX) :]):
            self.writes.flush()  # this process is writing it: wait for it, then look
        try:
            self.store.resolve(state.range.ref, self.scope)
        except ReferenceError_:
            return False
        return True
