"""The wire a layout gives: which messages go stubbed (bulky, or forced in an emergency),
what each stub costs in tokens, and the wire itself built from a session's state.

:class:`WireBuilder` is the part of a rewrite that turns a plan (:mod:`offload.proxy.rewrite.window`)
into messages; :class:`offload.proxy.rewrite.pipeline.Pipeline` asks it for costs while
planning and for the wire once planned.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import replace

from offload.core.text import timeexpr
from offload.core.tokens import MESSAGE_OVERHEAD
from offload.proxy.rewrite.call_args import CallStubber
from offload.proxy.rewrite.messages import (
    Message,
    calls_text,
    content_text,
    head_end,
    source_of,
    was_newest,
)
from offload.proxy.rewrite.phases import Start, Stubbing, wire_index
from offload.proxy.rewrite.session import SessionState
from offload.proxy.rewrite.stubs.message_stubs import StubMaker
from offload.proxy.rewrite.stubs.parts import Earlier
from offload.proxy.rewrite.window import Layout, large


def keeps_ends(msgs: Sequence[Message], i: int, ct: Sequence[int], threshold: int) -> bool:
    """Whether message ``i``, stubbed, keeps its first and last lines: the newest message
    (the model has not seen it yet), and a large one past the head that arrived as the
    newest (:meth:`WireBuilder.large_arrival` stubbed it so, and it keeps that form). A
    large output that arrived beside others (parallel calls) gets the plain stub."""
    if i == len(msgs) - 1:
        return True
    return large(ct[i], threshold) and i >= head_end(msgs) and was_newest(msgs, i)


class WireBuilder:
    """Stubs, their costs and the wire, over one proxy's stub makers (``stubs`` for
    contents, ``calls`` for tool-call arguments)."""

    def __init__(self, stubs: StubMaker, calls: CallStubber) -> None:
        self.stubs = stubs
        self.calls = calls

    def stubbing(
        self, msgs: Sequence[Message], i: int, threshold: int, gain: float
    ) -> Stubbing | None:
        """Message ``i`` stubbed where it is bulky: its content, and the arguments of its
        tool calls unless it is the newest message; None when nothing changes."""
        content = self.stubs.worth_stubbing(
            msgs[i], source_of(msgs, i), threshold, gain=gain, earlier=Earlier(msgs, i)
        )
        calls = None
        if i < len(msgs) - 1:
            calls = self.calls.stub(msgs[i], threshold, gain=gain)
        return None if content is None and calls is None else Stubbing(content, calls)

    def bulky(self, msgs: Sequence[Message], i: int, threshold: int) -> Stubbing | None:
        return self.stubbing(msgs, i, threshold, 2.0)

    def forced(
        self, msgs: Sequence[Message], i: int, ct: Sequence[int], threshold: int
    ) -> Stubbing | None:
        """Message ``i`` stubbed whatever its size (the emergency); the newest message, which
        the model has not seen yet, and a large one that arrived as the newest
        (:func:`keeps_ends`) keep their first and last lines beside their stub
        (``2 * threshold`` tokens of them)."""
        made = self.stubbing(msgs, i, 0, 1.0)
        if made is None:
            return None
        if made.content is not None and keeps_ends(msgs, i, ct, threshold):
            shown = self.stubs.with_ends(made.content, content_text(msgs[i]), 2 * threshold)
            made = Stubbing(shown, made.calls)
        return made if self.stub_tokens(msgs[i], made) < ct[i] else None

    def stub_tokens(self, msg: Message, made: Stubbing) -> int:
        if made.content is None:
            content_tokens = self.stubs.content_tokens(content_text(msg))
        else:
            content_tokens = made.content.stub_tokens
        n = content_tokens + MESSAGE_OVERHEAD  # as messages.message_tokens counts it
        if made.calls is not None:
            return n + made.calls.tokens
        text = calls_text(msg)
        return n + (self.stubs.content_tokens(text) if text else 0)

    def cost(self, msgs: Sequence[Message], i: int, ct: Sequence[int], threshold: int) -> int:
        made = self.bulky(msgs, i, threshold)
        return ct[i] if made is None else self.stub_tokens(msgs[i], made)

    def forced_cost(
        self, msgs: Sequence[Message], i: int, ct: Sequence[int], threshold: int
    ) -> int | None:
        made = self.forced(msgs, i, ct, threshold)
        return None if made is None else self.stub_tokens(msgs[i], made)

    def large_arrival(
        self, msgs: Sequence[Message], head: int, start: Start, ct: Sequence[int]
    ) -> Start:
        """``start`` with its newest message, when large
        (:func:`~offload.proxy.rewrite.window.large`), stubbed as it arrives: its first and
        last lines beside its stub and the exact call that reads the rest. The state keeps
        it forced, so it keeps that form while it stays on the wire and the wire before it
        stays a prefix. Only while the model is offered the proxy's read tool: a model
        that cannot read the rest gets the message whole while it fits."""
        state, i = start.state, len(msgs) - 1
        if not self.stubs.proxy_tools:
            return start
        if i < max(head, state.layout.stubbed) or i in state.layout.forced:
            return start
        if not large(ct[i], state.threshold):
            return start
        made = self.forced(msgs, i, ct, state.threshold)
        if made is None:
            return start
        wire, tokens = list(start.wire), list(start.tokens)
        w = wire_index(state, i)
        wire[w] = self.stubbed(msgs, i, made)
        tokens[w] = self.stub_tokens(msgs[i], made)
        layout = replace(state.layout, forced=state.layout.forced | {i})
        arrived = replace(state, layout=layout)
        return replace(start, state=arrived, wire=wire, tokens=tokens, stubs=start.stubs + 1)

    def event_time(self, msgs: Sequence[Message], upto: int) -> float | None:
        """When what messages ``[0, upto)`` tell happened, as far as the request says: the
        newest timestamp a message carries, else a date its system prompt states
        (core/text/timeexpr.py ``conversation_time``)."""
        system = "\n".join(content_text(m) for m in msgs[:upto] if m.get("role") == "system")
        return timeexpr.conversation_time(msgs, upto, system, self.stubs.store.clock())

    def stubbed(self, msgs: Sequence[Message], i: int, made: Stubbing) -> Message:
        """Message ``i`` as it goes on the wire under ``made`` (what it replaces stored)."""
        msg = msgs[i]
        if made.content is not None:
            when = functools.partial(self.event_time, msgs, i + 1)
            msg = self.stubs.stubbed(msg, made.content, source_of(msgs, i), Earlier(msgs, i), when)
        if made.calls is not None:
            msg = self.calls.apply(msg, made.calls)
        return msg

    def build(
        self,
        session: str,
        msgs: list[Message],
        state: SessionState,
        before: Layout,
        ct: Sequence[int],
        before_threshold: int | None = None,
    ) -> tuple[list[Message], list[int], int, int]:
        """(wire, its per-message tokens, stubs on it, stubs not there under ``before``)."""
        layout = state.layout
        threshold = state.threshold
        wire: list[Message] = []
        tokens: list[int] = []
        stubs = made_now = 0

        def stubbed_under(lay: Layout, i: int, limit: int = threshold) -> Stubbing | None:
            if i in lay.forced:
                return self.forced(msgs, i, ct, threshold)
            if lay.paged <= i < lay.stubbed:
                return self.bulky(msgs, i, limit)
            return None

        # the paged-out messages are not looked at: a build costs the wire, not the history
        rest = range(max(layout.head, layout.paged), len(msgs))
        for i in itertools.chain(range(min(layout.head, len(msgs))), rest):
            msg = msgs[i]
            made = stubbed_under(layout, i)
            if made is None:
                wire.append(msg)
                tokens.append(ct[i])
                continue
            wire.append(self.stubbed(msgs, i, made))
            tokens.append(self.stub_tokens(msg, made))
            stubs += 1
            if before is not layout and (
                (i < before.head or i >= before.paged)
                and stubbed_under(before, i, before_threshold or threshold) is None
            ):
                made_now += 1
        if layout.head < len(msgs) and state.range is not None:  # after the head
            wire.insert(layout.head, state.range.message())
            tokens.insert(layout.head, state.range.tokens)
            stubs += 1
        return wire, tokens, stubs, made_now
