"""Transparent retrieval: the proxy offers the upstream model its own memory tools
(:mod:`offload.proxy.retrieval.retrieval`), answers the model's calls of them from the store and
continues the generation itself until the model answers the client, which sees one
ordinary response (or stream) and never those calls.

When the tools are offered (:func:`offer`):

- ``proxy.retrieval`` is ``"on"``, or ``"auto"`` and the upstream does not say its chat
  template lacks tool support (llama.cpp's ``/props`` ``chat_template_caps``);
- the request has one choice (no ``n`` above 1), no legacy ``functions`` and no output
  constraint (``grammar``, ``json_schema``, a non-text ``response_format``), which
  upstreams refuse beside tools;
- ``tool_choice`` is anything but ``"required"`` without tools of the client's own (there
  only the proxy's tools could be called) or a forced tool the client does not define. ``"none"`` and a forced client tool keep the
  definitions (so the prompt's bytes stay those of every other turn) and pass the choice
  unchanged: the model then calls no tool or the client's, as asked;
- a client tool of the same name wins: that one of ours is not offered (and its calls go to
  the client).

The proxy's tools come first in ``tools``, the same bytes every turn, so the upstream's
prompt cache keeps hitting on them whatever the client's own tools do.

A round: the model's answer calls only the proxy's tools; they are answered (in a worker
thread) and the answer is continued with the calls and their results after the wire (the
wire's prefix is untouched, so the cache hits). An answer that calls a client tool ends the
loop: it goes to the client, without the proxy's calls beside it. After
``proxy.retrieval_rounds`` rounds (default 4; the last round's results say it was the last)
an answer that still calls only the proxy's tools is given to the client without those calls
(with a short note when it has no text of its own). Text the model wrote before a round
stays in the answer. A failing continuation answers the upstream's error (a whole answer)
or ends the stream with an error event. Usage figures are summed over the rounds.

Room for a round: its results fit the room the wire leaves under the window's ceiling. When
the prompt sits high in the windowing band, that room can be smaller than what the calls
would read. Then, once per answer, the round's request is windowed again with what the
results need reserved (a compaction down to the target, saved as any other, so the next
turn continues from it) and the calls are answered in the room that leaves: only a round
that needs it pays that cache break; ordinary turns keep the band. The calls are answered
once, before the compaction: what the compaction itself moves out of the wire is named by
its stub and found by the next round (answering them again after it doubled the round's
searches and reads).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from offload.core.http import wirejson
from offload.core.tokens import MESSAGE_OVERHEAD
from offload.proxy.retrieval.retrieval import (
    DEFINITIONS,
    READ_TOKENS,
    READ_TOOL,
    SEARCH_TOKENS,
    Answer,
    Memory,
    answer_call,
)
from offload.proxy.retrieval.retrieval_stream import RoundFilter, sum_usage
from offload.proxy.rewrite.messages import Message, content_text
from offload.proxy.rewrite.phases import RewriteResult
from offload.proxy.rewrite.stubs.parts import names_proxy_tools
from offload.proxy.rewrite.stubs.writes import NOTHING, Held, settled
from offload.proxy.rewrite.window import Budget
from offload.proxy.state import ProxyState
from offload.proxy.transport.errors_http import OPENAI
from offload.proxy.transport.forward import (
    MAX_ANSWER_BYTES,
    MAX_EVENT_BYTES,
    UpstreamReply,
    bounded_events,
    close_shielded,
    read_all,
    read_capped,
)
from offload.proxy.transport.whole_stream import WholeAsStream, is_event_stream

MODES = ("auto", "on", "off")
#: Said to the model with the results of the last round it may use.
LAST_ROUND = (
    "\n[offload: that was the last memory lookup for this answer; answer now with what you have]"
)
#: The answer's text when the model ended with nothing but more lookups.
EXHAUSTED = "(no answer: the model was still looking things up in memory when its limit of"
#: Why an answer ends when a memory round's continuation is not JSON.
NOT_JSON = "the upstream answered a memory round with non-JSON"
_CONSTRAINTS = ("grammar", "json_schema", "functions")

Post = Callable[[list[Message]], Awaitable[UpstreamReply]]
Count = Callable[[Mapping[str, int]], None]
#: Rewrites the request again with that many tokens reserved under the ceiling.
Compact = Callable[[int], Awaitable[RewriteResult]]
#: The most one call's answer takes (tokens): a round whose room is below this per call
#: may cut its results.
_MOST_PER_CALL = max(SEARCH_TOKENS, READ_TOKENS) + 2 * MESSAGE_OVERHEAD
_UNBOUNDED = 1 << 40


@dataclass(frozen=True)
class Offer:
    """The proxy's tools on one request: their names, the payload carrying them, and the
    client's body with them spliced in (None when it must be encoded anew)."""

    names: frozenset[str]
    payload: dict[str, Any]
    raw: bytes | None
    original: dict[str, Any]  # the client's payload and body, without the proxy's tools
    original_raw: bytes | None


