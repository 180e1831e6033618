"""KV reuse as the upstream sees it: how much of a request its previous one already held.

An upstream with a prompt cache (llama.cpp's slots, a provider's prefix cache) reuses the
longest common token prefix of a request with the one before it and recomputes the rest.
:func:`shared_prefix` measures that prefix over two requests as they went on the wire, the
proxy's own additions (recall block, loop note) included: the messages they share whole,
then the common start of the first one that differs (its role and call id equal), counted
by the proxy's tokenizer. :func:`break_cause` names why the prefix broke.

A restart loses the previous request (kept in memory). So at a clean stop each session's
last request is kept in the store as a :class:`SentDigest` (a digest and the tokens of
each message, no text), and :func:`shared_after_restart` measures the first request after
the restart against it. Pure.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from offload.core.tokens import TokenCounter
from offload.proxy.rewrite.messages import Message, calls_text, content_text
from offload.proxy.rewrite.recall import is_recall_block
from offload.proxy.rewrite.session import SIDE, Live
from offload.proxy.rewrite.stubs.expand import is_proxy_note
from offload.store.store import Store

#: Break causes of the proxy's own additions (beside the pipeline's: windowing,
#: client_edit, new_session, restart, moved, stubs_restored).
RECALL = "recall"
LOOP_NOTE = "loop_note"


@dataclass(frozen=True)
class SharedPrefix:
    """What a request shares with the previous one of its session."""

    tokens: int  # the common token prefix
    first_diff: int  # the first message of the previous request that is not shared whole


def shared_prefix(
    counter: TokenCounter,
    old: Sequence[Message],
    old_tokens: Sequence[int],
    new: Sequence[Message],
) -> SharedPrefix:
    """The token prefix ``new`` shares with ``old`` (``old_tokens``: each old message's
    tokens as the pipeline counted them)."""
    n = min(len(old), len(new))
    i = 0
    total = 0
    while i < n and old[i] == new[i]:
        total += old_tokens[i]
        i += 1
    if i < n:
        total += _partial(counter, old[i], new[i])
    return SharedPrefix(total, i)


def _partial(counter: TokenCounter, a: Message, b: Message) -> int:
    """Tokens two differing messages share at their start (0 unless the same role and
    call id: the template's first tokens then already differ)."""
    if a.get("role") != b.get("role") or a.get("tool_call_id") != b.get("tool_call_id"):
        return 0
    ta, tb = content_text(a), content_text(b)
    if ta == tb:
        return counter.count(ta) + _common_tokens(counter, calls_text(a), calls_text(b))
    return _common_tokens(counter, ta, tb)


def _common_tokens(counter: TokenCounter, a: str, b: str) -> int:
    """Tokens of the common start of two different texts (its last token may merge with
    what follows it differently, so it is not counted)."""
    k = _common_chars(a, b)
    return max(0, counter.count(a[:k]) - 1) if k else 0


def _common_chars(a: str, b: str) -> int:
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi:  # binary search on slices compared in C
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def break_cause(old: Sequence[Message], first_diff: int, pipeline_cause: str | None) -> str | None:
    """Why a request did not keep its previous one as a whole prefix, or None when it did:
    the proxy's own addition the two first differ at (:data:`RECALL`, :data:`LOOP_NOTE`),
    else the pipeline's cause (windowing, the client's edit, a first turn, …)."""
    if first_diff >= len(old):
        return None
    msg = old[first_diff]
    if is_recall_block(msg):
        return RECALL
    if is_proxy_note(msg):
        return LOOP_NOTE
    return pipeline_cause or "client_edit"


#: The store state namespace of the requests sent last before a stop (:class:`SentDigest`).
SENT_NAMESPACE = "proxy.sent"


def message_digest(msg: Message) -> str:
    """A digest of one message as sent (its keys in order: equal messages, equal digests)."""
    text = json.dumps(msg, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True)
class SentDigest:
    """A session's last request as sent, without its text: each message's digest and
    tokens, and which ones are the proxy's own additions (their break cause, else "")."""

    version: int  # the store's version of the session state the request was built on
    digests: tuple[str, ...]
    tokens: tuple[int, ...]
    marks: tuple[str, ...]

    @classmethod
    def of(cls, version: int, sent: Sequence[Message], tokens: Sequence[int]) -> SentDigest:
        """The record of a request ``sent`` (``tokens``: each message's)."""
        marks = tuple(
            RECALL if is_recall_block(m) else LOOP_NOTE if is_proxy_note(m) else "" for m in sent
        )
        return cls(version, tuple(message_digest(m) for m in sent), tuple(tokens), marks)

    def to_json(self) -> dict[str, Any]:
        """What the store saves."""
        return {
            "version": self.version,
            "digests": list(self.digests),
            "tokens": list(self.tokens),
            "marks": list(self.marks),
        }

    @classmethod
    def from_json(cls, data: Any) -> SentDigest | None:
        """Inverse of :meth:`to_json`; None for anything unusable."""
        if not isinstance(data, dict):
            return None
        version, digests = data.get("version"), data.get("digests")
        tokens, marks = data.get("tokens"), data.get("marks")
        if not isinstance(version, int) or not isinstance(digests, list):
            return None
        if not isinstance(tokens, list) or not isinstance(marks, list):
            return None
        if not len(digests) == len(tokens) == len(marks):
            return None
        if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in tokens):
            return None
        return cls(
            version,
            tuple(str(d) for d in digests),
            tuple(tokens),
            tuple(m if m in (RECALL, LOOP_NOTE) else "" for m in marks),
        )


def shared_after_restart(
    record: SentDigest, new: Sequence[Message], new_tokens: Sequence[int], cause: str
) -> tuple[int, str | None]:
    """(the token prefix ``new`` shares with the request ``record`` keeps, the break
    cause or None when that whole request is its prefix). Only messages shared whole
    count (the record has no text to compare the first differing one's start), each by
    its tokens in ``new`` (``new_tokens``: the same message, counted now; the record's
    figures are only read from the store, so they bound nothing); a break is the proxy's
    own addition the two first differ at, else ``cause``."""
    n = min(len(record.digests), len(new), len(new_tokens))
    i = total = 0
    while i < n and record.digests[i] == message_digest(new[i]):
        total += new_tokens[i]
        i += 1
    if i >= len(record.digests):
        return total, None
    return total, record.marks[i] or cause


def keep_sent(store: Store, sessions: Iterable[tuple[str, Live]], kept_s: float) -> int:
    """Keep each session's last request as sent (its digests, :class:`SentDigest`) in
    ``store``, and drop the kept rows older than ``kept_s`` (sessions that never came
    back). How many were kept."""
    now = store.clock()
    kept = [
        (key, {**SentDigest.of(live.version, live.sent, live.sent_tokens).to_json(), "at": now})
        for key, live in sessions
        if live.sent and not key.endswith(SIDE)  # a side record is never resumed
    ]
    if kept:
        store.put_states(SENT_NAMESPACE, kept)
    for key, value in list(store.state_items(SENT_NAMESPACE)):
        at = value.get("at") if isinstance(value, dict) else None
        if not isinstance(at, (int, float)) or at < now - kept_s:
            store.delete_state(SENT_NAMESPACE, key)
    return len(kept)


def take_sent(store: Store, key: str, version: int) -> SentDigest | None:
    """The request kept at the last stop for session ``key``, if it was built on the state
    a request now resumes (``version``); read once (the row goes)."""
    value = store.get_state(SENT_NAMESPACE, key)
    if value is None:
        return None
    store.delete_state(SENT_NAMESPACE, key)
    record = SentDigest.from_json(value)
    return record if record is not None and record.version == version else None
