"""The optional local model: lossy compression, distillation and summaries.

Configured by :class:`offload.config.LocalModelSettings` (any OpenAI-compatible endpoint).
The model is small and fallible, so every result passes an expansion guard: output that is
not shorter (in tokens) than its input is thrown away and the raw text kept
(``kept_raw=True``), except for ``distill(..., strict=True)`` whose caller wants an error.
Long inputs are map-reduced over line-aligned chunks with a bounded number of calls.
Transient failures (timeout, connection, HTTP 5xx) are retried ``settings.retries`` times.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

import anyio

from offload.config import LocalModelSettings
from offload.core.tokens import TokenCounter, default_counter
from offload.errors import (
    ModelNotConfigured,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from offload.llm.upstream import UpstreamClient, UpstreamHTTPError

T = TypeVar("T")

NOT_SHORTER = "model output was not shorter"
CUT_OFF = "model output stopped at its token cap"
ECHO = "model output was mostly a copy of its input"
ECHO_SHARE = 0.8  # of the output's characters, copied from the start of its input
MAX_CALLS = 12  # model calls per compress/distill/summary, map and reduce together
MAX_ROUNDS = 3  # reduce rounds after the first map
_RETRY_BACKOFF_S = 0.25

# Tags found one at a time (``_strip_think``): a lazy ``<think>.*?</think>`` rescans the rest
# of the text from every unclosed ``<think>``, quadratic on hostile model output.
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)

COMPRESS_PROMPT = (
    "You compress text for another AI model to read later. Rewrite the text given by the "
    "user as briefly as possible, in at most {target} tokens. Keep verbatim every "
    "identifier, file path, function name, number, version, error code and error message. "
    "Drop filler, repetition and formatting. Output only the compressed text, no preamble."
)
DISTILL_PROMPT = (
    "You distill text into its essential facts for another AI model. From the text given by "
    "the user, list the facts that matter{focus}, as short bullet points, in at most "
    "{target} tokens. Keep identifiers, paths, numbers and error codes verbatim. Output "
    "only the bullet points."
)
SUMMARY_PROMPT = (
    "You summarise a conversation between a user, an AI assistant and its tools, so the "
    "assistant can continue without the full transcript. In at most {target} tokens state: "
    "the goal, decisions made, facts learned (identifiers, paths, numbers, errors "
    "verbatim), and what remains to do. Output only the summary."
)


@dataclass(frozen=True)
class ModelResult:
    """What a local-model operation produced."""

    text: str
    kept_raw: bool  # True when the guard kept the raw input instead of the model's output
    reason: str  # why the raw text was kept, or "" when the model's output is used
    input_tokens: int
    output_tokens: int  # tokens of ``text``
    calls: int  # model calls made (a retried call counts once; see ``LocalModel.requests``)
    seconds: float
    cut_off: int = 0  # calls whose answer stopped at its token cap


class LocalModel:
    """Client of the configured local model; an async context manager."""

    def __init__(
        self,
        settings: LocalModelSettings,
        *,
        counter: TokenCounter | None = None,
        max_calls: int = MAX_CALLS,
    ) -> None:
        self.settings = settings
        self.counter = counter or default_counter()
        self.max_calls = max(1, max_calls)
        self._client: UpstreamClient | None = None
        # every request sent, retries included, and how many of them were retries
        self.requests = 0
        self.retried = 0
        if settings.base_url:
            self._client = UpstreamClient(
                settings.base_url, api_key=settings.api_key, timeout=settings.timeout
            )

    async def __aenter__(self) -> LocalModel:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        if self._client is not None:
            await self._client.aclose()

    @property
    def configured(self) -> bool:
        """True when a base URL is set."""
        return self._client is not None

    async def compress(self, text: str, *, guard: bool = True) -> ModelResult:
        """Lossy compression towards ``compress_target_tokens``.

        With ``guard=False`` the model's output is returned even when it is longer
        (benchmarks measure the model itself).
        """
        target = self.settings.compress_target_tokens
        prompt = COMPRESS_PROMPT.format(target=target)
        run = _Run(self, "compression", prompt, target, guard=guard)
        out = await run.reduce(text)
        return self._finish(run, text, out, guard=guard, strict=False)

    async def distill(
        self, text: str, focus: str | None = None, *, strict: bool = False
    ) -> ModelResult:
        """Essential facts (optionally about ``focus``) towards ``distill_target_tokens``.

        ``strict=True``: an output that is not shorter raises :class:`UpstreamError`
        instead of silently keeping the raw text.
        """
        target = self.settings.distill_target_tokens
        focus_part = f" for this purpose: {focus.strip()}" if focus and focus.strip() else ""
        prompt = DISTILL_PROMPT.format(focus=focus_part, target=target)
        run = _Run(self, "distillation", prompt, target)
        out = await run.reduce(text)
        return self._finish(run, text, out, guard=True, strict=strict)

    async def summarize_messages(self, messages: Sequence[Mapping[str, Any]]) -> ModelResult:
        """A summary of chat messages (OpenAI shape) towards ``compress_target_tokens``."""
        text = render_messages(messages)
        target = self.settings.compress_target_tokens
        run = _Run(self, "summary", SUMMARY_PROMPT.format(target=target), target)
        out = await run.reduce(text)
        return self._finish(run, text, out, guard=True, strict=False)

    def _finish(self, run: _Run, text: str, out: str, *, guard: bool, strict: bool) -> ModelResult:
        n_in = self.counter.count(text)
        n_out = self.counter.count(out)
        seconds = time.monotonic() - run.started
        failed = guard and (not out.strip() or n_out >= n_in or is_echo(out, text))
        if failed:
            reason = _failure(out, text, run.rejected)
            if strict:
                raise UpstreamError(
                    f"{run.feature} failed: {reason} ({n_out} vs {n_in} tokens in); read the "
                    "content whole instead, or configure a stronger local model"
                )
            return ModelResult(text, True, reason, n_in, n_in, run.calls, seconds, run.cut_off)
        return ModelResult(out, False, "", n_in, n_out, run.calls, seconds, run.cut_off)

    async def _call(self, system: str, user: str, max_tokens: int) -> tuple[str, bool]:
        """One chat call with retries on transient failures: the cleaned content, and
        whether the model stopped at ``max_tokens`` (a cut-off answer, not a finished one)."""
        if self._client is None:
            raise ModelNotConfigured("the local model")
        payload: dict[str, Any] = {
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "temperature": 0,
            "max_tokens": max(16, max_tokens),
            "chat_template_kwargs": {"enable_thinking": False},
        }
        if self.settings.model:
            payload["model"] = self.settings.model
        attempts = 1 + max(0, self.settings.retries)
        for attempt in range(attempts):
            self.requests += 1
            self.retried += 1 if attempt else 0
            try:
                # httpx timeouts are per operation; this bounds the whole call
                with anyio.fail_after(self.settings.timeout):
                    response = await self._client.chat(payload)
                return clean_output(_content(response)), _finish_reason(response) == "length"
            except TimeoutError as exc:
                error: UpstreamError = UpstreamTimeout(
                    f"local model gave no answer within {self.settings.timeout:g}s; "
                    "raise [local_model] timeout or use a faster model"
                )
                error.__cause__ = exc
            except (UpstreamTimeout, UpstreamUnavailable) as exc:
                error = exc
            except UpstreamHTTPError as exc:
                if exc.status < 500:
                    raise
                error = exc
            if attempt + 1 >= attempts:
                raise error
            await anyio.sleep(_RETRY_BACKOFF_S * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover


class _Run:
    """One operation's map-reduce state: prompt, target and the call budget."""

    def __init__(
        self, model: LocalModel, feature: str, system: str, target: int, *, guard: bool = True
    ) -> None:
        self.model = model
        self.guard = guard
        self.feature = feature
        self.system = system
        self.target = max(1, target)
        self.calls = 0
        self.rejected: list[str] = []  # why pieces were kept raw (cut off, an echo)
        self.cut_off = 0  # answers that stopped at their cap
        self.started = time.monotonic()

    async def reduce(self, text: str) -> str:
        """Compress ``text`` (chunked when long) until it fits the target or budget ends."""
        if not self.model.configured:
            raise ModelNotConfigured(self.feature)
        count = self.model.counter.count
        chunk_tokens = max(self.target * 2, self.model.settings.chunk_tokens)
        current = text
        n_current = count(current)
        for round_no in range(1 + MAX_ROUNDS):
            if self.calls >= self.model.max_calls:
                break
            if round_no > 0 and n_current <= self.target:
                break
            if n_current <= chunk_tokens:
                pieces = [current]
            else:
                budget = self.model.max_calls - self.calls
                size = max(chunk_tokens, math.ceil(n_current / budget))
                pieces = split_lines(current, size, count)
                while len(pieces) > budget:  # line alignment can add a piece or two
                    size = math.ceil(size * 1.25)
                    pieces = split_lines(current, size, count)
            outputs = [await self._one(piece) for piece in pieces]
            if outputs == pieces:
                break  # every piece was kept raw: another round would ask the same again
            joined = "\n".join(outputs)
            n_joined = count(joined)
            if round_no > 0 and n_joined >= n_current:
                break  # the model is no longer making progress
            current, n_current = joined, n_joined
        return current

    async def _one(self, piece: str) -> str:
        # The prompt asks for about the target; the cap leaves room past it (twice, at most
        # the piece's own size: anything longer is no compression), so a model that keeps
        # to the prompt finishes, and one that runs into the cap (an echo, a loop) is refused.
        # Unguarded (a benchmark of the model itself), the cap is twice the piece: the cap
        # must not bound the ratio it measures, so an expansion shows as one.
        count = self.model.counter.count
        n_piece = count(piece)
        cap = min(n_piece, 2 * self.target) if self.guard else 2 * n_piece
        max_tokens = max(16, cap)
        self.calls += 1
        out, cut = await self.model._call(self.system, piece, max_tokens)
        self.cut_off += 1 if cut else 0
        if not self.guard:
            return out
        # per-piece guard: a piece the model cut off, copied or grew stays raw (nothing lost)
        if cut:
            self.rejected.append(CUT_OFF)
            return piece
        if is_echo(out, piece):
            self.rejected.append(ECHO)
            return piece
        if not out.strip() or count(out) >= count(piece):
            return piece
        return out


