"""Proxy counters: per session and in total, live (since start) and cumulative (across restarts).

Recording is an in-memory update under a lock (microseconds, on the request path).
Persistence is write-behind and additive: :meth:`Metrics.flush` adds what was counted since
the last flush to the store's tallies (namespace ``proxy.metrics``: key ``totals`` and one
``session:<id>`` per session; a session's title, last-seen time and turns are saved beside
them with ``put_state``) and takes back the sums, so several proxy processes on one store
(machines sharing a PostgreSQL store) add up instead of overwriting each other. The proxy
calls it every ``metrics_flush_s`` seconds when something changed, and once more on
shutdown. So a clean stop or restart loses nothing; a crash (SIGKILL, power loss) loses at
most the last ``metrics_flush_s`` seconds of counts. ``/api/stats`` reports
``persisted_at`` so a reader can tell what is already durable; its cumulative figures are
the store's sums as of this process's last flush plus what it counted since.

KV reuse is measured twice: ``reused_tokens`` is the token prefix each request shares with
its session's previous one as the proxy sent it (``kv_reuse_ratio``: its share of the wire
tokens; :mod:`offload.proxy.rewrite.reuse`), ``cached_tokens`` what the upstream reported reusing
(``cache_reuse_ratio``) when it reports it. Prefix breaks are classified by cause: the
pipeline names its own (windowing, the client's edits or compaction, the previous turn's
recall block or loop note); when our wire kept the prefix but the upstream reused far less of its
cache than the previous prompt held, the break is ``upstream_eviction``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from offload.proxy.figures import exposition, turns

NAMESPACE = "proxy.metrics"
COUNTERS = (
    "requests",
    "errors",
    "client_tokens",
    "wire_tokens",
    "tokens_saved",
    "stubs_made",
    "stubbed_messages",
    "windowed",
    "emergency",
    "prompt_tokens",
    "cached_tokens",
    "cache_reports",
    "prefix_breaks",
    "reused_tokens",
    "errored_wire_tokens",
    "recall_blocks",
    "recall_tokens",
    "recall_hits",
    "recall_read",
    "loop_breaks",
    "ceilings_learned",
    "retrieval_rounds",
    "retrieval_reads",
    "retrieval_searches",
    "retrieval_bad_calls",
    "retrieval_answers",
    "retrieval_exhausted",
    "retrieval_compactions",
)
HELP = {
    "requests": "chat requests handled",
    "errors": "requests answered with an error",
    "client_tokens": "prompt tokens the clients sent",
    "wire_tokens": "prompt tokens forwarded upstream after rewriting",
    "tokens_saved": "client tokens minus wire tokens",
    "stubs_made": "stubs created (messages moved into the store)",
    "stubbed_messages": "messages sent as stubs",
    "windowed": "requests where windowing triggered",
    "emergency": "requests that needed an emergency trim",
    "prompt_tokens": "prompt tokens the upstream reported",
    "cached_tokens": "prompt tokens the upstream reported as reused from its cache",
    "cache_reports": "responses that reported cache reuse",
    "prefix_breaks": "requests whose prompt prefix differed from the session's previous one",
    "reused_tokens": "wire tokens each answered request shared as a prefix with its session's"
    " previous one as sent (what an upstream's KV cache can reuse)",
    "errored_wire_tokens": "wire tokens of requests answered with an error (the upstream"
    " computed nothing of them: left out of the KV reuse ratio)",
    "recall_blocks": "recall blocks of paged-out memory put on the wire",
    "recall_tokens": "tokens of the recall blocks put on the wire",
    "recall_hits": "paged-out messages recalled onto the wire",
    "recall_read": "recalled references the model named in its next answer",
    "loop_breaks": "requests where the loop guard saw a repeating spiral and added a note",
    "ceilings_learned": "client compactions seen (their size is kept under from then on)",
    "retrieval_rounds": "rounds of the proxy's own memory tools answered for the model",
    "retrieval_reads": "calls of the proxy's memory read tool answered",
    "retrieval_searches": "calls of the proxy's memory search tool answered",
    "retrieval_bad_calls": "calls of the proxy's memory tools with unusable arguments",
    "retrieval_answers": "answers the model gave after at least one memory round",
    "retrieval_exhausted": "answers cut short because the model used up its memory rounds",
    "retrieval_compactions": "memory rounds that compacted the request to fit their results",
}
UPSTREAM_EVICTION = "upstream_eviction"
BREAK_PREFIX = "break:"  # a break cause's tally name (store/tallies.py reads old totals so)
# Reusing less than this share of the previous prompt, with our prefix intact, is an eviction.
EVICTION_REUSE = 0.5
# /api/stats carries the turns of this many of the most recent sessions (the dashboard's
# occupancy plots), and this many points of savings over time
TURN_SESSIONS = 6
SAVINGS_POINTS = 400


class StateStore(Protocol):
    """What metrics need from :class:`offload.store.store.Store`."""

    def put_state(self, namespace: str, key: str, value: Any) -> object: ...

    def add_tally(
        self, namespace: str, key: str, amounts: Mapping[str, int]
    ) -> Mapping[str, int]: ...

    def tallies(self, namespace: str) -> Mapping[str, Mapping[str, int]]: ...

    def delete_tallies(self, namespace: str, key: str) -> bool: ...

    def state_items(self, namespace: str) -> Any: ...

    def delete_state(self, namespace: str, key: str) -> bool: ...


@dataclass(frozen=True)
class RequestRecord:
    """What one proxied chat request contributes to the counters."""

    session_id: str
    client_tokens: int = 0
    wire_tokens: int = 0
    stubs_made: int = 0
    stubbed_messages: int = 0
    windowed: bool = False
    emergency: bool = False
    prefix_kept: bool = True
    break_cause: str | None = None
    prompt_tokens: int | None = None  # reported by the upstream
    cached_tokens: int | None = None  # reported by the upstream (cache_n / cached_tokens)
    error: bool = False
    n_ctx: int = 0  # the context size this request was budgeted against
    title: str = ""  # a readable name for the session (see turns.session_title)
    stubs: tuple[str, ...] = ()  # the header lines of the wire's stubs (turns.stub_lines)
    recall_tokens: int = 0
    recall_hits: int = 0
    recall_read: int = 0
    loop_broken: bool = False
    ceiling_learned: int = 0
    reused_tokens: int = 0  # shared as a prefix with the session's previous request


def cache_figures(obj: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """``(prompt_tokens, cached_tokens)`` from a response or its last stream chunk.

    llama-server's ``timings`` (``cache_n`` + ``prompt_n``) win; OpenAI's
    ``usage.prompt_tokens`` / ``usage.prompt_tokens_details.cached_tokens`` otherwise.
    """
    prompt: int | None = None
    cached: int | None = None
    usage = obj.get("usage")
    if isinstance(usage, dict):
        if _is_int(usage.get("prompt_tokens")):
            prompt = int(usage["prompt_tokens"])
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and _is_int(details.get("cached_tokens")):
            cached = int(details["cached_tokens"])
    timings = obj.get("timings")
    if isinstance(timings, dict):
        cache_n, prompt_n = timings.get("cache_n"), timings.get("prompt_n")
        if (
            isinstance(cache_n, int)
            and isinstance(prompt_n, int)
            and _is_int(cache_n)
            and _is_int(prompt_n)
        ):
            cached = cache_n
            prompt = cache_n + prompt_n
    return prompt, cached


#: The largest token figure an upstream's answer is believed to state: above it (or below
#: 0, or not an integer) the figure is not one. Bounds what the counters add, whose store
#: holds 64-bit sums: one answer claiming 10^30 tokens failed every later flush.
MAX_FIGURE = 10**12


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_FIGURE


def token_figure(value: Any) -> int | None:
    """A token count an upstream states, or None when ``value`` is not one (see
    :data:`MAX_FIGURE`)."""
    return value if _is_int(value) else None


def classify_break(rec: RequestRecord, previous_prompt: int | None) -> str | None:
    """The cause of this request's prefix break, or None when the prefix held and was reused."""
    if not rec.prefix_kept:
        return rec.break_cause or "unknown"
    if (
        previous_prompt
        and rec.cached_tokens is not None
        and rec.cached_tokens < EVICTION_REUSE * previous_prompt
    ):
        return UPSTREAM_EVICTION
    return None