def _definition_bytes(defs: Sequence[dict[str, Any]]) -> bytes:
    return json.dumps(list(defs), ensure_ascii=False, separators=(",", ":")).encode()


_ALL_BYTES = _definition_bytes(DEFINITIONS)


def offer(
    payload: dict[str, Any], raw: bytes | None, mode: str, tool_support: bool | None
) -> Offer | None:
    """The request with the proxy's tools added, or None when they are not offered (see
    the module's docstring for when)."""
    if not names_proxy_tools(mode, tool_support):
        return None
    if payload.get("n") not in (None, 1) or any(k in payload for k in _CONSTRAINTS):
        return None
    fmt = payload.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        return None
    client = payload.get("tools")
    if client is not None and not isinstance(client, list):
        return None  # the upstream says what is wrong with it
    if payload.get("tool_choice") == "required" and not client:
        return None
    taken = {_tool_name(t) for t in client or ()}
    ours = [d for d in DEFINITIONS if d["function"]["name"] not in taken]
    choice = payload.get("tool_choice")
    forced = _tool_name(choice) if isinstance(choice, dict) else ""
    if not ours or (forced and forced not in taken):
        return None  # nothing left to offer, or a forced tool the client does not have
    names = frozenset(d["function"]["name"] for d in ours)
    spliced = None
    if raw is not None and client is None and len(ours) == len(DEFINITIONS):
        body = raw.rstrip()
        if body.endswith(b"}") and len(payload) > 0:
            spliced = body[:-1] + b',"tools":' + _ALL_BYTES + b"}"
    return Offer(names, {**payload, "tools": [*ours, *(client or ())]}, spliced, payload, raw)


def refused(offer: Offer, got: tuple[UpstreamReply, bytes | None] | object) -> bool:
    """Whether the upstream refused a request only for the proxy's tools: a 400 that speaks
    of tools, to a request that had none of the client's own."""
    if not isinstance(got, tuple) or got[0].status_code != 400 or "tools" in offer.original:
        return False
    body = got[1]
    return isinstance(body, bytes) and b"tool" in body.lower()


def offer_for(state: ProxyState, payload: dict[str, Any], raw: bytes | None) -> Offer | None:
    """:func:`offer` under the proxy's settings and what its upstream says."""
    return offer(payload, raw, state.settings.retrieval, state.tool_support)


def rounds_for(
    state: ProxyState,
    offer: Offer,
    result: RewriteResult,
    n_ctx: int,
    post: Post,
    compact: Compact | None = None,
    fixed: int = 0,
) -> Rounds:
    """The retrieval loop of one rewritten request: its answers fit the room its wire
    leaves under the window's ceiling (``compact`` makes more when they would be cut);
    its figures count for its session. ``fixed``: the tokens of the request's tool
    definitions, which take their share of the ceiling."""
    ceiling = Budget.of(state.settings, n_ctx, fixed).ceiling
    memory = Memory(
        state.store,
        state.counter,
        state.memory_scope,
        result.session_id,
        ceiling - result.wire_tokens,
        tuple(t for t in (content_text(m) for m in result.messages) if t),
    )

    def count(figures: Mapping[str, int]) -> None:
        state.metrics.count(result.session_id, figures)

    return Rounds(
        memory,
        offer.names,
        result.messages,
        post,
        state.settings.retrieval_rounds,
        count,
        max_event=state.settings.max_event_bytes,
        max_answer=state.settings.max_answer_bytes,
        held=result.held,
        timeout=state.settings.timeout_s,
        compact=compact,
        wire_tokens=result.wire_tokens,
        ceiling=ceiling,
    )


def _tool_name(tool: Any) -> str:
    if isinstance(tool, dict):
        fn = tool.get("function")
        name = fn.get("name") if isinstance(fn, dict) else tool.get("name")
        return name if isinstance(name, str) else ""
    return ""


