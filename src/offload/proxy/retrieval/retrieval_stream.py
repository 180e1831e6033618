"""One streamed round of the retrieval loop (:mod:`offload.proxy.retrieval.retrieval_loop`): the
upstream's chat-completion events in, the client's out.

Text passes at once (on the first round without being parsed, unless the event may carry
tool calls, usage or a finish); the proxy's own tool calls are held back and assembled; the
client's tool calls pass with their indices renumbered (so the client sees 0, 1, … with the
proxy's calls gone); the round's end (its finish, usage and ``[DONE]`` events) is held
until the loop knows whether the answer ends here (then :meth:`RoundFilter.finish` gives
them, adjusted) or continues (then they are dropped).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from offload.core.http import wirejson
from offload.core.http.sse import SseDecoder, SseEvent

_FINISH = re.compile(r'"finish_reason"\s*:\s*"')
_DONE = b"data: [DONE]\n\n"
_SUMMED = ("prompt_tokens", "completion_tokens", "total_tokens")


def _encode(data: str) -> bytes:
    return b"data: " + data.encode("utf-8", "surrogatepass") + b"\n\n"


def _dump(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False)


class RoundFilter:
    """The client's events of one round, and what the round said (text, calls, usage)."""

    def __init__(self, names: frozenset[str], *, first_round: bool, sent_text: bool) -> None:
        self.names = names
        self.first_round = first_round
        self.sent_text = sent_text  # an earlier round's text reached the client
        self.theirs: dict[int, int] = {}  # upstream index -> the client's index
        self.usage: Any = None
        self._ours: dict[int, dict[str, Any]] = {}
        self._pieces: list[tuple[bool, str]] = []  # (raw event data?, text) in order
        self._held: list[tuple[dict[str, Any], str] | None] = []  # None: [DONE]
        self._envelope: dict[str, Any] = {}
        self._separated = False
        self._decoder = SseDecoder()
        self._buf = bytearray()  # the open LF event (grown in place: linear in its bytes)
        self._generic = False  # the stream uses CR line ends: decoded event by event
        # a later round sent an event of JSON the proxy cannot read (a number that is not
        # finite, nesting past the stack): the round's events stop here, the answer ends
        self.unreadable = False

    # -- events ----------------------------------------------------------------------------

    def feed(self, chunk: bytes) -> list[bytes]:
        """The client's bytes for one upstream chunk."""
        if self._generic or b"\r" in chunk:
            return self._generic_feed(chunk)
        searched = max(len(self._buf) - 1, 0)  # what was held had no event end in it
        self._buf += chunk
        out: list[bytes] = []
        start = 0
        while True:  # LF-only events (what llama-server and OpenAI send): split in place
            end = self._buf.find(b"\n\n", max(start, searched))
            if end < 0:
                break
            out.extend(self._raw_event(bytes(self._buf[start : end + 2])))
            start = end + 2
        del self._buf[:start]
        return out

    def close(self) -> list[bytes]:
        """The client's bytes for whatever the upstream's stream left pending."""
        out = self._generic_feed(b"") if self._buf and not self._generic else []
        return out + self._events(self._decoder.close())

    def _generic_feed(self, chunk: bytes) -> list[bytes]:
        """Any other line ends: the full SSE decoder from here on."""
        self._generic = True
        pending, self._buf = bytes(self._buf), bytearray()
        return self._events(self._decoder.feed(pending + chunk))

    def _raw_event(self, raw: bytes) -> list[bytes]:
        """One whole LF event; a lone ``data:`` line is handled without the decoder (and
        passed on as it came when nothing in it changes)."""
        body = raw[:-2]
        if not body.startswith(b"data: ") or b"\n" in body:
            return self._events(self._decoder.feed(raw))
        data = body[6:].decode("utf-8", "surrogatepass")
        if data.startswith("{") and not _may_matter(data) and self.first_round:
            self._pieces.append((True, data))
            return [raw]
        return self._event(SseEvent(data))

    def _events(self, events: Iterable[SseEvent]) -> list[bytes]:
        out: list[bytes] = []
        for event in events:
            out.extend(self._event(event))
        return out

    def _event(self, event: SseEvent) -> list[bytes]:
        data = event.data
        if self.unreadable:
            return []
        if event.is_done:
            self._held.append(None)
            return []
        if not data.startswith("{"):
            return [_encode(data)]
        if self.first_round and not _may_matter(data):
            self._pieces.append((True, data))
            return [_encode(data)]
        try:
            obj = wirejson.loads(data)
        except (ValueError, RecursionError):
            # the first round's events pass as the upstream sent them, as on a route
            # without the proxy's tools; a later round's would follow what the proxy wrote
            self.unreadable = not self.first_round
            return [] if self.unreadable else [_encode(data)]
        if not isinstance(obj, dict) or "error" in obj:
            return [_encode(data)]
        return self._chunk(obj, data)

    def _chunk(self, obj: dict[str, Any], data: str) -> list[bytes]:
        if not self._envelope:
            self._envelope = {k: obj[k] for k in ("id", "object", "created", "model") if k in obj}
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]
        choices = obj.get("choices")
        terminal = not choices
        changed = swallowed = False
        out_choices: list[Any] = []
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                out_choices.append(choice)
                continue
            raw_delta = choice.get("delta")
            delta = dict(raw_delta) if isinstance(raw_delta, dict) else {}
            calls = delta.pop("tool_calls", None)
            if isinstance(calls, list) and calls:
                kept = self._calls(calls)
                changed = changed or kept != calls
                if kept:
                    delta["tool_calls"] = kept
                else:
                    swallowed = not any(k != "role" for k in delta)
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._pieces.append((False, content))
                if self.sent_text and not self._separated:
                    delta["content"] = "\n\n" + content
                    changed = True
                self._separated = True
            terminal = terminal or bool(choice.get("finish_reason"))
            out_choices.append({**choice, "delta": delta})
        if changed:
            obj = {**obj, "choices": out_choices}
            data = _dump(obj)
        if terminal:
            self._held.append((obj, data))
            return []
        return [] if swallowed else [_encode(data)]

    def _calls(self, calls: Sequence[Any]) -> list[Any]:
        """The client's tool-call deltas (renumbered); the proxy's are assembled here."""
        kept: list[Any] = []
        for call in calls:
            if not isinstance(call, dict):
                kept.append(call)
                continue
            idx = call.get("index", 0)
            if not isinstance(idx, int):  # no index to hold it by: passed as it came
                kept.append(call)
                continue
            raw_fn = call.get("function")
            fn: dict[str, Any] = raw_fn if isinstance(raw_fn, dict) else {}
            piece = fn.get("arguments")
            if idx in self._ours:
                if isinstance(piece, str):
                    self._ours[idx]["function"]["arguments"] += piece
                continue
            name = fn.get("name")
            if idx not in self.theirs and isinstance(name, str) and name in self.names:
                call_id = call.get("id")
                self._ours[idx] = {
                    "id": call_id if isinstance(call_id, str) else "",
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": piece if isinstance(piece, str) else "",
                    },
                }
                continue
            self.theirs.setdefault(idx, len(self.theirs))
            kept.append({**call, "index": self.theirs[idx]})
        return kept

    # -- what the round said -----------------------------------------------------------------

    def ours(self) -> list[dict[str, Any]]:
        """The proxy's tool calls of this round, assembled, in the model's order."""
        return [self._ours[i] for i in sorted(self._ours)]

    def text(self) -> str:
        """The text this round sent the client (the separator excluded)."""
        return "".join(_piece_text(raw, s) for raw, s in self._pieces)

    def has_text(self) -> bool:
        """True when this round sent the client any text."""
        return bool(self.text())

    def finish(self, usage: Any, note: str) -> list[bytes]:
        """The held end of the round, for an answer that ends here: ``usage`` (of every
        round) in its usage event, a finish of only the proxy's calls turned to ``stop``,
        and ``note`` as text first when given."""
        out: list[bytes] = []
        if note:
            delta = {"index": 0, "delta": {"content": note}, "finish_reason": None}
            out.append(_encode(_dump({**self._envelope, "choices": [delta]})))
        for item in self._held:
            if item is None:
                out.append(_DONE)
                continue
            obj, data = item
            adjusted = self._adjusted(obj, usage)
            out.append(_encode(data if adjusted is obj else _dump(adjusted)))
        if not any(item is None for item in self._held):
            out.append(_DONE)
        return out

    def _adjusted(self, obj: dict[str, Any], usage: Any) -> dict[str, Any]:
        out = obj
        if usage is not None and isinstance(obj.get("usage"), dict) and obj["usage"] != usage:
            out = {**out, "usage": usage}
        choices = out.get("choices")
        if self._ours and not self.theirs and isinstance(choices, list):
            fixed = [
                {**c, "finish_reason": "stop"}
                if isinstance(c, dict) and c.get("finish_reason") == "tool_calls"
                else c
                for c in choices
            ]
            if fixed != choices:
                out = {**out, "choices": fixed}
        return out