class _Counts:
    """One set of counters plus breaks by cause."""

    __slots__ = ("breaks", "values")

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        data = data or {}
        raw = data.get("counters") or {}
        self.values: dict[str, int] = {k: int(raw.get(k, 0)) for k in COUNTERS}
        self.breaks: dict[str, int] = {
            str(k): int(v) for k, v in (data.get("breaks") or {}).items()
        }

    @classmethod
    def of_tally(cls, tally: Mapping[str, int] | None) -> _Counts:
        """Counts from the store's tallies (breaks as ``break:<cause>``)."""
        out = cls()
        for name, n in (tally or {}).items():
            if name in out.values:
                out.values[name] = int(n)
            elif name.startswith(BREAK_PREFIX):
                out.breaks[name.removeprefix(BREAK_PREFIX)] = int(n)
        return out

    def tally(self) -> dict[str, int]:
        """These counts as tally amounts (what :meth:`of_tally` reads)."""
        out = {k: n for k, n in self.values.items() if n}
        out.update({BREAK_PREFIX + k: n for k, n in self.breaks.items() if n})
        return out

    def add(self, rec: RequestRecord, cause: str | None) -> None:
        v = self.values
        v["requests"] += 1
        v["errors"] += int(rec.error)
        v["client_tokens"] += rec.client_tokens
        v["wire_tokens"] += rec.wire_tokens
        v["tokens_saved"] += max(0, rec.client_tokens - rec.wire_tokens)
        v["stubs_made"] += rec.stubs_made
        v["stubbed_messages"] += rec.stubbed_messages
        v["windowed"] += int(rec.windowed)
        v["emergency"] += int(rec.emergency)
        if rec.prompt_tokens is not None and rec.cached_tokens is not None:
            v["prompt_tokens"] += rec.prompt_tokens
            v["cached_tokens"] += rec.cached_tokens
            v["cache_reports"] += 1
        if rec.error:  # nothing reached a cache: neither side of the KV reuse ratio
            v["errored_wire_tokens"] += rec.wire_tokens
        else:
            v["reused_tokens"] += rec.reused_tokens
        v["recall_blocks"] += int(rec.recall_tokens > 0)
        v["recall_tokens"] += rec.recall_tokens
        v["recall_hits"] += rec.recall_hits
        v["recall_read"] += rec.recall_read
        v["loop_breaks"] += int(rec.loop_broken)
        v["ceilings_learned"] += int(rec.ceiling_learned > 0)
        if cause is not None:
            v["prefix_breaks"] += 1
            self.breaks[cause] = self.breaks.get(cause, 0) + 1

    def plus(self, other: _Counts) -> _Counts:
        out = _Counts()
        for k in COUNTERS:
            out.values[k] = self.values[k] + other.values[k]
        for k in set(self.breaks) | set(other.breaks):
            out.breaks[k] = self.breaks.get(k, 0) + other.breaks.get(k, 0)
        return out

    def as_dict(self) -> dict[str, Any]:
        v = self.values
        ratio = v["cached_tokens"] / v["prompt_tokens"] if v["prompt_tokens"] else None
        answered = v["wire_tokens"] - v["errored_wire_tokens"]
        kv = v["reused_tokens"] / answered if answered > 0 else None
        return {
            "counters": dict(v),
            "breaks": dict(sorted(self.breaks.items())),
            "cache_reuse_ratio": ratio,
            "kv_reuse_ratio": kv,
        }