@dataclass(frozen=True)
class Answered:
    """A round's calls answered: the tool messages, whether each call was usable, and
    the tokens they take on the wire."""

    results: list[Message]
    usable: list[bool]
    tokens: int


@dataclass
class Rounds:
    """One request's retrieval loop: what the proxy's tool answers read from, how a
    continuation is posted, and its figures."""

    memory: Memory
    names: frozenset[str]
    wire: list[Message]
    post: Post
    limit: int
    count: Count
    extra: list[Message] = field(default_factory=list)
    figures: dict[str, int] = field(default_factory=dict)
    continuations: list[Message] = field(default_factory=list)  # what each round posted
    max_event: int = MAX_EVENT_BYTES  # the most bytes of an upstream event held open
    max_answer: int = MAX_ANSWER_BYTES  # the most bytes of a whole answer read
    # the store writes of what the wire names: a call reads them only once they are done
    held: Held = NOTHING
    timeout: float | None = None
    compact: Compact | None = None  # once per answer, when a round's results would be cut
    wire_tokens: int = 0  # the tokens of ``wire``
    ceiling: int = 0  # the window's ceiling (tokens)
    shown: tuple[str, ...] = ()  # what earlier rounds' answers showed

    def sent(self) -> list[Message]:
        """Every message posted upstream for this answer, round after round (the wire,
        then each continuation whole): what the usage summed over the rounds counts."""
        return [*self.wire, *self.continuations]

    async def continued(self, first: UpstreamReply, stream: bool) -> UpstreamReply:
        """The client's answer: ``first`` when the model calls none of the proxy's tools
        (a whole answer passes byte for byte), else the answer after the rounds (a whole
        answer is settled here; a stream runs its rounds as the client reads it)."""
        if stream:
            kind = first.headers.get("content-type", "")
            return StreamedRounds(self, first) if "text/event-stream" in kind else first
        try:
            return await self._settle(first)
        finally:
            self._flush()

    async def _settle(self, first: UpstreamReply) -> UpstreamReply:
        resp: UpstreamReply = first
        texts: list[str] = []
        usages: list[Any] = []
        while True:
            body = await read_all(resp, self.max_answer)
            if resp is first and b'"tool_calls"' not in body:
                return Settled(resp.status_code, resp.headers, body)  # no call: as it came
            obj = _json_object(body)
            message = _first_message(obj)
            if obj is None and resp is not first:  # the proxy answers now: what it can read
                return _not_json()
            if obj is None or message is None:
                return Settled(resp.status_code, resp.headers, body)
            listed = message.get("tool_calls")
            calls = [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
            ours = [c for c in calls if _call_name(c) in self.names]
            if not ours and resp is first:
                return Settled(resp.status_code, resp.headers, body)
            usages.append(obj.get("usage"))
            text = message.get("content")
            texts.append(text if isinstance(text, str) else "")
            theirs = [c for c in calls if _call_name(c) not in self.names]
            if not ours or theirs or self.rounds >= self.limit:
                exhausted = bool(ours) and not theirs
                self._note_end(exhausted)
                final = _final_body(obj, texts, theirs, sum_usage(usages), self._note(exhausted))
                return Settled(resp.status_code, resp.headers, final)
            resp = await self.round(texts[-1], [_plain_call(c) for c in ours])
            if resp.status_code >= 400:
                return Settled(resp.status_code, resp.headers, await read_capped(resp))

    @property
    def rounds(self) -> int:
        """Rounds answered so far."""
        return self.figures.get("retrieval_rounds", 0)

    async def round(self, text: str, calls: list[dict[str, Any]]) -> UpstreamReply:
        """Answer ``calls`` (the proxy's, with their text before them) and post the
        continuation; returns its answer (headers in, body unread)."""
        last = self.rounds + 1 >= self.limit
        await settled(self.held, self.timeout)
        for i, call in enumerate(calls):
            call.setdefault("id", "")
            if not call["id"]:
                call["id"] = f"offload_{self.rounds}_{i}"
        answered = None
        if self.compact is not None and self.memory.room < len(calls) * _MOST_PER_CALL:
            answered = await self._roomier(self.compact, calls, last)
        answered = answered or await self._answers(self.memory, calls, last)
        results = answered.results
        # the next round's searches leave out what this round's answers showed
        self.shown += tuple(str(r["content"]) for r in results)
        self.memory = dataclasses.replace(
            self.memory,
            room=self.memory.room - answered.tokens,
            on_wire=self._texts() + self.shown,
        )
        self.extra.append({"role": "assistant", "content": text or None, "tool_calls": calls})
        self.extra.extend(results)
        self._add("retrieval_rounds")
        for call, usable in zip(calls, answered.usable, strict=True):
            name = call["function"]["name"]
            self._add("retrieval_reads" if name == READ_TOOL else "retrieval_searches")
            if not usable:
                self._add("retrieval_bad_calls")
        posted = [*self.wire, *self.extra]
        self.continuations.extend(posted)
        return await self.post(posted)

    async def _answers(self, memory: Memory, calls: list[dict[str, Any]], last: bool) -> Answered:
        """The tool messages answering ``calls`` within ``memory.room``."""
        results: list[Message] = []
        usable: list[bool] = []
        spent = 0
        for call in calls:
            fn = call["function"]
            room = dataclasses.replace(memory, room=memory.room - spent)
            got: Answer = await anyio.to_thread.run_sync(
                answer_call, room, fn["name"], fn["arguments"]
            )
            content = got.text + (LAST_ROUND if last else "")
            spent += self.memory.counter.count(content) + 2 * MESSAGE_OVERHEAD
            spent += self.memory.counter.count(fn["arguments"])
            results.append({"role": "tool", "tool_call_id": call["id"], "content": content})
            usable.append(got.ok)
        return Answered(results, usable, spent)

    async def _roomier(
        self, compact: Compact, calls: list[dict[str, Any]], last: bool
    ) -> Answered | None:
        """The answers when the round's room may cut them, answered once with room to
        spare: as they are when they fit; else, once per answer, after the request is
        compacted with their size reserved. None when the compaction left too little room
        for them (they are answered again within it, cut)."""
        # room to spare, but no more than the whole window: answers past it could never
        # be sent, and a model's thousand calls in one answer would each run a search
        free = dataclasses.replace(self.memory, room=self.ceiling or _UNBOUNDED)
        wanted = await self._answers(free, calls, last)
        if wanted.tokens <= self.memory.room:
            return wanted
        self.compact = None
        # the room the earlier rounds' messages took stays reserved too
        fresh = await compact(self.ceiling - self.wire_tokens - self.memory.room + wanted.tokens)
        if fresh.wire_tokens >= self.wire_tokens:
            return None
        self._add("retrieval_compactions")
        gained = self.wire_tokens - fresh.wire_tokens
        self.wire, self.wire_tokens, self.held = fresh.messages, fresh.wire_tokens, fresh.held
        self.memory = dataclasses.replace(
            self.memory, room=self.memory.room + gained, on_wire=self._texts() + self.shown
        )
        # the compaction's own writes are done before the continuation names them
        await settled(self.held, self.timeout)
        return wanted if wanted.tokens <= self.memory.room else None

    def _texts(self) -> tuple[str, ...]:
        return tuple(t for t in (content_text(m) for m in self.wire) if t)

    def _add(self, key: str, n: int = 1) -> None:
        self.figures[key] = self.figures.get(key, 0) + n

    def _note_end(self, exhausted: bool) -> None:
        if self.rounds:
            self._add("retrieval_answers")
        if exhausted:
            self._add("retrieval_exhausted")

    def _note(self, exhausted: bool) -> str:
        return f"{EXHAUSTED} {self.limit} rounds was reached)" if exhausted else ""

    def _flush(self) -> None:
        if self.figures:
            self.count(dict(self.figures))
            self.figures.clear()


class Settled:
    """A whole answer already read (the body the client gets)."""

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status_code = status
        self.headers = headers
        self._body = body

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body in one chunk."""
        yield self._body

    async def aread(self) -> bytes:
        """The body."""
        return self._body

    async def aclose(self) -> None:
        """Nothing to close: the upstream answers were read and closed."""


class StreamedRounds:
    """A streamed answer whose rounds run as the client reads it: the proxy's tool calls
    are held back, client tool calls renumbered, and the stream ends once, after the last
    round. Closing it (the client left) closes the upstream answer in flight."""

    def __init__(self, rounds: Rounds, first: UpstreamReply) -> None:
        self.rounds = rounds
        self.status_code = first.status_code
        self.headers = first.headers
        self._current = first

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The client's event stream."""
        loop = self.rounds
        sent_text = False
        usages: list[Any] = []
        try:
            while True:
                flt = RoundFilter(loop.names, first_round=loop.rounds == 0, sent_text=sent_text)
                chunks = bounded_events(self._current.aiter_raw(), loop.max_event)
                async for chunk in chunks:
                    for out in flt.feed(chunk):
                        yield out
                    if flt.unreadable:
                        break
                for out in [] if flt.unreadable else flt.close():
                    yield out
                if flt.unreadable:
                    yield OPENAI.event(502, NOT_JSON, "upstream_error")
                    return
                sent_text = sent_text or flt.has_text()
                usages.append(flt.usage)
                ours, theirs = flt.ours(), flt.theirs
                if not ours or theirs or loop.rounds >= loop.limit:
                    exhausted = bool(ours) and not theirs
                    loop._note_end(exhausted)
                    note = loop._note(exhausted) if not sent_text else ""
                    for out in flt.finish(sum_usage(usages), note):
                        yield out
                    return
                await close_shielded(self._current)
                self._current = await loop.round(flt.text(), ours)
                if self._current.status_code >= 400:
                    yield _error_event(self._current.status_code, await read_capped(self._current))
                    return
                if not is_event_stream(self._current.headers):  # a continuation answered whole
                    body = await read_all(self._current, loop.max_answer)
                    self._current = WholeAsStream(self.status_code, self._current.headers, body)
        finally:
            loop._flush()
            await close_shielded(self._current)

    async def aread(self) -> bytes:
        """The whole client stream (for callers that read it at once)."""
        return b"".join([chunk async for chunk in self.aiter_raw()])

    async def aclose(self) -> None:
        """Close the upstream answer in flight (this stops its generation)."""
        await close_shielded(self._current)


def _error_event(status: int, body: bytes) -> bytes:
    message = body.decode("utf-8", "replace")[:500]
    obj = _json_object(body)
    err = obj.get("error") if obj is not None else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        message = err["message"]
    return OPENAI.event(status, f"the upstream refused a memory round: {message}", "api_error")


def _json_object(body: bytes) -> dict[str, Any] | None:
    """``body`` as a JSON object read as the upstream's JSON is read everywhere (not a
    number that is not finite, not nested past the stack), else None."""
    try:
        obj = wirejson.loads(body)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _not_json() -> Settled:
    """The client's answer when a memory round's continuation is no JSON: the rounds'
    text cannot be joined to it, nor the upstream's bytes passed for the whole answer."""
    error = OPENAI.body(502, NOT_JSON, "upstream_error")
    headers = {"content-type": "application/json"}
    return Settled(502, headers, json.dumps(error, ensure_ascii=False).encode())


def _first_message(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    choices = obj.get("choices") if obj is not None else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    return message if isinstance(message, dict) else None


def _call_name(call: dict[str, Any]) -> str:
    fn = call.get("function")
    name = fn.get("name") if isinstance(fn, dict) else None
    return name if isinstance(name, str) else ""


def _plain_call(call: dict[str, Any]) -> dict[str, Any]:
    """A call of the proxy's tool as the continuation's assistant message carries it."""
    fn = call.get("function") or {}
    args = fn.get("arguments")
    if not isinstance(args, str):
        args = json.dumps(args if args is not None else {}, ensure_ascii=False)
    call_id = call.get("id")
    return {
        "id": call_id if isinstance(call_id, str) else "",
        "type": "function",
        "function": {"name": _call_name(call), "arguments": args},
    }


def _final_body(
    obj: dict[str, Any],
    texts: Sequence[str],
    theirs: list[dict[str, Any]],
    usage: Any,
    note: str,
) -> bytes:
    """The last answer as the client gets it: every round's text, the client's calls only,
    the usage of all rounds."""
    choice = dict(obj["choices"][0])
    message = dict(choice["message"])
    text = "\n\n".join(t for t in texts if t) or note
    message["content"] = text or None
    if theirs:
        message["tool_calls"] = theirs
    else:
        message.pop("tool_calls", None)
        if choice.get("finish_reason") == "tool_calls":
            choice["finish_reason"] = "stop"
    choice["message"] = message
    out = {**obj, "choices": [choice]}
    if usage is not None:
        out["usage"] = usage
    return json.dumps(out, ensure_ascii=False).encode()
