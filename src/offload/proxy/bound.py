"""The best prefix stability any windowing policy could reach on a recorded session.

Pure. Under the proxy's rules every message reaches the wire verbatim when it arrives (it
is in the protected tail then) and, while the previous wire stays an exact prefix, every
message already on the wire stays byte-for-byte as it was. So between two prefix breaks
the wire only grows, by exactly the new messages; and right after a break it still holds
at least the pinned head and the verbatim tail. The fewest breaks that keep every turn
under the ceiling follow from that alone, whatever the policy: a dynamic programme over
the turns where a break could fall.

The bound is optimistic wherever the rules leave room, so that no policy can beat it:
the range stub costs nothing, and when the head and the tail alone would break the
ceiling (the only case where the tail may be stubbed) the tail and the turn's new
messages count as free, and so does the head when it alone breaks the ceiling. ``offload replay`` reports the bound next to what the pipeline
reached, so settings can be judged against what is possible at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from offload.proxy.messages import Message, head_end, protect_start


@dataclass(frozen=True)
class Bound:
    """Consecutive-turn pairs of one session, and the most of them any policy keeps."""

    pairs: int
    kept: int


def prefix_bound(
    messages: Sequence[Message],
    tokens: Sequence[int],
    points: Sequence[int],
    ceiling: int,
    tail: int,
) -> Bound:
    """The bound for one session.

    ``messages``: the whole conversation; ``tokens[i]``: wire tokens of message ``i`` sent
    verbatim; ``points``: the requests, each ``messages[:p]``; ``ceiling``: the emergency
    ceiling in tokens; ``tail``: the protected tail in messages.
    """
    if len(points) < 2:
        return Bound(pairs=0, kept=0)
    head = head_end(messages)
    pinned = sum(tokens[:head])
    before = [0]
    for t in tokens:
        before.append(before[-1] + t)

    base: list[int] = []  # the least wire right after a break at each request
    growth: list[int] = []  # what each request appends to the previous one, verbatim
    for k, p in enumerate(points):
        start = protect_start(messages[:p], head, tail)
        alone = pinned + before[p] - before[start]
        fits = alone <= ceiling
        base.append(alone if fits else (pinned if pinned <= ceiling else 0))
        appended = before[p] - before[points[k - 1]] if k else 0
        growth.append(appended if fits else 0)
    return Bound(
        pairs=len(points) - 1, kept=len(points) - 1 - _fewest_breaks(base, growth, ceiling)
    )


def _fewest_breaks(base: Sequence[int], growth: Sequence[int], ceiling: int) -> int:
    """Fewest breaks over requests ``1..n-1`` with every wire under ``ceiling``.

    ``fewest[b]``: the fewest breaks up to a break at request ``b`` (request 0 opens the
    session and is no break). From a break at ``b`` the wire runs ``base[b]`` plus the
    growth since; the next break may fall at any later request, and must fall at the first
    one the growth would push over the ceiling.
    """
    n = len(base)
    unreachable = n + 1
    fewest = [unreachable] * n
    fewest[0] = 0
    best = unreachable
    for b in range(n):
        if fewest[b] == unreachable:
            continue
        wire = base[b]
        t = b + 1
        while t < n:
            fewest[t] = min(fewest[t], fewest[b] + 1)
            wire += growth[t]
            if wire > ceiling:
                break
            t += 1
        if t == n:  # this run of kept turns reaches the end of the session
            best = min(best, fewest[b])
    return best
