"""A streamed chat answer as the OpenAI Responses event stream.

``response.created`` and ``response.in_progress`` open the stream at once. The model's
reasoning (chat's ``reasoning_content``, as llama-server streams it) streams into one
``reasoning`` item (``reasoning_text`` deltas), the answer's text into one ``message`` item (``output_item.added``, ``content_part.added``, then
``output_text.delta`` events); each tool call into a ``function_call`` item
(``output_item.added``, then ``function_call_arguments.delta`` events). Every item stays
open until the upstream's answer ends, so a delta never follows its item's ``done`` however
the upstream interleaves text and calls; then each item's ``done`` events, in output order,
and ``response.completed`` (``response.incomplete`` when the answer was cut short) with the
whole response. An upstream error, or a break mid-answer, ends the stream with ``error``
and ``response.failed``. Every event carries its ``sequence_number``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from offload.proxy.routes.answers import listed
from offload.proxy.routes.anthropic import stream_objects
from offload.proxy.routes.responses_out import (
    call_item,
    call_name,
    error_fields,
    finished,
    message_item,
    new_id,
    reasoning_item,
    reasoning_part,
    text_part,
)


@dataclass
class _Item:
    """One output item while it streams: where it sits and what it has said so far."""

    index: int
    id: str
    kind: str  # "message" or "function_call"
    call_id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.parts)


class ResponseStream:
    """The Responses events of one streamed answer, built from the chat chunks."""

    def __init__(
        self, base: dict[str, Any], namespaced: Mapping[str, tuple[str, str]] | None = None
    ) -> None:
        self.base = base  # the response object before any output (responses_out.frame)
        self.namespaced = namespaced or {}  # see responses.ChatRequest
        self.seq = 0
        self.items: list[_Item] = []
        self.message: _Item | None = None
        self.reasoning_item: _Item | None = None
        self.calls: dict[int, _Item] = {}  # chat tool-call index -> its item
        self.finish = "stop"

    def answer_text(self) -> str:
        """The text the answer has said so far."""
        return self.message.text if self.message is not None else ""

    def _event(self, kind: str, fields: dict[str, Any]) -> bytes:
        data = {"type": kind, **fields, "sequence_number": self.seq}
        self.seq += 1
        text = f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
        return text.encode("utf-8", "backslashreplace")  # a lone surrogate: its JSON escape

    def start(self) -> list[bytes]:
        """The opening events."""
        return [
            self._event("response.created", {"response": self.base}),
            self._event("response.in_progress", {"response": self.base}),
        ]

    def _added(self, item: _Item, shape: dict[str, Any]) -> bytes:
        self.items.append(item)
        return self._event(
            "response.output_item.added", {"output_index": item.index, "item": shape}
        )

    def text(self, delta: str) -> list[bytes]:
        """Events for a text delta (the first one opens the message item and its part)."""
        events: list[bytes] = []
        item = self.message
        if item is None:
            item = self.message = _Item(len(self.items), new_id("msg"), "message")
            events.append(self._added(item, message_item(item.id, None, "in_progress")))
            events.append(self._part_added(item, text_part("")))
        return [*events, *self._part_delta(item, "response.output_text.delta", delta)]

    def reasoning(self, delta: str) -> list[bytes]:
        """Events for a delta of the model's reasoning (``reasoning_content``: the first one
        opens a reasoning item and its ``reasoning_text`` part)."""
        events: list[bytes] = []
        item = self.reasoning_item
        if item is None:
            item = self.reasoning_item = _Item(len(self.items), new_id("rs"), "reasoning")
            events.append(self._added(item, reasoning_item(item.id, None, "in_progress")))
            events.append(self._part_added(item, reasoning_part("")))
        return [*events, *self._part_delta(item, "response.reasoning_text.delta", delta)]

    def _part_added(self, item: _Item, part: dict[str, Any]) -> bytes:
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        return self._event("response.content_part.added", {**where, "part": part})

    def _part_delta(self, item: _Item, kind: str, delta: str) -> list[bytes]:
        item.parts.append(delta)
        fields = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        fields["delta"] = delta
        if kind == "response.output_text.delta":
            fields["logprobs"] = []
        return [self._event(kind, fields)]

    def tool_call(self, call: dict[str, Any]) -> list[bytes]:
        """Events for one streamed tool-call delta (its first one opens a function_call item)."""
        index = call.get("index", 0)
        fn = call.get("function")
        fn_fields: dict[str, Any] = fn if isinstance(fn, dict) else {}
        events: list[bytes] = []
        item = self.calls.get(index if isinstance(index, int) else 0)
        if item is None:
            call_id = str(call.get("id") or "") or new_id("call")
            name = str(fn_fields.get("name") or "")
            item = _Item(len(self.items), new_id("fc"), "function_call", call_id, name)
            self.calls[index if isinstance(index, int) else 0] = item
            shape = call_item(item.id, call_id, self._name(item), "", "in_progress")
            events.append(self._added(item, shape))
        arguments = fn_fields.get("arguments")
        if isinstance(arguments, str) and arguments:
            item.parts.append(arguments)
            where = {"item_id": item.id, "output_index": item.index}
            events.append(
                self._event("response.function_call_arguments.delta", {**where, "delta": arguments})
            )
        return events

    def _name(self, item: _Item) -> dict[str, str]:
        return call_name(item.name, self.namespaced)

    def choice(self, choice: dict[str, Any]) -> list[bytes]:
        """Events for one streamed choice: its text, its tool calls; its finish reason kept."""
        delta = choice.get("delta")
        fields: dict[str, Any] = delta if isinstance(delta, dict) else {}
        events: list[bytes] = []
        reasoning = fields.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            events.extend(self.reasoning(reasoning))
        if isinstance(fields.get("content"), str) and fields["content"]:
            events.extend(self.text(fields["content"]))
        for call in listed(fields.get("tool_calls")):
            events.extend(self.tool_call(call))
        if choice.get("finish_reason"):
            self.finish = str(choice["finish_reason"])
        return events

    def _item_done(self, item: _Item) -> tuple[list[bytes], dict[str, Any]]:
        text = item.text
        where: dict[str, Any] = {"item_id": item.id, "output_index": item.index}
        if item.kind == "function_call":
            name = self._name(item)
            fields = {**where, "name": name["name"], "arguments": text}
            events = [self._event("response.function_call_arguments.done", fields)]
            done = call_item(item.id, item.call_id, name, text, "completed")
        else:
            where["content_index"] = 0
            if item.kind == "message":
                kind, part = "response.output_text.done", text_part(text)
                done = message_item(item.id, text, "completed")
                fields = {**where, "text": text, "logprobs": []}
            else:
                kind, part = "response.reasoning_text.done", reasoning_part(text)
                done = reasoning_item(item.id, text, "completed")
                fields = {**where, "text": text}
            events = [
                self._event(kind, fields),
                self._event("response.content_part.done", {**where, "part": part}),
            ]
        events.append(
            self._event("response.output_item.done", {"output_index": item.index, "item": done})
        )
        return events, done

    def close(self, seen: dict[str, Any]) -> list[bytes]:
        """The closing events: every item's ``done``, then the completed response (with
        the usage figures ``seen`` holds)."""
        events: list[bytes] = []
        output: list[dict[str, Any]] = []
        for item in self.items:
            item_events, done = self._item_done(item)
            events.extend(item_events)
            output.append(done)
        final = finished(self.base, output, self.finish, seen)
        kind = "response.completed" if final["status"] == "completed" else "response.incomplete"
        events.append(self._event(kind, {"response": final}))
        return events

    def fail(self, error: Any) -> list[bytes]:
        """The events that end a stream the upstream failed: ``error``, ``response.failed``."""
        message, code = error_fields(error)
        failed = {**self.base, "status": "failed"}
        failed["error"] = {"code": "server_error", "message": message}
        return [
            self._event("error", {"code": code, "message": message, "param": None}),
            self._event("response.failed", {"response": failed}),
        ]


async def stream_events(
    chunks: AsyncIterator[bytes], stream: ResponseStream, seen: dict[str, Any]
) -> AsyncIterator[bytes]:
    """Convert an OpenAI chat stream into Responses events.

    ``seen`` receives the stream's ``usage``/``timings`` (for the proxy's metrics) before the
    generator ends."""
    for event in stream.start():
        yield event
    failed = False
    async for obj in stream_objects(chunks):
        if failed:
            continue  # nothing after an error is part of the answer
        if "error" in obj:  # the upstream's own error event, or the relay's for a break
            failed = True
            for event in stream.fail(obj["error"]):
                yield event
            continue
        seen.update({k: obj[k] for k in ("usage", "timings") if k in obj})
        for choice in listed(obj.get("choices")):
            for event in stream.choice(choice):
                yield event
    if not failed:
        for event in stream.close(seen):
            yield event
