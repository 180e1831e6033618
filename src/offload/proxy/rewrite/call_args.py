"""Stubs for the arguments of an assistant's tool calls.

Coding agents put the payload in the call (a ``write_file`` carries the whole file, an
``edit`` the old and new text), so an assistant message can be bulky with almost no
``content``. A stubbed call keeps its ``id``, ``type`` and ``function.name``; its
``arguments`` stay a JSON object (templates and strict upstreams parse them), holding the
original's short top-level values as they were plus ``"offload_stub"``: a stub naming
``ctx:sha256:<hex>`` of the original arguments text, which the store holds byte for byte,
so the model can read it back and :func:`restore_calls` rebuilds the exact call.

Deterministic: the same arguments give the same stub bytes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from offload.core.hashing import short_ref, text_hash
from offload.core.lru import Lru
from offload.core.stubs import ARGS_KEY, STUB_MARKER, StubInfo, is_stub, render_stub
from offload.core.text.chunking import count_lines
from offload.core.text.gist import gist
from offload.core.tokens import Measured, TokenCounter
from offload.proxy.rewrite.messages import Message, rendered_calls


class StubMaker(Protocol):
    """What a call's stubs use of message_stubs.StubMaker (which imports this module)."""

    counter: TokenCounter

    def content_tokens(self, text: str) -> int:
        """Tokens of ``text``, cached per content."""
        ...

    def content_measure(self, text: str) -> Measured:
        """Tokens of ``text`` and whether they are a stand-in estimate, cached per content."""
        ...

    def ensure_stored(self, text: str, digest: str, *, source: str, topic: str = "") -> None:
        """Persist ``text`` unless it is known to be stored."""
        ...


#: Top-level string values up to this long stay beside the stub (a path, a flag, a name).
KEEP_CHARS = 120
GIST_CHARS = 120
_MARKER_IN_JSON = json.dumps({ARGS_KEY: STUB_MARKER})[1:-2]  # '"offload_stub": "[offload:'


@dataclass(frozen=True)
class CallsStub:
    """An assistant's ``tool_calls`` with their bulky arguments stubbed."""

    calls: tuple[dict[str, Any], ...]  # the wire's tool_calls
    originals: tuple[tuple[str, str, str], ...]  # (digest, arguments, tool name) to store
    tokens: int  # tokens of the wire's tool_calls (as message_tokens counts them)


def stub_text_of(arguments: str) -> str | None:
    """The stub inside stubbed ``arguments`` (None for any other arguments)."""
    if _MARKER_IN_JSON not in arguments:
        return None
    try:
        obj = json.loads(arguments)
    except (ValueError, RecursionError):
        return None
    value = obj.get(ARGS_KEY) if isinstance(obj, dict) else None
    return value if isinstance(value, str) and is_stub(value) else None


def stubbed_arguments(arguments: str, stub: str) -> str:
    """The wire's arguments: the original's short top-level values and the stub."""
    try:
        obj = json.loads(arguments)
    except (ValueError, RecursionError):
        obj = None
    kept: dict[str, Any] = {}
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == ARGS_KEY:
                continue
            if (
                isinstance(value, bool | int | float)
                or value is None
                or (isinstance(value, str) and len(value) <= KEEP_CHARS and "\n" not in value)
            ):
                kept[key] = value
    kept[ARGS_KEY] = stub
    return json.dumps(kept, ensure_ascii=False)


def _gist_source(arguments: str) -> str:
    """What the gist summarises: the long string values (the file, the query), else the
    arguments text itself."""
    try:
        obj = json.loads(arguments)
    except (ValueError, RecursionError):
        return arguments
    if not isinstance(obj, dict):
        return arguments
    long = [v for v in obj.values() if isinstance(v, str) and len(v) > KEEP_CHARS]
    return "\n".join(long) if long else arguments


