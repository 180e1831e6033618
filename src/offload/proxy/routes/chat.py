"""The chat-completions exchange: validate, rewrite (in a worker thread), forward, relay
and count one chat request, with one retry after an upstream context overflow.

``POST /v1/chat/completions`` is served here; the Anthropic and Responses routes reuse
:func:`run_chat` with their own answer transforms.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anyio
import httpx
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from offload.errors import (
    InvalidInput,
    StoreError,
    UpstreamError,
    UpstreamTimeout,
    UpstreamTooLarge,
    UpstreamUnavailable,
)
from offload.proxy.figures.metrics import RequestRecord, cache_figures
from offload.proxy.figures.turns import session_title, stub_lines
from offload.proxy.retrieval import retrieval_loop
from offload.proxy.rewrite.messages import (
    calls_text,
    content_text,
    head_end,
    message_tokens,
    session_key,
)
from offload.proxy.rewrite.phases import RewriteResult
from offload.proxy.rewrite.stubs.writes import Held, settled
from offload.proxy.state import ProxyState
from offload.proxy.transport.errors_http import OPENAI, ErrorShape, openai_error
from offload.proxy.transport.forward import (
    UpstreamReply,
    close_shielded,
    race_disconnect,
    read_all,
    read_capped,
    relay,
    request_headers,
    response_headers,
)
from offload.proxy.transport.jsonbody import parse_object
from offload.proxy.transport.overflow import NoFit, no_fit, no_fit_message, overflow_of
from offload.proxy.transport.whole_stream import WholeAsStream, is_event_stream

# one logger name for the whole proxy surface, whichever module logs
log = logging.getLogger("offload.proxy")

KNOWN_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# after an overflow, aim this far under the upstream's own count
OVERFLOW_MARGIN = 0.95

R = TypeVar("R", bound=UpstreamReply)
#: The messages an answer's reported usage counts (every retrieval round's).
Sent = Callable[[], Sequence[Mapping[str, Any]]]


async def json_body(request: Request) -> dict[str, Any]:
    """The body parsed (it must be a JSON object); raises :class:`InvalidInput`."""
    return (await raw_json_body(request))[1]


async def raw_json_body(request: Request) -> tuple[bytes, dict[str, Any]]:
    """The body as sent and as parsed (a JSON object of valid text: see
    :func:`offload.proxy.transport.jsonbody.parse_object`), sent without a content coding:
    the proxy reads, rewrites and stores what it is sent and inflates nothing (an inflated
    body would escape the body limit, and a body it rewrote would go upstream still
    labelled with the client's coding)."""
    coding = request.headers.get("content-encoding", "").strip().lower()
    if coding not in ("", "identity"):
        raise InvalidInput(
            f"request body in Content-Encoding {coding[:40]!r}: the proxy reads request "
            "bodies uncompressed only; send the JSON without a Content-Encoding"
        )
    raw = await request.body()
    return raw, parse_object(raw)


def validate_messages(messages: Any) -> list[dict[str, Any]]:
    """The chat messages, checked: a non-empty list of objects with a known role."""
    if not isinstance(messages, list) or not messages:
        raise InvalidInput("'messages' must be a non-empty array")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise InvalidInput(f"messages[{i}] must be an object")
        role = msg.get("role")
        if role not in KNOWN_ROLES:
            raise InvalidInput(
                f"messages[{i}].role {role!r} is not one of {', '.join(sorted(KNOWN_ROLES))}"
            )
        content = msg.get("content")
        if content is not None and not isinstance(content, str | list):
            raise InvalidInput(f"messages[{i}].content must be a string, an array or null")
    return messages


@dataclass
class _Exchange:
    """One chat request on its way upstream."""

    payload: dict[str, Any]
    result: RewriteResult
    n_ctx: int
    fixed: int = 0  # tokens of the request's tool definitions (beside its messages)


async def chat_completions(request: Request, state: ProxyState) -> Response:
    """``POST /v1/chat/completions``."""
    if state.chat_pool is not None:
        state.chat_pool.prepare()  # the upstream connect overlaps parsing and the rewrite
    try:
        raw, payload = await raw_json_body(request)
        messages = validate_messages(payload.get("messages"))
        return await run_chat(request, state, payload, messages, send=state.send_chat, raw=raw)
    except InvalidInput as exc:
        return openai_error(400, str(exc))


async def run_chat(
    request: Request,
    state: ProxyState,
    payload: dict[str, Any],
    messages: list[dict[str, Any]],
    *,
    send: Callable[[bytes, dict[str, str]], Awaitable[R]],
    transform: Callable[[UpstreamReply, bool, RewriteResult, Sent], Awaitable[Response]]
    | None = None,
    raw: bytes | None = None,
    shape: ErrorShape = OPENAI,
) -> Response:
    """Rewrite, forward, relay and count one chat request. ``send`` posts a body upstream
    (the lean client or httpx); ``transform`` lets the Anthropic and Responses routes
    convert the answer instead of relaying it (``Sent`` gives the messages its usage counts,
    for :func:`record`; an upstream error reaches it with its body readable again). ``raw``:
    the client's body, which is sent as it came when the rewrite left the messages as they
    were. ``shape``: how the client's API says the proxy's own errors (timeouts, an
    unreachable upstream, a request that cannot fit)."""
    n_ctx = await state.n_ctx()
    offer = retrieval_loop.offer_for(state, payload, raw)  # the proxy's own memory tools
    if offer is not None:
        payload, raw = offer.payload, offer.raw
    try:
        exchange = await _rewrite(state, payload, messages, n_ctx)
    except StoreError as exc:
        return _store_down(shape, exc)
    headers = request_headers(request.headers)
    headers["content-type"] = "application/json"
    stream = bool(payload.get("stream"))
    upstream = _Upstream(state, payload, messages, send, headers, raw, exchange, stream, offer)
    answered = await _answered(request, upstream, shape)
    if isinstance(answered, Response):
        return answered
    resp, read = answered
    result = upstream.exchange.result
    if resp.status_code >= 400:
        body = read if read is not None else await error_body(resp)
        _count_error(state, result)
        if transform is not None:  # the body is read: a lean-client reply gives it once
            return await transform(_ReadReply(resp, body), False, result, upstream.sent)
        return Response(body, resp.status_code, headers=response_headers(resp.headers))
    # what the wire names is stored before the answer completes: a whole answer's headers
    # come with its body, so it waits here; a stream's last chunk waits in HeldReply
    if stream:
        resp = HeldReply(resp, result.held, state.settings.timeout_s)
    else:
        try:
            await settled(result.held, state.settings.timeout_s)
        except StoreError as exc:
            await close_shielded(resp)
            _count_error(state, result)
            return _unstored(shape, exc)
    if transform is not None:
        return await transform(resp, stream, result, upstream.sent)
    if stream:
        return _relay_stream(state, resp, result, upstream.sent)
    return await _relay_whole(request, state, resp, result, upstream.sent)


@dataclass
class _Upstream(Generic[R]):
    """One chat request's way upstream: the exchange in flight (replaced by the overflow
    retry) and how its body is sent."""

    state: ProxyState
    payload: dict[str, Any]
    messages: list[dict[str, Any]]
    send: Callable[[bytes, dict[str, str]], Awaitable[R]]
    headers: dict[str, str]
    raw: bytes | None
    exchange: _Exchange
    stream: bool
    offer: retrieval_loop.Offer | None = None
    rounds: retrieval_loop.Rounds | None = None
    whole: bool = False  # a streaming request the upstream answered whole

    def sent(self) -> list[dict[str, Any]]:
        """Every message posted for this answer (over all retrieval rounds): what the
        answer's usage, summed over the rounds, counts."""
        if self.rounds is not None:
            return self.rounds.sent()
        return self.exchange.result.messages

    async def post(self) -> R:
        """Send the current exchange; the answer's headers are in, its body is not read.

        A streamed answer's headers come with its first token, so they must arrive within
        ``first_byte_timeout_s``; a whole answer's come when it is complete, so only the
        whole-request limit (``timeout_s``) bounds them."""
        if self.raw is not None and self.exchange.result.messages == self.messages:
            body = self.raw  # nothing rewritten: the client's bytes, without a re-encoding
        else:
            body = json.dumps({**self.payload, "messages": self.exchange.result.messages}).encode()
        settings = self.state.settings
        if not self.stream or settings.first_byte_timeout_s >= settings.timeout_s:
            return await self.send(body, self.headers)
        limit = settings.first_byte_timeout_s
        try:
            with anyio.fail_after(limit):
                return await self.send(body, self.headers)
        except TimeoutError:
            raise UpstreamTimeout(
                f"the upstream sent no answer within {limit:g} s (proxy.first_byte_timeout_s)"
            ) from None

    async def answer(self) -> tuple[UpstreamReply, bytes | None] | NoFit:
        """The upstream's answer, retried once after a context overflow, and its body when
        it had to be read already; :class:`NoFit` when the request cannot fit (the retry
        would send the very same bytes, or overflowed too). With the proxy's tools offered,
        the answer after the retrieval rounds (see retrieval_loop). A streaming request
        answered whole is answered as a stream of that answer (see whole_stream)."""
        got = await self._answer()
        if self.offer is not None and retrieval_loop.refused(self.offer, got):
            # the upstream refuses tools (a model without them): once more without ours, and
            # "auto" offers them no more
            self.state.learn_tool_support(False)
            self.payload, self.raw, self.offer = self.offer.original, self.offer.original_raw, None
            got = await self._answer()
        if isinstance(got, NoFit) or got[0].status_code >= 400:
            return got
        reply: UpstreamReply = got[0]
        # a whole answer to a streaming request is settled whole, then given as a stream
        self.whole = self.stream and not is_event_stream(reply.headers)
        if self.offer is not None:
            ex = self.exchange
            rounds = retrieval_loop.rounds_for(
                self.state, self.offer, ex.result, ex.n_ctx, self.more, self.roomier, ex.fixed
            )
            self.rounds = rounds
            reply = await rounds.continued(reply, self.stream and not self.whole)
        if self.whole:
            body = await read_all(reply, self.state.settings.max_answer_bytes)
            reply = WholeAsStream(reply.status_code, reply.headers, body)
        return reply, got[1]

    def _no_fit(self, overflow: dict[str, Any]) -> NoFit:
        return no_fit(overflow, self.exchange.n_ctx, self.exchange.result.wire_tokens)

    async def more(self, messages: list[dict[str, Any]]) -> R:
        """Post a continuation of this request with ``messages`` (a retrieval round); one
        that settles a whole answer to a streaming request asks for a whole answer too."""
        payload = {**self.payload, "messages": messages}
        if self.whole:
            payload.pop("stream_options", None)
            payload["stream"] = False
        body = json.dumps(payload, ensure_ascii=False)
        return await self.send(body.encode(), self.headers)

    async def roomier(self, reserve: int) -> RewriteResult:
        """This request rewritten again with ``reserve`` tokens kept free under the
        ceiling (a retrieval round whose results would not fit compacts it)."""
        ex = await _rewrite(self.state, self.payload, self.messages, self.exchange.n_ctx, reserve)
        return ex.result

    async def _answer(self) -> tuple[R, bytes | None] | NoFit:
        resp = await self.post()
        if resp.status_code != 400:
            return resp, None
        body = await error_body(resp)  # httpx keeps it for a transform to read again
        overflow = overflow_of(body)
        if overflow is None:
            return resp, body
        retry = await _overflow_retry(
            self.state, overflow, self.exchange, self.payload, self.messages
        )
        if retry.result.messages == self.exchange.result.messages:
            return self._no_fit(overflow)  # the same bytes would overflow again
        self.exchange = retry
        resp = await self.post()
        if resp.status_code != 400:
            return resp, None
        body = await error_body(resp)
        overflow = overflow_of(body)
        return (resp, body) if overflow is None else self._no_fit(overflow)


@dataclass
class _Wrapped:
    """An upstream answer read through another object: its status and headers as they are."""

    reply: UpstreamReply

    @property
    def status_code(self) -> int:
        return self.reply.status_code

    @property
    def headers(self) -> Mapping[str, str]:
        return self.reply.headers


@dataclass
class HeldReply(_Wrapped):
    """A streamed answer whose completion waits for the store writes its wire depends on
    (:mod:`offload.proxy.rewrite.stubs.writes`): chunks pass as they come once the writes
    are done (as they nearly always are by the first token, after the prefill); while they
    are not, each chunk waits for the next, and the last one for the writes. A write that
    failed ends the stream with the store's error (``relay`` turns it into an error event)."""

    held: Held
    timeout: float

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        last: bytes | None = None
        async for chunk in self.reply.aiter_raw():
            if last is not None:
                yield last
                last = None
            if self.held.pending():
                last = chunk
            else:
                yield chunk
        await settled(self.held, self.timeout)
        if last is not None:
            yield last

    async def aread(self) -> bytes:
        body = await self.reply.aread()
        await settled(self.held, self.timeout)
        return body

    async def aclose(self) -> None:
        await self.reply.aclose()


@dataclass
class _ReadReply(_Wrapped):
    """An upstream answer whose body has been read already, readable again."""

    body: bytes

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        yield self.body

    async def aread(self) -> bytes:
        return self.body

    async def aclose(self) -> None:
        return None


async def _answered(
    request: Request, upstream: _Upstream[R], shape: ErrorShape
) -> tuple[UpstreamReply, bytes | None] | Response:
    """The upstream's answer, or the error response when there is none (timeout, upstream
    down, a request that cannot fit, client gone)."""
    state = upstream.state
    try:
        got = await race_disconnect(request, upstream.answer)
    except (httpx.TimeoutException, UpstreamTimeout) as exc:
        _count_error(state, upstream.exchange.result)
        return shape.response(504, f"upstream did not answer in time: {exc}", "upstream_timeout")
    except UpstreamTooLarge as exc:  # a whole answer (a retrieval round's) past the bound
        _count_error(state, upstream.exchange.result)
        return shape.response(502, str(exc), "upstream_error")
    except (httpx.HTTPError, UpstreamUnavailable) as exc:
        _count_error(state, upstream.exchange.result)
        why = str(exc) if isinstance(exc, UpstreamError) else type(exc).__name__
        return shape.response(
            502, f"cannot reach upstream {state.api}: {why}", "upstream_unavailable"
        )
    except StoreError as exc:  # the overflow retry's rewrite, the store gone meanwhile
        _count_error(state, upstream.exchange.result)
        return _store_down(shape, exc)
    if got is None:  # the client went away before the upstream answered
        _count_error(state, upstream.exchange.result)
        return Response(status_code=499)
    if isinstance(got, NoFit):
        _count_error(state, upstream.exchange.result)
        log.info("request does not fit: %s", no_fit_message(got))
        return shape.response(
            400, no_fit_message(got), "invalid_request_error", code="context_length_exceeded"
        )
    return got


def break_event(exc: BaseException) -> bytes:
    """The OpenAI error event that ends a stream the upstream broke off (or fell silent in)
    mid-answer, or whose wire's content the store did not take, so the client sees a
    failure, not a normal finish."""
    if isinstance(exc, StoreError):
        return OPENAI.event(503, _UNSTORED + str(exc), "store_unavailable")
    if isinstance(exc, httpx.TimeoutException | UpstreamTimeout):
        return OPENAI.event(504, f"the upstream fell silent mid-answer: {exc}", "upstream_timeout")
    if isinstance(exc, UpstreamTooLarge):
        return OPENAI.event(502, f"the upstream's answer was cut: {exc}", "upstream_error")
    why = str(exc) if isinstance(exc, UpstreamError) else type(exc).__name__
    return OPENAI.event(502, f"the upstream broke off mid-answer: {why}", "upstream_unavailable")


def _relay_stream(
    state: ProxyState, resp: UpstreamReply, result: RewriteResult, sent: Sent
) -> Response:
    """Relay a streamed answer as it comes, counting it (and its text) at the end."""
    seen: dict[str, Any] = {}
    answer: list[str] = []
    gather = state.counter.exact  # the answer is only worth collecting to count it

    def on_event(data: str) -> None:
        if not gather and '"timings"' not in data and '"usage"' not in data:
            return  # nothing this event says is needed: skip parsing it
        with contextlib.suppress(ValueError, RecursionError):
            obj = json.loads(data)
            if isinstance(obj, dict):
                seen.update({k: obj[k] for k in ("usage", "timings") if k in obj})
                answer.append(_answer_text(obj, "delta"))

    def on_end(completed: bool) -> None:
        record(state, result, seen, error=not completed, sent=sent())
        if completed:
            state.precount("".join(answer))

    return StreamingResponse(
        relay(
            resp,
            on_event_json=on_event,
            on_end=on_end,
            on_break=break_event,
            max_event=state.settings.max_event_bytes,
        ),
        status_code=resp.status_code,
        headers=response_headers(resp.headers),
    )


async def _relay_whole(
    request: Request, state: ProxyState, resp: UpstreamReply, result: RewriteResult, sent: Sent
) -> Response:
    """Read a whole answer (unless the client goes away first), count it and pass it on."""
    limit = state.settings.max_answer_bytes
    try:
        body_or_none = await race_disconnect(request, lambda: read_all(resp, limit))
    except UpstreamTooLarge as exc:
        _count_error(state, result)
        return OPENAI.response(502, str(exc), "upstream_error")
    if body_or_none is None:
        await close_shielded(resp)
        _count_error(state, result)
        return Response(status_code=499)
    try:
        obj = json.loads(body_or_none)
    except (ValueError, RecursionError):
        obj = {}
    record(state, result, obj if isinstance(obj, dict) else {}, sent=sent())
    if isinstance(obj, dict):
        state.precount(_answer_text(obj, "message"))
    return Response(body_or_none, resp.status_code, headers=response_headers(resp.headers))


# The client sends the model's answer back as the next turn's assistant message: counting
# its text while the client reads it takes one /tokenize call off that turn's first byte.


def _answer_text(obj: dict[str, Any], part: str) -> str:
    """The text of the first choice: its ``message`` in a whole chat completion, or what a
    streamed chunk's ``delta`` adds to it."""
    choices = obj.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            holder = choice.get(part)
            text = holder.get("content") if isinstance(holder, dict) else None
            return text if isinstance(text, str) else ""
    return ""


async def error_body(resp: UpstreamReply) -> bytes:
    """An error response's whole body, closing it (httpx keeps it for a second read)."""
    return await read_capped(resp)


async def _rewrite(
    state: ProxyState,
    payload: dict[str, Any],
    messages: list[dict[str, Any]],
    n_ctx: int,
    reserve: int = 0,
) -> _Exchange:
    hint = payload.get("user")
    rewrite = functools.partial(
        state.pipeline.rewrite,
        session_hint=hint if isinstance(hint, str) else "",
        alternate=state.alternate,
        wait_writes=False,  # they run beside the upstream; the answer waits for them
        reserve=reserve,
    )
    state.last_request = time.monotonic()
    try:
        result, fixed = await anyio.to_thread.run_sync(
            _counted_rewrite, state, rewrite, payload, messages, n_ctx
        )
    except StoreError as exc:
        result = await anyio.to_thread.run_sync(_unrewritten, state, payload, messages, n_ctx, exc)
        fixed = 0
    return _Exchange(payload, result, n_ctx, fixed)


def _counted_rewrite(
    state: ProxyState,
    rewrite: Callable[..., RewriteResult],
    payload: Mapping[str, Any],
    messages: list[dict[str, Any]],
    n_ctx: int,
) -> tuple[RewriteResult, int]:
    """The rewrite, once the messages' texts the counter has not met are counted side by
    side (a long session's first request; a turn's few new texts are left to the rewrite),
    with the tokens of the request's tool definitions taken off the room its messages get;
    those tokens too."""
    state.counter.warm(text for m in messages for text in (content_text(m), calls_text(m)))
    fixed = state.definitions.tokens(payload)
    return rewrite(messages, n_ctx, fixed=fixed), fixed


def _unrewritten(
    state: ProxyState,
    payload: dict[str, Any],
    messages: list[dict[str, Any]],
    n_ctx: int,
    down: StoreError,
) -> RewriteResult:
    """With the store down, the client's messages as they came when they fit under the
    ceiling (they need no page-out, which the store would have to hold): the model keeps
    answering what fits while the store is away. Else ``down`` is raised again."""
    tokens = sum(message_tokens(state.counter, m) for m in messages)
    if tokens > state.settings.emergency * n_ctx:
        raise down
    log.warning("the store is unavailable (%s): the request goes out as it came", down)
    hint = payload.get("user")
    return RewriteResult(
        messages=messages,
        session_id=session_key(
            messages[: head_end(messages)], hint if isinstance(hint, str) else ""
        ),
        client_tokens=tokens,
        wire_tokens=tokens,
        stubs_made=0,
        stubbed_messages=0,
        windowed=False,
        emergency=False,
        prefix_kept=False,
        break_cause="store_unavailable",
    )


_UNSTORED = "the content this request's stubs name could not be stored: "


def _unstored(shape: ErrorShape, exc: StoreError) -> Response:
    """An answer held back because the store did not take what its wire names (the stubs
    would dangle): a 503 in the client's shape; the request may be sent again."""
    return shape.response(503, _UNSTORED + str(exc), "store_unavailable")


def _store_down(shape: ErrorShape, exc: StoreError) -> Response:
    """A request that needs the store (to page out what does not fit) while it is down:
    a 503 in the client's shape with the store's own one-line message."""
    return shape.response(
        503,
        f"this request must be paged out to fit n_ctx, and the store is unavailable: {exc}",
        "store_unavailable",
    )


async def _overflow_retry(
    state: ProxyState,
    err: dict[str, Any],
    exchange: _Exchange,
    payload: dict[str, Any],
    messages: list[dict[str, Any]],
) -> _Exchange:
    """After an ``exceed_context_size_error`` (its error object ``err``): learn the true
    sizes and rewrite once more with the budget scaled so our counts land under the
    upstream's."""
    upstream_n_ctx = err.get("n_ctx")
    n_prompt = err.get("n_prompt_tokens")
    if isinstance(upstream_n_ctx, int) and upstream_n_ctx > 0:
        state.learn_n_ctx(upstream_n_ctx, "overflow_error")
    else:
        await state.refresh_n_ctx()
    n_ctx = await state.n_ctx()
    wire = exchange.result.wire_tokens
    if isinstance(n_prompt, int) and n_prompt > 0 and wire > 0:
        state.counter.calibrate(exchange.result.messages, n_prompt)
        n_ctx = max(1, int(n_ctx * min(1.0, wire / n_prompt) * OVERFLOW_MARGIN))
    else:
        n_ctx = max(1, int(n_ctx * OVERFLOW_MARGIN))
    log.info("upstream overflow (%s prompt tokens); retrying with budget n_ctx=%s", n_prompt, n_ctx)
    return await _rewrite(state, payload, messages, n_ctx)


def record(
    state: ProxyState,
    result: RewriteResult,
    obj: dict[str, Any],
    *,
    error: bool = False,
    sent: Sequence[Mapping[str, Any]] | None = None,
) -> None:
    """Count one request, with the cache figures its response reported. ``sent``: every
    message its reported prompt size counts (over all retrieval rounds; by default the
    wire), which calibrates the offline counter."""
    prompt, cached = cache_figures(obj)
    cause = state.metrics.record(
        RequestRecord(
            session_id=result.session_id,
            **result.figures(),
            prompt_tokens=prompt,
            cached_tokens=cached,
            error=error,
            n_ctx=state.n_ctx_value or 0,
            title=session_title(result.messages),
            stubs=stub_lines(result.messages),
        )
    )
    if cause is not None:
        log.info("session %s: prefix break (%s)", result.session_id[:12], cause)
    if prompt and not state.counter.exact:
        state.counter.calibrate(result.messages if sent is None else sent, prompt)


def _count_error(state: ProxyState, result: RewriteResult) -> None:
    record(state, result, {}, error=True)
