"""Server-sent events decoding (pure): bytes in any chunking -> events.

Follows the SSE line rules (LF, CRLF or CR line ends; ``field: value`` with one optional
space; ``data`` lines joined by ``\\n``; comment lines start with ``:``; a blank line
dispatches). Chunks may split anywhere, even inside a CRLF or a multi-byte character.
An event still pending at end of stream is dispatched if it has data, because some
servers omit the final blank line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from offload.core.http import wirejson

DONE = "[DONE]"
# a line ends at CRLF, a lone CR or LF
_LINE_END = re.compile(rb"\r\n|\r|\n")
#: What ends an event: a blank line after a line (lines end with LF, CR or CRLF).
EVENT_ENDS = (b"\n\n", b"\r\r", b"\n\r\n")


class EventBound:
    """The bytes of the event still open in a stream fed chunk by chunk (:attr:`pending`),
    so a reader can bound what it holds of an event that never ends. Each chunk is searched
    once (with the two bytes before it, where an end may straddle chunks): linear."""

    def __init__(self) -> None:
        self.pending = 0
        self._tail = b""

    def feed(self, chunk: bytes) -> int:
        """Count ``chunk``; the offset in it just past the last event end it holds (0 when
        it holds none: the whole chunk belongs to the open event)."""
        data = self._tail + chunk
        end = 0
        for mark in EVENT_ENDS:
            at = data.rfind(mark)
            if at >= 0:
                end = max(end, at + len(mark))
        self._tail = data[-2:]
        in_chunk = end - (len(data) - len(chunk))
        if in_chunk > 0:
            self.pending = len(chunk) - in_chunk
            return in_chunk
        self.pending += len(chunk)
        return 0


@dataclass(frozen=True)
class SseEvent:
    """One dispatched event."""

    data: str
    event: str = "message"
    id: str | None = None

    @property
    def is_done(self) -> bool:
        """True for the OpenAI end-of-stream marker ``data: [DONE]``."""
        return self.data.strip() == DONE

    def json(self) -> Any:
        """The data parsed as JSON (raises ``ValueError`` if it is not JSON, a number that
        is not finite included)."""
        return wirejson.loads(self.data)


class SseDecoder:
    """Incremental decoder: :meth:`feed` chunks, then :meth:`close` at end of stream.

    Linear in the bytes fed, however they are chunked: each chunk is scanned once for line
    ends, and a line still open at a chunk's end is kept as parts, joined once when it ends
    (re-joining and re-scanning the whole pending buffer per chunk, or slicing the rest of
    a chunk per line, cost time quadratic in a long line or a chunk of many events)."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []  # the line still open, as it arrived
        self._skip_lf = False  # the last chunk ended in CR: an LF now completes a CRLF
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._last_id: str | None = None

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Consume one chunk; return the events it completed."""
        out: list[SseEvent] = []
        if not chunk:
            return out
        start = 1 if self._skip_lf and chunk[:1] == b"\n" else 0
        self._skip_lf = False
        for end in _LINE_END.finditer(chunk, start):
            piece = chunk[start : end.start()]
            line = b"".join((*self._parts, piece)) if self._parts else piece
            self._parts = []
            start = end.end()
            # a CR ends the line at once; an LF first thing in the next chunk is its CRLF's
            self._skip_lf = end.group() == b"\r" and start == len(chunk)
            event = self._line(line)
            if event is not None:
                out.append(event)
        if start < len(chunk):
            self._parts.append(chunk[start:])
        return out

    def close(self) -> list[SseEvent]:
        """End of stream: flush a last line without terminator and any pending event."""
        out: list[SseEvent] = []
        if self._parts:
            line, self._parts = b"".join(self._parts), []
            event = self._line(line)
            if event is not None:
                out.append(event)
        event = self._dispatch()
        if event is not None:
            out.append(event)
        return out

    def _line(self, raw: bytes) -> SseEvent | None:
        if not raw:
            return self._dispatch()
        line = raw.decode("utf-8", errors="replace")
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        # "retry" and unknown fields are ignored, as the spec says
        return None

    def _dispatch(self) -> SseEvent | None:
        if self._id is not None:
            self._last_id = self._id
            self._id = None
        if not self._data:
            self._event = ""
            return None
        event = SseEvent("\n".join(self._data), self._event or "message", self._last_id)
        self._data = []
        self._event = ""
        return event


def iter_sse_events(chunks: Iterable[bytes]) -> Iterator[SseEvent]:
    """Decode SSE events from byte chunks split anywhere."""
    decoder = SseDecoder()
    for chunk in chunks:
        yield from decoder.feed(chunk)
    yield from decoder.close()


@dataclass(frozen=True)
class StreamStats:
    """What an OpenAI-compatible stream reported about itself in its last chunks."""

    usage: dict[str, Any] | None
    timings: dict[str, Any] | None
    finish_reason: str | None


def stream_stats(events: Iterable[SseEvent]) -> StreamStats:
    """Pull ``usage``/``timings`` (llama-server puts them in the chunk before ``[DONE]``,
    given ``stream_options.include_usage``) and the last ``finish_reason`` from a stream."""
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    finish: str | None = None
    for obj in _json_chunks(events):
        if isinstance(obj.get("usage"), dict):
            usage = obj["usage"]
        if isinstance(obj.get("timings"), dict):
            timings = obj["timings"]
        for choice in obj.get("choices") or ():
            if isinstance(choice, dict) and choice.get("finish_reason"):
                finish = str(choice["finish_reason"])
    return StreamStats(usage, timings, finish)


def stream_text(events: Iterable[SseEvent]) -> str:
    """The concatenated ``delta.content`` of the first choice (``reasoning_content`` is
    not included)."""
    parts: list[str] = []
    for obj in _json_chunks(events):
        for choice in obj.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                parts.append(delta["content"])
    return "".join(parts)


def _json_chunks(events: Iterable[SseEvent]) -> Iterator[dict[str, Any]]:
    for event in events:
        if event.is_done:
            continue
        try:
            obj = event.json()
        except ValueError:
            continue  # keep-alives and foreign events are not ours to judge
        if isinstance(obj, dict):
            yield obj