class _Stored:
    """One set of counters as the store last summed it (``base``), being added to the
    store (``inflight``) and counted since (``pending``)."""

    __slots__ = ("base", "inflight", "pending")

    def __init__(self, base: _Counts | None = None) -> None:
        self.base = base or _Counts()
        self.inflight = _Counts()
        self.pending = _Counts()

    def total(self) -> _Counts:
        return self.base.plus(self.inflight).plus(self.pending)

    def take(self) -> dict[str, int]:
        """What to add to the store: everything pending, now in flight."""
        self.inflight, self.pending = self.pending, _Counts()
        return self.inflight.tally()

    def written(self, sums: Mapping[str, int]) -> None:
        self.base, self.inflight = _Counts.of_tally(sums), _Counts()

    def failed(self) -> None:
        self.pending, self.inflight = self.inflight.plus(self.pending), _Counts()


class _Session:
    __slots__ = ("last_prompt", "last_seen", "live", "stored", "title", "turns")

    def __init__(
        self, base: _Counts, last_seen: float, data: Mapping[str, Any] | None = None
    ) -> None:
        data = data or {}
        self.stored = _Stored(base)
        self.live = _Counts()
        self.last_seen = last_seen
        self.last_prompt: int | None = None
        title = data.get("title")
        self.title = title if isinstance(title, str) else ""
        self.turns: deque[dict[str, Any]] = deque(
            turns.valid_turns(data.get("turns")), maxlen=turns.TURNS_KEPT
        )


