"""The best prefix stability any windowing policy could reach on a recorded session.

Pure. Under the proxy's rules every message reaches the wire verbatim when it arrives (it
is in the protected tail then) and, while the previous wire stays an exact prefix, every
message already on the wire stays byte-for-byte as it was. So between two prefix breaks
the wire only grows, by exactly the new messages; and right after a break it still holds
at least the pinned head and the verbatim tail. The fewest breaks that keep every turn
under the ceiling follow from that alone, whatever the policy: a dynamic programme over
the turns where a break could fall.

The bound is optimistic wherever the rules leave room, so that no policy can beat it.
What lies between the head and the tail after a break costs at least the cheaper of the
least a range stub can cost and, message by message, the lesser of its own size and the
least any stub can cost (both floors given by the caller: 0 is always safe). When the
head, that middle and the tail would break the ceiling (the only case where the tail may
be stubbed), the tail's and the turn's new messages count at that per-message least, and
so do the head's when even that does not fit. ``offload replay`` reports the bound next to what the pipeline
reached, so settings can be judged against what is possible at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from offload.proxy.rewrite.messages import Message, head_end, protect_start


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
    *,
    stub_floor: int = 0,
    range_floor: int = 0,
    newest_verbatim: bool = False,
) -> Bound:
    """The bound for one session.

    ``messages``: the whole conversation; ``tokens[i]``: wire tokens of message ``i`` sent
    verbatim; ``points``: the requests, each ``messages[:p]``; ``ceiling``: the emergency
    ceiling in tokens; ``tail``: the protected tail in messages; ``stub_floor`` and
    ``range_floor``: the least a message stub and a range stub can cost.
    ``newest_verbatim``: each request's newest message counts verbatim even where the tail
    may be stubbed (the model has not seen it yet; the pipeline stubs it last).
    """
    if len(points) < 2:
        return Bound(pairs=0, kept=0)
    head = head_end(messages)
    pinned = sum(tokens[:head])
    before = [0]
    least = [0]  # running sums of what each message costs at the least, stubbed or not
    for t in tokens:
        before.append(before[-1] + t)
        least.append(least[-1] + min(t, stub_floor))

    base: list[int] = []  # the least wire right after a break at each request
    growth: list[int] = []  # the least each request appends to the previous one
    for k, p in enumerate(points):
        start = protect_start(messages[:p], head, tail)
        middle = min(range_floor, least[start] - least[head]) if start > head else 0
        appended = points[k - 1] if k else p
        if pinned + middle + before[p] - before[start] <= ceiling:
            # the tail, and so every new message, goes verbatim
            base.append(pinned + middle + before[p] - before[start])
            growth.append(before[p] - before[appended])
            continue
        # the tail alone breaks the ceiling: its messages, then the head's, may be stubbed
        newest = 0  # what the newest message costs above its least, kept verbatim
        if newest_verbatim and start < p:
            newest = tokens[p - 1] - (least[p] - least[p - 1])
        tail_least = least[p] - least[start] + newest
        head_cost = pinned if pinned + middle + tail_least <= ceiling else least[head]
        base.append(head_cost + middle + tail_least)
        growth.append(least[p] - least[appended] + newest)
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
