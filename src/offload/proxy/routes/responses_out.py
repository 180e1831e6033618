"""Chat-completions answers as OpenAI Responses objects: whole, or as the Responses event
stream (``response.created``, ``response.in_progress``, each output item's ``added``,
deltas and ``done`` events, then ``response.completed``, ``response.incomplete`` or
``error`` + ``response.failed``; every event numbered by ``sequence_number``).

The model's reasoning, when the upstream gives it (``reasoning_content``), is one
``reasoning`` item with one ``reasoning_text`` part; the answer's text is one ``message``
item with one ``output_text`` part; each tool call is a ``function_call`` item whose
``call_id`` is the chat tool-call id. Usage reports ``input_tokens``, ``output_tokens`` and
``input_tokens_details.cached_tokens`` from the upstream's own figures.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import Any

from offload.proxy.figures.metrics import cache_figures, token_figure
from offload.proxy.routes.answers import first_choice, listed, text_of

# chat finish reasons that leave a response incomplete, and the reason it then gives
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def new_id(prefix: str) -> str:
    """A fresh identifier in OpenAI's style (``resp_…``, ``msg_…``, ``fc_…``)."""
    return f"{prefix}_{secrets.token_hex(16)}"


def frame(body: dict[str, Any]) -> dict[str, Any]:
    """The response object of a request before any output: what it echoes of the request
    (``store`` is false: nothing is kept)."""
    return {
        "id": new_id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": str(body.get("model") or ""),
        "output": [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True) is not False,
        "previous_response_id": None,
        "reasoning": body.get("reasoning"),
        "store": False,
        "temperature": body.get("temperature"),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p"),
        "truncation": body.get("truncation") or "disabled",
        "usage": None,
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
    }


def usage(obj: dict[str, Any]) -> dict[str, Any]:
    """Responses usage from a chat answer's (or its stream's last chunk's) figures."""
    raw = obj.get("usage")
    fields: dict[str, Any] = raw if isinstance(raw, dict) else {}
    prompt, cached = cache_figures(obj)
    given = token_figure(fields.get("prompt_tokens")) or prompt or 0
    made = token_figure(fields.get("completion_tokens")) or 0
    details = fields.get("completion_tokens_details")
    reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
    prompt_details = fields.get("prompt_tokens_details")
    written = prompt_details.get("cache_write_tokens") if isinstance(prompt_details, dict) else None
    return {
        "input_tokens": given,
        # cache writes: only a figure the upstream reports (chat usage seldom has one)
        "input_tokens_details": {
            "cached_tokens": min(cached or 0, given),
            "cache_write_tokens": token_figure(written) or 0,
        },
        "output_tokens": made,
        "output_tokens_details": {"reasoning_tokens": token_figure(reasoning) or 0},
        "total_tokens": given + made,
    }


def text_part(text: str) -> dict[str, Any]:
    """An ``output_text`` content part."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    """An assistant ``message`` output item (no content part while ``text`` is None)."""
    content = [] if text is None else [text_part(text)]
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def reasoning_part(text: str) -> dict[str, Any]:
    """A ``reasoning_text`` content part."""
    return {"type": "reasoning_text", "text": text}


def reasoning_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    """A ``reasoning`` output item holding the model's reasoning as text (no summary)."""
    content = [] if text is None else [reasoning_part(text)]
    return {"id": item_id, "type": "reasoning", "status": status, "summary": [], "content": content}


def call_item(
    item_id: str, call_id: str, name: dict[str, str], arguments: str, status: str
) -> dict[str, Any]:
    """A ``function_call`` output item (``name``: see :func:`call_name`)."""
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        **name,
        "arguments": arguments,
    }


def call_name(chat_name: str, namespaced: Mapping[str, tuple[str, str]]) -> dict[str, str]:
    """A function call's ``name`` (and ``namespace``, for a function a namespace tool
    offered) from the name the upstream called."""
    if chat_name in namespaced:
        namespace, name = namespaced[chat_name]
        return {"name": name, "namespace": namespace}
    return {"name": chat_name}


def finished(
    base: dict[str, Any], output: list[dict[str, Any]], finish: str, obj: dict[str, Any]
) -> dict[str, Any]:
    """The response object ``base`` once its answer is complete: its output, its status
    from the chat ``finish`` reason, the usage figures of ``obj``."""
    reason = _INCOMPLETE.get(finish)
    return {
        **base,
        "status": "completed" if reason is None else "incomplete",
        "incomplete_details": None if reason is None else {"reason": reason},
        "output": output,
        "usage": usage(obj),
    }


def response_object(
    base: dict[str, Any], obj: dict[str, Any], namespaced: Mapping[str, tuple[str, str]]
) -> dict[str, Any]:
    """A whole chat completion ``obj`` as the response object ``base`` completed
    (``namespaced``: the functions offered from a namespace, to name their calls)."""
    choice, fields = first_choice(obj)
    output: list[dict[str, Any]] = []
    if isinstance(fields.get("reasoning_content"), str) and fields["reasoning_content"]:
        output.append(reasoning_item(new_id("rs"), fields["reasoning_content"], "completed"))
    if fields.get("content"):
        output.append(message_item(new_id("msg"), text_of(fields["content"]), "completed"))
    for call in listed(fields.get("tool_calls")):
        fn = call.get("function")
        if isinstance(fn, dict):
            output.append(
                call_item(
                    new_id("fc"),
                    str(call.get("id") or "") or new_id("call"),
                    call_name(str(fn.get("name") or ""), namespaced),
                    text_of(fn.get("arguments")),
                    "completed",
                )
            )
    finish = str(choice.get("finish_reason") or "stop")
    return finished(base, output, finish, obj)


def error_fields(error: Any) -> tuple[str, str]:
    """``(message, code)`` of an OpenAI-style error object (or anything else said)."""
    fields: dict[str, Any] = error if isinstance(error, dict) else {"message": str(error)}
    code = fields.get("code") or fields.get("type") or "server_error"
    return str(fields.get("message") or "upstream error"), str(code)