class Metrics:
    """Thread-safe counters with write-behind, additive persistence to the store."""

    def __init__(
        self,
        store: StateStore | None = None,
        *,
        max_sessions: int = 200,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._max_sessions = max(1, max_sessions)
        self._clock = clock
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._stored = _Stored()
        self._live = _Counts()
        self._sessions: dict[str, _Session] = {}
        self._dirty: set[str] = set()
        self._dropped: set[str] = set()
        self._recent: deque[dict[str, Any]] = deque(maxlen=turns.RECENT_KEPT)
        self.started_at = clock()
        self.persisted_at: float | None = None
        if store is not None:
            self._load(store)

    def _load(self, store: StateStore) -> None:
        rows = dict(store.state_items(NAMESPACE))
        sums = store.tallies(NAMESPACE)
        self._stored = _Stored(_Counts.of_tally(sums.get("totals")))
        sessions = [
            (k.removeprefix("session:"), v)
            for k, v in rows.items()
            if k.startswith("session:") and isinstance(v, dict)
        ]
        sessions.sort(key=lambda kv: float(kv[1].get("last_seen", 0.0)), reverse=True)
        for sid, data in sessions[: self._max_sessions]:
            base = _Counts.of_tally(sums.get(f"session:{sid}"))
            self._sessions[sid] = _Session(base, float(data.get("last_seen", 0.0)), data)
        self._dropped.update(sid for sid, _ in sessions[self._max_sessions :])

    def record(self, rec: RequestRecord) -> str | None:
        """Count one request; returns the prefix-break cause it was classified under."""
        with self._lock:
            sess = self._sessions.get(rec.session_id)
            if sess is None:
                sess = _Session(_Counts(), self._clock())
                self._sessions[rec.session_id] = sess
                self._dropped.discard(rec.session_id)
                self._evict()
            seen_before = sess.stored.total().values["requests"] > 0
            # a session's first request has no previous prefix to break
            cause = classify_break(rec, sess.last_prompt) if seen_before else None
            for counts in (sess.live, sess.stored.pending, self._live, self._stored.pending):
                counts.add(rec, cause)
            sess.last_seen = self._clock()
            if rec.prompt_tokens is not None:
                sess.last_prompt = rec.prompt_tokens
            self._add_turn(sess, rec, cause)
            self._dirty.add(rec.session_id)
            self._dirty.add("")
            return cause

    def count(self, session_id: str, figures: Mapping[str, int]) -> None:
        """Add ``figures`` (counter key -> amount) to the totals and to ``session_id``'s
        counters (a session not seen yet is not created for them)."""
        with self._lock:
            sess = self._sessions.get(session_id)
            sets = [self._live, self._stored.pending]
            if sess is not None:
                sets += [sess.live, sess.stored.pending]
            for counts in sets:
                for key, n in figures.items():
                    if key in counts.values:
                        counts.values[key] += n
            self._dirty.add("")
            if sess is not None:
                self._dirty.add(session_id)

    def _add_turn(self, sess: _Session, rec: RequestRecord, cause: str | None) -> None:
        if rec.title and not sess.title:
            sess.title = rec.title
        turn = {
            "at": sess.last_seen,
            "client_tokens": rec.client_tokens,
            "wire_tokens": rec.wire_tokens,
            "prompt_tokens": rec.prompt_tokens,
            "cached_tokens": rec.cached_tokens,
            "reused_tokens": rec.reused_tokens,
            "n_ctx": rec.n_ctx,
            "stubbed_messages": rec.stubbed_messages,
            "stubs_made": rec.stubs_made,
            "windowed": rec.windowed,
            "emergency": rec.emergency,
            "error": rec.error,
            "break": cause,
        }
        sess.turns.append(turn)
        self._recent.append(
            {**turn, "session": rec.session_id, "title": sess.title, "stubs": list(rec.stubs)}
        )

    def _evict(self) -> None:
        while len(self._sessions) > self._max_sessions:
            oldest = min(self._sessions, key=lambda s: self._sessions[s].last_seen)
            del self._sessions[oldest]
            self._dirty.discard(oldest)
            self._dropped.add(oldest)

    @property
    def dirty(self) -> bool:
        """True when something changed since the last flush."""
        with self._lock:
            return bool(self._dirty or self._dropped)

    def flush(self) -> int:
        """Add what was counted since the last flush to the store (one tally per changed
        counter set, a session's turns beside it); returns how many sets were written."""
        if self._store is None:
            return 0
        with self._flush_lock:
            with self._lock:
                dirty, self._dirty = self._dirty, set()
                dropped, self._dropped = self._dropped, set()
                writes = self._take(dirty)
            done = 0
            try:
                for key, stored, amounts, data in writes:
                    sums = self._store.add_tally(NAMESPACE, key, amounts)
                    with self._lock:
                        stored.written(sums)
                    done += 1
                    if data is not None:
                        self._store.put_state(NAMESPACE, key, data)
                for sid in dropped:
                    self._store.delete_state(NAMESPACE, f"session:{sid}")
                    self._store.delete_tallies(NAMESPACE, f"session:{sid}")
            except BaseException:
                with self._lock:  # not written: added next time (a set added is not again)
                    for _, stored, _, _ in writes[done:]:
                        stored.failed()
                    self._dirty |= dirty
                    self._dropped |= dropped
                raise
            self.persisted_at = self._clock()
            return len(writes) + len(dropped)

    def _take(self, dirty: set[str]) -> list[tuple[str, _Stored, dict[str, int], Any]]:
        """(key, its counters, the amounts to add, the state saved beside or None) of each
        changed set; called under the lock."""
        writes: list[tuple[str, _Stored, dict[str, int], Any]] = []
        for sid in sorted(dirty):
            if sid == "":
                writes.append(("totals", self._stored, self._stored.take(), None))
            elif sid in self._sessions:
                sess = self._sessions[sid]
                data = {"last_seen": sess.last_seen, "title": sess.title, "turns": list(sess.turns)}
                writes.append((f"session:{sid}", sess.stored, sess.stored.take(), data))
        return writes

    def snapshot(self) -> dict[str, Any]:
        """Everything ``/api/stats`` shows: totals and sessions, live and cumulative; the
        turns of the :data:`TURN_SESSIONS` most recent sessions, the recent requests (newest
        first) and ``savings``: ``[at, client_tokens, wire_tokens]`` per request, in time
        order (the last :data:`SAVINGS_POINTS` the sessions remember)."""
        with self._lock:
            ordered = sorted(self._sessions.items(), key=lambda kv: kv[1].last_seen, reverse=True)
            sessions = {
                sid: {
                    "title": s.title,
                    "live": s.live.as_dict(),
                    "cumulative": s.stored.total().as_dict(),
                    "last_seen": s.last_seen,
                    "turns": list(s.turns) if i < TURN_SESSIONS else [],
                }
                for i, (sid, s) in enumerate(ordered)
            }
            return {
                "started_at": self.started_at,
                "persisted_at": self.persisted_at,
                "live": self._live.as_dict(),
                "cumulative": self._stored.total().as_dict(),
                "sessions": sessions,
                "recent": [dict(r) for r in reversed(self._recent)],
                "savings": turns.savings({sid: s.turns for sid, s in ordered}, SAVINGS_POINTS),
            }

    def prometheus(self, extra_gauges: Mapping[str, tuple[str, float]] | None = None) -> str:
        """Prometheus text exposition of every counter (see :mod:`offload.proxy.figures.exposition`);
        ``extra_gauges``: name (after ``offload_proxy_``) -> (help, value)."""
        return exposition.render(self.snapshot(), HELP, extra_gauges)
