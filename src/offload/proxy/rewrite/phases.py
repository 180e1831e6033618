"""The records a request's rewrite passes from phase to phase
(:class:`offload.proxy.rewrite.pipeline.Pipeline`) and the one it returns
(:class:`RewriteResult`), and the pure helpers its phases share:
where a request starts from, its counts, its wire before and after windowing, what is
sent, how a message is stubbed; the shared message prefix, the growth per turn, a client
message's place on the wire, the digest extended over what the layout depends on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, overload

from offload.proxy.rewrite.call_args import CallsStub
from offload.proxy.rewrite.messages import Message, chain, protect_start
from offload.proxy.rewrite.recall import Recalled
from offload.proxy.rewrite.session import Live, SessionState
from offload.proxy.rewrite.stubs.parts import MessageStub
from offload.proxy.rewrite.stubs.writes import NOTHING, Held
from offload.proxy.rewrite.window import Budget, large

FIGURES = (
    "client_tokens",
    "wire_tokens",
    "stubs_made",
    "stubbed_messages",
    "windowed",
    "emergency",
    "prefix_kept",
    "break_cause",
    "recall_tokens",
    "recall_hits",
    "recall_read",
    "loop_broken",
    "ceiling_learned",
    "reused_tokens",
)


@dataclass(frozen=True)
class RewriteResult:
    """What one rewrite produced, and the figures the proxy's metrics report."""

    messages: list[dict[str, Any]]  # what goes on the wire (valid OpenAI chat messages)
    session_id: str  # stable id of the conversation (from its stable head)
    client_tokens: int  # tokens of the messages as the client sent them
    wire_tokens: int  # tokens of `messages`
    stubs_made: int  # new stubs created by this request
    stubbed_messages: int  # messages on the wire that are stubs (stubbed or range stubs)
    windowed: bool  # a windowing (page-out) trigger fired on this request
    emergency: bool  # the emergency ratio acted
    prefix_kept: bool  # the session's previous request as sent is an exact prefix of this one
    break_cause: str | None  # when not kept: "windowing" | "client_edit" | "new_session" |
    # "restart" | "moved" (another process wrote the session's state since this one served
    # it) | "stubs_restored" (emergency stubs of the head or tail back to verbatim) |
    # "recall" | "loop_note" (the proxy's own addition to the previous request left)
    recall_tokens: int = 0  # tokens of the recall block on the wire (0: none)
    recall_hits: int = 0  # recalled messages in it
    recall_read: int = 0  # references recalled last turn that the model's answer named
    loop_broken: bool = False  # a repeating spiral was seen and a loop note added
    ceiling_learned: int = 0  # the client compacted itself: the wire tokens it did so at
    # tokens this request shares as a prefix with the session's previous one as sent (the
    # upstream's reusable KV cache; proxy.reuse)
    reused_tokens: int = 0
    # the store writes the answer must wait for before it completes (what the wire names
    # and this rewrite, or one before it, handed to the writer)
    held: Held = field(default=NOTHING, compare=False, repr=False)

    def figures(self) -> dict[str, Any]:
        """The per-request counts that the proxy's metrics and ``offload replay`` report."""
        return {name: getattr(self, name) for name in FIGURES}


__all__ = [
    "Boundaries",
    "Counted",
    "Route",
    "Sent",
    "Start",
    "Stubbing",
    "Windowed",
    "common_prefix",
    "growth_per_turn",
    "reverify",
    "turn_counts",
    "wire_index",
]


@dataclass(frozen=True)
class Route:
    """Where one request starts from and where its outcome goes (:meth:`offload.proxy.rewrite.pipeline.Pipeline._route`)."""

    key: str  # the state key saved and the record cached: the session's, or its side record's
    previous: Live | None  # the record the request extends (its first ``reuse`` messages)
    state: SessionState
    reuse: int
    cause: str | None  # the prefix break so far
    version: int  # the saved version of ``key`` that the outcome replaces
    side: bool = False  # a departure: saved as the side record, the frontier kept
    promoted: bool = False  # continues the side record, which becomes the frontier
    learned: int = 0  # the ceiling the promoted side record saw the client compact at


@dataclass(frozen=True)
class Counted:
    """One request's token counts (:meth:`offload.proxy.rewrite.pipeline.Pipeline._count`)."""

    known: int  # leading messages the previous record had counted (their tokens reused)
    tokens: list[int]  # each client message's tokens
    learned: int  # the client compacted itself: the wire tokens it had been sent (0: not)
    # how many assistant messages come before each message (and after the last)
    turns: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Start:
    """The wire a request starts from, before windowing (:meth:`offload.proxy.rewrite.pipeline.Pipeline._start`)."""

    state: SessionState
    wire: list[Message]
    tokens: list[int]
    stubs: int  # messages on the wire that are stubs
    cause: str | None  # the prefix break so far
    # the first client message appended to the previous wire as it was (len(messages)
    # when the wire was built anew)
    appended: int


@dataclass(frozen=True)
class Windowed:
    """The wire after windowing and the state the request leaves (:meth:`offload.proxy.rewrite.pipeline.Pipeline._window`)."""

    state: SessionState
    wire: list[Message]
    tokens: list[int]
    stubs: int  # messages on the wire that are stubs
    made: int  # new stubs made by this request
    windowed: bool  # the frontier moved
    emergency: bool  # the emergency ratio acted: the frontier moved, or new messages were
    # stubbed as they arrived


