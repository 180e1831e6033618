"""``POST /v1/messages``: Anthropic Messages, converted to chat, run through the chat
exchange (see chat.py) and converted back (see anthropic.py)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from offload.errors import InvalidInput
from offload.proxy.rewrite.phases import RewriteResult
from offload.proxy.routes import anthropic
from offload.proxy.routes.chat import (
    Sent,
    break_event,
    json_body,
    record,
    run_chat,
    validate_messages,
)
from offload.proxy.state import ProxyState
from offload.proxy.transport.errors_http import ANTHROPIC, anthropic_error
from offload.proxy.transport.forward import UpstreamReply, read_capped, relay


async def messages(request: Request, state: ProxyState) -> Response:
    """``POST /v1/messages``: Anthropic Messages over the upstream's chat completions."""
    try:
        body = await json_body(request)
        payload = anthropic.to_openai(body)
        chat_messages = validate_messages(payload["messages"])
    except InvalidInput as exc:
        return anthropic_error(400, str(exc))
    model = str(body.get("model", ""))

    async def transform(
        resp: UpstreamReply, stream: bool, result: RewriteResult, sent: Sent
    ) -> Response:
        if resp.status_code >= 400:
            return anthropic.error_response(resp.status_code, await read_capped(resp))
        if stream:
            seen: dict[str, Any] = {}
            return StreamingResponse(
                anthropic.stream_events(
                    relay(
                        resp,
                        on_end=lambda ok: record(state, result, seen, error=not ok, sent=sent()),
                        on_break=break_event,  # an OpenAI error event: converted below
                        max_event=state.settings.max_event_bytes,
                    ),
                    model,
                    seen,
                    result.wire_tokens,
                ),
                media_type="text/event-stream",
            )
        return await anthropic.message_response(
            resp,
            model,
            lambda obj: record(state, result, obj, sent=sent()),
            limit=state.settings.max_answer_bytes,
        )

    try:
        return await run_chat(
            request,
            state,
            payload,
            chat_messages,
            send=state.send_chat,  # the lean client where it applies, as chat's route
            transform=transform,
            shape=ANTHROPIC,
        )
    except InvalidInput as exc:
        return anthropic_error(400, str(exc))