def split_lines(text: str, max_tokens: int, count: Callable[[str], int]) -> list[str]:
    """Split ``text`` into pieces of about ``max_tokens`` each, at line boundaries where
    possible; a single overlong line is cut by characters."""
    pieces: list[str] = []
    buf: list[str] = []
    buf_tokens = 0
    for line in text.splitlines(keepends=True):
        n = count(line)
        if n > max_tokens:
            if buf:
                pieces.append("".join(buf))
                buf, buf_tokens = [], 0
            pieces.extend(_cut_line(line, max_tokens, n))
            continue
        if buf and buf_tokens + n > max_tokens:
            pieces.append("".join(buf))
            buf, buf_tokens = [], 0
        buf.append(line)
        buf_tokens += n
    if buf:
        pieces.append("".join(buf))
    return [p for p in pieces if p.strip()]


def _cut_line(line: str, max_tokens: int, n_tokens: int) -> list[str]:
    parts = math.ceil(n_tokens / max_tokens)
    step = math.ceil(len(line) / parts)
    return [line[i : i + step] for i in range(0, len(line), step)]


def _strip_think(text: str) -> str:
    """Drop every ``<think>…</think>`` block, then an unclosed ``<think>`` and all after it."""
    kept: list[str] = []
    pos = 0
    while (start := _THINK_OPEN.search(text, pos)) is not None:
        end = _THINK_CLOSE.search(text, start.end())
        if end is None:
            break
        kept.append(text[pos : start.start()])
        pos = end.end()
    kept.append(text[pos:])
    text = "".join(kept)
    unclosed = _THINK_OPEN.search(text)
    return text if unclosed is None else text[: unclosed.start()]