def _may_matter(data: str) -> bool:
    """Whether an event may carry tool calls, usage or a finish (then it is parsed)."""
    return '"tool_calls"' in data or '"usage"' in data or _FINISH.search(data) is not None


def _piece_text(raw: bool, piece: str) -> str:
    if not raw:
        return piece
    try:
        obj = wirejson.loads(piece)
    except (ValueError, RecursionError):
        return ""
    choices = obj.get("choices") if isinstance(obj, dict) else None
    for choice in choices if isinstance(choices, list) else ():
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            delta = choice.get("delta")
            content = delta.get("content") if isinstance(delta, dict) else None
            return content if isinstance(content, str) else ""
    return ""


def sum_usage(usages: Sequence[Any]) -> Any:
    """The usage of every round: token counts summed (the one usage as it is when there was
    one round; None when no round reported usage)."""
    found = [u for u in usages if isinstance(u, dict)]
    if len(found) <= 1:
        return found[0] if found else None
    out = dict(found[-1])
    for key in _SUMMED:
        values = [u.get(key) for u in found]
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            out[key] = sum(values)
    details = [d for d in (u.get("prompt_tokens_details") for u in found) if isinstance(d, dict)]
    if len(details) == len(found) and all(isinstance(d.get("cached_tokens"), int) for d in details):
        cached = sum(int(d["cached_tokens"]) for d in details)
        out["prompt_tokens_details"] = {**details[-1], "cached_tokens": cached}
    return out
