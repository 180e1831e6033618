"""The proxy's token counter: exact counts from the upstream, the offline counter otherwise.

The rewrite pipeline is synchronous and runs in a worker thread, so this counter is too: it
asks the upstream's ``POST /tokenize`` over a kept-alive ``http.client`` connection of its
thread (half the per-call cost of a sync httpx client, and a new message's count sits on
that turn's time to first byte) and caches the answer by content hash, so a text already seen (the long, stable prefix of a session) costs one
dictionary lookup. Upstreams without ``/tokenize`` (vLLM, Ollama, OpenAI) never fail a
request: a 404/405/501 switches the upstream path off for good, a timeout or connection
error, or an answer that is no count of the text (0 tokens for a non-empty one, more tokens
than it has bytes: :func:`~offload.core.tokens.plausible_count`), switches it off for
``retry_after_s``, and in both cases the count comes from the
offline BPE counter scaled by a ratio learned from the ``usage.prompt_tokens`` the upstream
reports (:meth:`UpstreamCounter.calibrate`).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import logging
import marshal
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

from offload.core.lru import Lru
from offload.core.tokens import (
    TEMPLATE_TOKENS_PER_MESSAGE,
    CalibratedCounter,
    Measured,
    TokenCounter,
    default_counter,
    plausible_count,
)

log = logging.getLogger("offload.proxy")

_UNSUPPORTED = frozenset({404, 405, 501})
# A request carrying this many texts not counted yet (a long session the process has not
# seen: its first request, or the first after a restart) has them counted WARM_WORKERS at a
# time before its rewrite, which then finds every count cached; fewer are counted one by one
# as the rewrite meets them
WARM_MIN = 16
WARM_WORKERS = 4


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


#: Tool catalogs whose counts are kept: each agent offers one, and a process serves a few.
DEFINITION_COUNTS = 32


class DefinitionCounts:
    """What a request's tool definitions (``tools``, legacy ``functions``) take in the
    prompt, as ``counter`` counts their JSON: a template renders them into it beside the
    messages, so the window must leave them room. Thread-safe.

    An agent sends the same catalog every turn. Rendering it as JSON costs ~4 ms a turn
    for a catalog of 117 tools (123 KB), where its ``marshal`` form costs 0.4 ms; that form
    of an equal catalog parsed from the same text is the same bytes, so its digest keys the
    count, and a form that differs only misses the cache.
    """

    def __init__(self, counter: TokenCounter, bound: int = DEFINITION_COUNTS) -> None:
        self._counter = counter
        self._counts: Lru[bytes, int] = Lru(bound)

    def tokens(self, payload: Mapping[str, Any]) -> int:
        """The tokens of the definitions ``payload`` carries; 0 without any."""
        lists = [
            payload[key] for key in ("tools", "functions") if isinstance(payload.get(key), list)
        ]
        if not any(lists):
            return 0
        try:
            key = hashlib.blake2b(marshal.dumps(lists), digest_size=16).digest()
        except ValueError:  # not plain JSON values: counted each time
            key = None
        hit = self._counts.get(key) if key is not None else None
        if hit is not None:
            return hit
        text = "\n".join(json.dumps(item, ensure_ascii=False) for items in lists for item in items)
        n = self._counter.count(text)
        if key is not None:
            self._counts.put(key, n)
        return n

    def shrink(self, keep: int) -> None:
        """Keep only the ``keep`` counts used last."""
        self._counts.shrink(keep)


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
        cache_size: int = 16384,
        headers: Mapping[str, str] | None = None,
        fallback: CalibratedCounter | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._url = root_url.rstrip("/") + "/tokenize"
        self._tokenize_client = _TokenizeClient(self._url, timeout_s, headers or {})
        self._retry_after_s = retry_after_s
        self._cache: Lru[bytes, int] = Lru(cache_size)
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
        self._warmers: ThreadPoolExecutor | None = None

    def __repr__(self) -> str:
        return f"UpstreamCounter({self._url!r})"

    def close(self) -> None:
        """Stop the counting threads and close the HTTP connections."""
        with self._lock:
            warmers, self._warmers = self._warmers, None
        if warmers is not None:
            warmers.shutdown(wait=True)
        self._tokenize_client.close()

    def release_ended(self) -> int:
        """Close the connections of worker threads that have ended (called now and then by
        a long-running proxy); how many were closed."""
        return self._tokenize_client.release_ended()

    @property
    def open_connections(self) -> int:
        """Connections to ``/tokenize`` open now (one per live thread that counted)."""
        return self._tokenize_client.open_count

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
        return self.measure(text).tokens

    def measure(self, text: str) -> Measured:
        """:meth:`count`, and whether it is an estimate standing in for an exact count (the
        upstream's /tokenize paused; an upstream without one never counts exactly, so its
        estimates stand in for nothing)."""
        if not text:
            return Measured(0, False)
        key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
        hit = self._cache.get(key)
        if hit is not None:
            with self._lock:
                self.exact_counts += 1
            return Measured(hit, False)
        n = self._tokenize(text) if self.exact else None
        if n is None:
            with self._lock:
                self.fallback_counts += 1
            return Measured(self._fallback.count(text), self._supported)
        with self._lock:
            self.exact_counts += 1
        self._cache.put(key, n)
        return Measured(n, False)

    def warm(self, texts: Iterable[str]) -> int:
        """Count the texts of ``texts`` not counted yet, :data:`WARM_WORKERS` requests at
        a time, when there are at least :data:`WARM_MIN` of them and the upstream counts
        exactly; how many were counted. One by one, the first request of a session of
        thousands of messages waited on as many round trips in a row."""
        if not self.exact:
            return 0
        fresh: dict[bytes, str] = {}
        for text in texts:
            if text:
                key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
                if key not in self._cache:
                    fresh[key] = text
        if len(fresh) < WARM_MIN:
            return 0
        with self._lock:
            if self._warmers is None:
                self._warmers = ThreadPoolExecutor(WARM_WORKERS, "offload-count")
            warmers = self._warmers
        for _ in warmers.map(self.count, fresh.values()):
            pass
        return len(fresh)

    def _tokenize(self, text: str) -> int | None:
        # ASCII JSON: any text, lone surrogates included, travels as valid escapes
        request = json.dumps({"content": text}).encode()
        try:
            status, body = self._tokenize_client.post(request, answer_bound(len(request)))
        except (OSError, http.client.HTTPException, Unusable) as exc:
            # down, slow or answering past its bound: estimate for a while rather than
            # stall every request
            if isinstance(exc, Unusable) and self._clock() >= self._paused_until:
                log.warning(
                    "upstream /tokenize: %s; counting offline for %g s", exc, self._retry_after_s
                )
            self._paused_until = self._clock() + self._retry_after_s
            return None
        if status in _UNSUPPORTED:
            self._supported = False
            return None
        if status != 200:
            self._paused_until = self._clock() + self._retry_after_s
            return None
        n = token_count(body)
        if n is None:
            self._supported = False  # answers, but not like llama-server: never ask again
        elif not plausible_count(text, n):
            # no tokenizer's count of it (0 tokens for a text, more than its bytes): a
            # /tokenize that answers nonsense is one that cannot count, for a while
            if self._clock() >= self._paused_until:
                log.warning(
                    "upstream /tokenize: %d tokens for a text of %d characters is not a "
                    "count of it; counting offline for %g s",
                    n,
                    len(text),
                    self._retry_after_s,
                )
            self._paused_until = self._clock() + self._retry_after_s
            return None
        return n

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

    @property
    def cache_size(self) -> int:
        """The most exact counts kept."""
        return self._cache.bound

    def cache_len(self) -> int:
        """How many exact counts are cached."""
        return len(self._cache)

    def shrink(self, keep: int) -> None:
        """Keep only the ``keep`` counts used last."""
        self._cache.shrink(keep)


_DIGIT = re.compile(rb"\d")


def token_count(body: bytes) -> int | None:
    """How many tokens a ``/tokenize`` answer (``{"tokens": [1, 2, ...]}``) lists, or None
    when it is not such an answer.

    Counted in the bytes: a long prompt's answer lists millions of ids, which as a Python
    list of ints would take ~36 bytes each (a 20 MB prompt: ~200 MB) just to take its
    length. Anything but a plain array of numbers is parsed as JSON.
    """
    key = body.find(b'"tokens"')
    start = body.find(b"[", key) if key >= 0 else -1
    end = body.find(b"]", start) if start >= 0 else -1
    plain = (
        end >= 0
        and not body[key + 8 : start].strip(b" \t\r\n:")
        and all(body.find(c, start + 1, end) < 0 for c in (b"{", b"[", b'"'))
        and body.rfind(b"[") == start
    )
    if plain:
        empty = _DIGIT.search(body, start, end) is None
        return 0 if empty else body.count(b",", start, end) + 1
    try:
        tokens = json.loads(body).get("tokens")
    except (ValueError, AttributeError, RecursionError):
        return None
    return len(tokens) if isinstance(tokens, list) else None


#: A /tokenize answer lists at most one id per byte of the text (a token covers at least
#: a byte), each id at most 14 digits and a separator: past this many bytes per byte of
#: the request (and a floor), the answer is not a count of it.
ANSWER_PER_BYTE = 16
ANSWER_FLOOR = 64 * 1024


def answer_bound(request_bytes: int) -> int:
    """The most bytes the /tokenize answer to a request of ``request_bytes`` may take."""
    return ANSWER_FLOOR + ANSWER_PER_BYTE * request_bytes


class Unusable(Exception):
    """A /tokenize answer past its bound in size, or not whole within the timeout."""


class _Deadlines:
    """Shuts down the socket of an exchange still running past its deadline.

    http.client's timeout bounds each read, not the exchange: an upstream sending its
    answer a byte a second held the count, and the client's request behind it, for as long
    as it liked. One thread watches every exchange of a client; it ends once none has been
    watched for a while."""

    IDLE_S = 10.0

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[http.client.HTTPConnection, float] = {}
        self._running = False

    def watch(self, conn: http.client.HTTPConnection, deadline: float) -> None:
        with self._cond:
            self._due[conn] = deadline
            if not self._running:
                self._running = True
                threading.Thread(
                    target=self._run, name="offload-count-deadlines", daemon=True
                ).start()
            elif len(self._due) == 1:
                # it was idle; otherwise it already wakes for an earlier deadline (every
                # exchange of a client has the same timeout)
                self._cond.notify()

    def done(self, conn: http.client.HTTPConnection) -> None:
        with self._cond:
            self._due.pop(conn, None)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for conn in [c for c, due in self._due.items() if due <= now]:
                    del self._due[conn]
                    sock = conn.sock
                    if sock is not None:
                        with contextlib.suppress(OSError):
                            sock.shutdown(socket.SHUT_RDWR)  # its reader wakes to an error
                if not self._due:
                    self._cond.wait(self.IDLE_S)
                    if not self._due:
                        self._running = False
                        return
                    continue
                self._cond.wait(min(self._due.values()) - now)


class _TokenizeClient:
    """``POST /tokenize`` over one kept-alive connection per thread."""

    def __init__(self, url: str, timeout_s: float, headers: Mapping[str, str]) -> None:
        parts = urlsplit(url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port
        self._path = parts.path or "/tokenize"
        self._timeout_s = timeout_s
        self._headers = {**headers, "content-type": "application/json"}
        self._local = threading.local()
        # every thread's, with its thread: for close(), and closed once the thread has ended
        # (a worker pool's threads come and go; their connections must not stay behind,
        # kept alive here and closed by the upstream: sockets left in CLOSE-WAIT)
        self._open: dict[http.client.HTTPConnection, threading.Thread] = {}
        self._lock = threading.Lock()
        self._deadlines = _Deadlines()

    def post(self, body: bytes, bound: int) -> tuple[int, bytes]:
        """(status, body) of one request, its answer at most ``bound`` bytes and whole
        within the timeout (else :class:`Unusable`); a kept-alive connection the upstream
        closed while idle is replaced once. Raises OSError or http.client.HTTPException."""
        deadline = time.monotonic() + self._timeout_s
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None:
            try:
                return self._exchange(conn, body, bound, deadline)
            except (OSError, http.client.HTTPException):
                self._drop(conn)  # most likely closed while idle: one more try, fresh
                if time.monotonic() >= deadline:
                    raise Unusable(f"no whole answer within {self._timeout_s:g} s") from None
        conn = self._connect()
        try:
            return self._exchange(conn, body, bound, deadline)
        except (OSError, http.client.HTTPException):
            self._drop(conn)
            if time.monotonic() >= deadline:
                raise Unusable(f"no whole answer within {self._timeout_s:g} s") from None
            raise

    def _exchange(
        self, conn: http.client.HTTPConnection, body: bytes, bound: int, deadline: float
    ) -> tuple[int, bytes]:
        self._deadlines.watch(conn, deadline)
        try:
            conn.request("POST", self._path, body, self._headers)
            resp = conn.getresponse()
            data = resp.read(bound + 1)
        finally:
            self._deadlines.done(conn)
        if time.monotonic() >= deadline:  # cut short by the deadline: a part, or nothing
            self._drop(conn)
            raise Unusable(f"no whole answer within {self._timeout_s:g} s")
        if len(data) > bound:
            self._drop(conn)  # the rest is never read: the connection cannot be reused
            raise Unusable(
                f"an answer of more than {bound} bytes to a request of {len(body)} "
                "(not a count of it)"
            )
        if resp.will_close:
            self._drop(conn)
        return resp.status, data

    def _connect(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=self._timeout_s)
        self._local.conn = conn
        self.release_ended()
        with self._lock:
            self._open[conn] = threading.current_thread()
        return conn

    @property
    def open_count(self) -> int:
        """Connections open now."""
        with self._lock:
            return len(self._open)

    def release_ended(self) -> int:
        """Close the connections of threads that have ended; how many were closed."""
        with self._lock:
            ended = [conn for conn, thread in self._open.items() if not thread.is_alive()]
            for conn in ended:
                del self._open[conn]
        for conn in ended:
            conn.close()
        return len(ended)

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._lock:
            self._open.pop(conn, None)

    def close(self) -> None:
        """Close every thread's connection."""
        with self._lock:
            conns, self._open = list(self._open), {}
        for conn in conns:
            conn.close()