def clean_output(text: str) -> str:
    """Strip ``<think>…</think>`` blocks (and an unclosed trailing one), drop repeated lines
    and blank runs, and trim.

    Small models at temperature 0 often loop, repeating one line until ``max_tokens``; a
    repeated line carries nothing new, so only its first occurrence is kept.
    """
    text = _strip_think(text)
    seen: set[str] = set()
    kept: list[str] = []
    for line in text.splitlines():
        key = line.strip()
        if not key:
            if kept and kept[-1].strip():
                kept.append("")
            continue
        if key in seen:
            continue
        seen.add(key)
        kept.append(line.rstrip())
    return "\n".join(kept).strip()


def is_echo(out: str, source: str) -> bool:
    """True when most of ``out`` is ``source``'s own opening, copied (white space aside):
    a model that echoes its input and stops is not compressing it."""
    a, b = " ".join(out.split()), " ".join(source.split())
    if not a:
        return False
    same = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        same += 1
    return same >= ECHO_SHARE * len(a)


def _failure(out: str, text: str, rejected: Sequence[str]) -> str:
    if not out.strip():
        return "model output was empty"
    if out == text and rejected:
        return rejected[0]  # every piece fell back to its raw text: say why the first did
    return ECHO if is_echo(out, text) else NOT_SHORTER


def _finish_reason(response: Mapping[str, Any]) -> str:
    choices = response.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    reason = first.get("finish_reason") if isinstance(first, dict) else None
    return reason if isinstance(reason, str) else ""


def _content(response: Mapping[str, Any]) -> str:
    """``choices[0].message.content``; ``reasoning_content`` is deliberately ignored."""
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise UpstreamError("local model answered without choices")
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""


def render_messages(messages: Sequence[Mapping[str, Any]]) -> str:
    """Chat messages as plain ``role: text`` lines (text parts and tool calls included)."""
    lines: list[str] = []
    for msg in messages:
        role = str(msg.get("role", "unknown"))
        name = msg.get("name")
        label = f"{role} ({name})" if name else role
        text = _message_text(msg.get("content"))
        calls = msg.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict):
                    text += f"\n[calls {fn.get('name')}({fn.get('arguments', '')})]"
        lines.append(f"{label}: {text.strip()}")
    return "\n".join(lines)


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return ""


async def with_budget(
    work: Awaitable[T],
    seconds: float,
    fallback: Callable[[], T],
    *,
    on_error: bool = True,
) -> T:
    """Await ``work`` for at most ``seconds``; past that, cancel it and return ``fallback()``.

    With ``on_error`` (the default) an :class:`UpstreamError` (model down, not configured,
    rejected) also yields the fallback, so an optional model never fails a request. Typical
    use: ``await with_budget(model.compress(text), 2.0, lambda: extractive(text))`` where
    ``extractive`` wraps ``offload.core.text.gist.gist``.
    """
    try:
        with anyio.move_on_after(seconds):
            return await work
    except UpstreamError:
        if not on_error:
            raise
        return fallback()
    return fallback()
