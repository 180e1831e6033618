"""KV reuse as the upstream sees it: how much of a request its previous one already held.

An upstream with a prompt cache (llama.cpp's slots, a provider's prefix cache) reuses the
longest common token prefix of a request with the one before it and recomputes the rest.
:func:`shared_prefix` measures that prefix over two requests as they went on the wire, the
proxy's own additions (recall block, loop note) included: the messages they share whole,
then the common start of the first one that differs (its role and call id equal), counted
by the proxy's tokenizer. :func:`break_cause` names why the prefix broke. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from offload.core.tokens import TokenCounter
from offload.proxy.rewrite.messages import Message, calls_text, content_text
from offload.proxy.rewrite.recall import is_recall_block
from offload.proxy.rewrite.stubs.expand import is_proxy_note

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