@dataclass(frozen=True)
class Sent:
    """The request as sent (:meth:`offload.proxy.rewrite.pipeline.Pipeline._send`)."""

    out: list[Message]
    tokens: list[int]
    recalled: Recalled | None  # this turn's recall block (at the end, before a loop note)
    looped: bool  # a loop note ends ``out``


@dataclass(frozen=True)
class Stubbing:
    """How one message is stubbed: its content, its tool calls' arguments, or both."""

    content: MessageStub | None
    calls: CallsStub | None


class Boundaries(Sequence[bool]):
    """Whether paging may end right before each message (``test(msgs, i)``), worked out
    only where a plan looks (from the frontier on), not over the whole history."""

    def __init__(
        self, msgs: Sequence[Message], test: Callable[[Sequence[Message], int], bool]
    ) -> None:
        self._msgs = msgs
        self._test = test

    def __len__(self) -> int:
        return len(self._msgs)

    @overload
    def __getitem__(self, i: int) -> bool: ...

    @overload
    def __getitem__(self, i: slice) -> list[bool]: ...

    def __getitem__(self, i: int | slice) -> bool | list[bool]:
        if isinstance(i, slice):
            return [self._test(self._msgs, j) for j in range(*i.indices(len(self._msgs)))]
        j = i + len(self._msgs) if i < 0 else i
        if not 0 <= j < len(self._msgs):
            raise IndexError(i)
        return self._test(self._msgs, j)


def common_prefix(old: Sequence[Message], new: Sequence[Message]) -> int:
    """How many leading messages ``old`` and ``new`` share."""
    n = len(old)
    if len(new) >= n and list(new[:n]) == list(old):
        return n
    k = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        k += 1
    return k


def growth_per_turn(
    msgs: Sequence[Message], ct: Sequence[int], since: int, turns: Sequence[int] = ()
) -> float:
    """Tokens the conversation grew by per turn (assistant message) since ``since``
    (``turns``: :func:`turn_counts` of ``msgs``, when known: no walk over them)."""
    if len(turns) == len(msgs) + 1:
        n = turns[-1] - turns[since]
    else:
        n = sum(1 for m in msgs[since:] if m["role"] == "assistant")
    return sum(ct[since:]) / max(1, n)


def turn_counts(msgs: Sequence[Message], known: Sequence[int] = ()) -> list[int]:
    """How many assistant messages come before each of ``msgs`` and after the last
    (``known``: those of a run ``msgs`` starts with, reused)."""
    out = list(known[: len(msgs) + 1]) or [0]
    for m in msgs[len(out) - 1 :]:
        out.append(out[-1] + (m["role"] == "assistant"))
    return out


def wire_index(state: SessionState, client_index: int) -> int:
    """Where client message ``client_index`` (not paged out) sits on the wire."""
    lay = state.layout
    if client_index < lay.head:
        return client_index
    return lay.head + (1 if state.range is not None else 0) + client_index - lay.paged


def reverify(new: SessionState, old: SessionState, msgs: Sequence[Message]) -> SessionState:
    """Extend the digest over every message the layout now depends on."""
    forced = max(new.layout.forced, default=-1) + 1
    verified = max(new.layout.stubbed, forced, new.layout.head)
    if verified == new.verified and new.digest:
        return new
    if old.digest and old.verified <= verified and new.digest == old.digest:
        digest = chain(old.digest, msgs[old.verified : verified])
    else:
        digest = chain("", msgs[:verified])
    return replace(new, verified=verified, digest=digest)


def unforced(
    state: SessionState,
    protect: int,
    ct: Sequence[int],
    wire_tokens: Sequence[int],
    budget: Budget,
) -> SessionState | None:
    """The state without the forced stubs of the head and the protected tail once they
    fit verbatim again beside the range stub (the trigger then pages out whatever else
    no longer fits); the tail's alone when only they fit. None when nothing changes. A
    large message (:func:`~offload.proxy.rewrite.window.large`) stays stubbed: restored,
    it would break the prefix and fill the room its stub freed."""
    head = state.layout.head
    forced = state.layout.forced
    in_head = {i for i in forced if i < head}
    in_tail = {i for i in forced if i >= protect and not large(ct[i], state.threshold)}
    if not in_head and not in_tail:
        return None
    rest = sum(ct[protect:]) + (state.range.tokens if state.range is not None else 0)
    if in_head and sum(ct[:head]) + rest <= budget.ceiling:
        drop = in_head | in_tail
    elif in_tail and sum(wire_tokens[:head]) + rest <= budget.ceiling:
        drop = in_tail
    else:
        return None
    return replace(state, layout=replace(state.layout, forced=forced - drop))


def still_applies(st: SessionState, msgs: list[Message], head: int, tail: int, same: int) -> bool:
    """Whether ``st`` still fits messages whose first ``same`` equal what it was made for."""
    return (
        st.layout.head == head
        and same >= st.verified
        and len(msgs) >= st.verified
        and protect_start(msgs, head, tail) >= st.layout.stubbed
    )
