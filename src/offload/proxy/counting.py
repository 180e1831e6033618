"""The proxy's token counter: exact counts from the upstream, the offline counter otherwise.

The rewrite pipeline is synchronous and runs in a worker thread, so this counter is too: it
asks the upstream's ``POST /tokenize`` with a plain (sync) httpx client and caches the answer
by content hash, so a text already seen (the long, stable prefix of a session) costs one
dictionary lookup. Upstreams without ``/tokenize`` (vLLM, Ollama, OpenAI) never fail a
request: a 404/405/501 switches the upstream path off for good, a timeout or connection
error switches it off for ``retry_after_s``, and in both cases the count comes from the
offline BPE counter scaled by a ratio learned from the ``usage.prompt_tokens`` the upstream
reports (:meth:`UpstreamCounter.calibrate`).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpx

from offload.core.tokens import CalibratedCounter, default_counter

_UNSUPPORTED = frozenset({404, 405, 501})
# Tokens a chat template adds around each message (ChatML: "<|im_start|>role\n…<|im_end|>\n").
TEMPLATE_TOKENS_PER_MESSAGE = 4


def message_texts(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """The texts of chat messages that a tokenizer sees: content strings, text parts, and
    tool-call names and arguments."""
    out: list[str] = []
    for msg in messages:
        content = msg.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    out.append(part["text"])
        for call in msg.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                for key in ("name", "arguments"):
                    if isinstance(fn.get(key), str):
                        out.append(fn[key])
    return out


class UpstreamCounter:
    """A sync :class:`~offload.core.tokens.TokenCounter` backed by the upstream's /tokenize.

    Thread-safe. ``root_url`` is the upstream's server root (where ``/tokenize`` lives).
    """

    def __init__(
        self,
        root_url: str,
        *,
        timeout_s: float = 2.0,
        retry_after_s: float = 30.0,
        cache_size: int = 65536,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        fallback: CalibratedCounter | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._url = root_url.rstrip("/") + "/tokenize"
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout_s), headers=dict(headers or {}), transport=transport
        )
        self._retry_after_s = retry_after_s
        self._cache_size = cache_size
        self._cache: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()
        self._clock = clock
        self._supported = True
        self._paused_until = 0.0
        if fallback is None:
            offline = default_counter()
            fallback = CalibratedCounter(offline.count)
        self._fallback = fallback
        self.exact_counts = 0  # answered by /tokenize (fresh or cached)
        self.fallback_counts = 0

    def __repr__(self) -> str:
        return f"UpstreamCounter({self._url!r})"

    def close(self) -> None:
        """Close the HTTP connections."""
        self._client.close()

    @property
    def exact(self) -> bool:
        """True while the upstream's /tokenize is believed usable."""
        return self._supported and self._clock() >= self._paused_until

    @property
    def ratio(self) -> float:
        """The calibration ratio applied to offline counts."""
        return self._fallback.ratio

    def count(self, text: str) -> int:
        """The number of tokens in ``text``: exact when the upstream can say, else estimated."""
        if not text:
            return 0
        key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.exact_counts += 1
                return hit
        n = self._tokenize(text) if self.exact else None
        if n is None:
            with self._lock:
                self.fallback_counts += 1
            return self._fallback.count(text)
        with self._lock:
            self.exact_counts += 1
            self._cache[key] = n
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return n

    def _tokenize(self, text: str) -> int | None:
        try:
            resp = self._client.post(self._url, json={"content": text})
        except httpx.HTTPError:
            # down or slow: estimate for a while rather than stall every request
            self._paused_until = self._clock() + self._retry_after_s
            return None
        if resp.status_code in _UNSUPPORTED:
            self._supported = False
            return None
        if resp.status_code != 200:
            self._paused_until = self._clock() + self._retry_after_s
            return None
        try:
            tokens = resp.json().get("tokens")
        except (ValueError, AttributeError):
            tokens = None
        if not isinstance(tokens, list):
            self._supported = False  # answers, but not like llama-server: never ask again
            return None
        return len(tokens)

    def calibrate(self, messages: Iterable[Mapping[str, Any]], prompt_tokens: int) -> None:
        """Learn from the prompt size the upstream reported for the messages we sent.

        Only the offline counter needs it; the per-message template overhead is taken off
        the reported figure first so the ratio describes text, not framing.
        """
        if prompt_tokens <= 0:
            return
        msgs = list(messages)
        raw = sum(self._fallback.raw(t) for t in message_texts(msgs))
        text_tokens = prompt_tokens - TEMPLATE_TOKENS_PER_MESSAGE * len(msgs)
        self._fallback.observe(raw, text_tokens)

    def cache_len(self) -> int:
        """How many exact counts are cached."""
        with self._lock:
            return len(self._cache)