def restore_calls(msg: Message, body_of: Callable[[str], str]) -> Message:
    """``msg`` with every stubbed call's arguments read back from the store (``body_of``
    maps a ref to the stored text); ``msg`` itself when none is stubbed."""
    calls = msg.get("tool_calls")
    if not calls or msg.get("role") != "assistant":
        return msg
    restored: list[Any] = []
    changed = False
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        args = fn.get("arguments") if isinstance(fn, dict) else None
        stub = stub_text_of(args) if isinstance(args, str) else None
        if stub is None or not isinstance(fn, dict):
            restored.append(call)
            continue
        restored.append({**call, "function": {**fn, "arguments": body_of(ref_of(stub))}})
        changed = True
    return {**msg, "tool_calls": restored} if changed else msg


def ref_of(stub: str) -> str:
    """The reference a stub's header names (``stored as ctx:sha256:…``)."""
    header = stub.split("\n", 1)[0]
    at = header.rfind("stored as ")
    return header[at + len("stored as ") :].rstrip("]").strip() if at >= 0 else header


class CallStubber:
    """Stubs the bulky arguments of tool calls, once per content (thread-safe)."""

    def __init__(
        self, maker: StubMaker, read_call: Callable[[str], str], cache_size: int = 4096
    ) -> None:
        self.maker = maker
        self.read_call = read_call
        self._cache: Lru[tuple[str, str], tuple[str, int]] = Lru(cache_size)
        self._lock = threading.Lock()

    def name_read_call(self, read_call: Callable[[str], str]) -> None:
        """The read call stubs made from now on name (the cached ones are dropped)."""
        with self._lock:
            self.read_call = read_call
            self._cache.clear()

    def _stub(self, name: str, arguments: str, digest: str) -> tuple[str, int]:
        """(the wire's arguments, their tokens) for one call's arguments."""
        key = (digest, name)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        tokens, estimated = self.maker.content_measure(arguments)
        info = StubInfo(
            ref=short_ref(digest),
            kind="tool-call arguments",
            source=name,
            tokens=tokens,
            lines=count_lines(arguments),
            nbytes=len(arguments.encode("utf-8", "surrogatepass")),
            gist=gist(_gist_source(arguments), GIST_CHARS),
            estimated=estimated,
        )
        wire = stubbed_arguments(arguments, render_stub(info, self.read_call(info.ref)))
        made = (wire, self.maker.content_tokens(wire))
        self._cache.put(key, made)
        return made

    def stub(self, msg: Message, threshold: int, *, gain: float = 2.0) -> CallsStub | None:
        """``msg``'s tool calls with every argument over ``threshold`` tokens stubbed, when
        its stub is at least ``gain`` times smaller; None when no call changes."""
        calls = msg.get("tool_calls")
        if not calls or msg.get("role") != "assistant":
            return None
        out: list[dict[str, Any]] = []
        originals: list[tuple[str, str, str]] = []
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            args = fn.get("arguments") if isinstance(fn, dict) else None
            if not isinstance(fn, dict) or not isinstance(args, str) or stub_text_of(args):
                out.append(call)
                continue
            tokens = self.maker.content_tokens(args)
            if tokens <= threshold:
                out.append(call)
                continue
            name = str(fn.get("name") or "tool")
            digest = text_hash(args)
            wire, wire_tokens = self._stub(name, args, digest)
            if wire_tokens * gain > tokens:
                out.append(call)
                continue
            out.append({**call, "function": {**fn, "arguments": wire}})
            originals.append((digest, args, name))
        if not originals:
            return None
        return CallsStub(
            tuple(out), tuple(originals), self.maker.counter.count(rendered_calls(out))
        )

    def apply(self, msg: Message, made: CallsStub) -> Message:
        """``msg`` with its calls stubbed, the original arguments stored first."""
        for digest, arguments, name in made.originals:
            self.maker.ensure_stored(
                arguments,
                digest,
                source="proxy",
                topic=f"tool-call arguments of {name}",
            )
        return {**msg, "tool_calls": list(made.calls)}
