"""``POST /v1/responses``: OpenAI Responses, converted to chat (see responses.py), run
through the chat exchange (see chat.py: windowing, stubs, sessions, figures, recall) and
converted back (see responses_out.py and responses_stream.py)."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from offload.core.http import wirejson
from offload.errors import InvalidInput, UpstreamTooLarge
from offload.proxy.rewrite.phases import RewriteResult
from offload.proxy.routes import responses, responses_out
from offload.proxy.routes.chat import (
    Sent,
    break_event,
    json_body,
    record,
    run_chat,
    validate_messages,
)
from offload.proxy.routes.responses_stream import ResponseStream, stream_events
from offload.proxy.state import ProxyState
from offload.proxy.transport.errors_http import OPENAI, TextJSON, openai_error
from offload.proxy.transport.forward import UpstreamReply, read_all, read_capped, relay


async def create_response(request: Request, state: ProxyState) -> Response:
    """``POST /v1/responses``: a stateless Responses request over the upstream's chat
    completions."""
    try:
        body = await json_body(request)
        request_as_chat = responses.to_chat(body)
        payload = request_as_chat.payload
        chat_messages = validate_messages(payload["messages"])
    except InvalidInput as exc:
        return openai_error(400, str(exc))
    base = responses_out.frame(body)
    namespaced = request_as_chat.namespaced

    async def transform(
        resp: UpstreamReply, stream: bool, result: RewriteResult, sent: Sent
    ) -> Response:
        if resp.status_code >= 400:
            return error_response(resp.status_code, await read_capped(resp))
        if stream:
            return _streamed(state, resp, ResponseStream(base, namespaced), result, sent)
        answer = await _whole(state, resp, result, sent)
        if isinstance(answer, Response):
            return answer
        response = responses_out.response_object(base, answer, namespaced)
        for item in response["output"]:
            if item["type"] == "message":
                state.precount(item["content"][0]["text"])
        return TextJSON(response)

    try:
        return await run_chat(
            request,
            state,
            payload,
            chat_messages,
            send=state.send_chat,  # the lean client where it applies, as chat's route
            transform=transform,
            shape=OPENAI,
        )
    except InvalidInput as exc:
        return openai_error(400, str(exc))


async def stored_response(request: Request, state: ProxyState) -> Response:
    """``/v1/responses/...`` (a stored response, its input items, cancel, compact, count):
    a 404 that says why; nothing is stored here, and the upstream has none of these."""
    return openai_error(
        404,
        f"{request.method} {request.url.path}: this proxy keeps no responses and serves only"
        " POST /v1/responses, with the whole conversation in 'input'",
        "not_found_error",
    )


def _streamed(
    state: ProxyState,
    resp: UpstreamReply,
    stream: ResponseStream,
    result: RewriteResult,
    sent: Sent,
) -> Response:
    seen: dict[str, Any] = {}

    def on_end(completed: bool) -> None:
        record(state, result, seen, error=not completed, sent=sent())
        if completed:
            state.precount(stream.answer_text())

    chunks = relay(  # breaks: converted below
        resp, on_end=on_end, on_break=break_event, max_event=state.settings.max_event_bytes
    )
    return StreamingResponse(stream_events(chunks, stream, seen), media_type="text/event-stream")


async def _whole(
    state: ProxyState, resp: UpstreamReply, result: RewriteResult, sent: Sent
) -> dict[str, Any] | Response:
    """The whole chat answer, counted (or the error response when it is not JSON)."""
    try:
        obj = wirejson.loads(await read_all(resp, state.settings.max_answer_bytes))
    except UpstreamTooLarge as exc:
        record(state, result, {}, error=True, sent=sent())
        return openai_error(502, str(exc), "upstream_error")
    except (ValueError, RecursionError):
        record(state, result, {}, error=True, sent=sent())
        return openai_error(502, "upstream answered with non-JSON", "upstream_error")
    answer: dict[str, Any] = obj if isinstance(obj, dict) else {}
    record(state, result, answer, sent=sent())
    return answer


def error_response(status: int, body: bytes) -> Response:
    """An upstream error (its status and body) in the OpenAI error shape."""
    message, type_, code = body.decode("utf-8", "replace"), "upstream_error", None
    try:
        err = json.loads(body).get("error")
    except (ValueError, AttributeError, RecursionError):
        err = None
    if isinstance(err, dict):
        message = str(err.get("message") or message)
        type_ = str(err.get("type") or type_)
        raw_code = err.get("code")
        code = raw_code if isinstance(raw_code, str | int) else None
    elif isinstance(err, str):
        message = err
    return openai_error(status, message, type_, code)
