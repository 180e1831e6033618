"""Budget windowing with two-water hysteresis: when the frontier moves, and where to.

Pure: works on token costs, knows nothing of the store. A conversation of ``n`` messages
is laid out on the wire as

    [0, head)          the pinned head, verbatim
    [head, paged)      paged out, replaced by one range stub
    [paged, stubbed)   the stubbed middle: bulky contents replaced by stubs
    [stubbed, n)       verbatim (this always includes the protected recent tail)

plus ``forced``: messages outside the stubbed middle that are stubbed because the head
and the tail alone would break the ceiling. ``paged`` and ``stubbed`` only move on a
trigger, so between triggers the wire only grows by appending and the upstream keeps
reusing its prefix (KV) cache.

Triggers: above the high-water ratio, once the wire has grown by at least one bite
(``high_water - target``) since the last compaction, so a compaction never triggers
another; above the emergency ratio, always. A compaction stubs every bulky message
up to the protected tail and, if that is not enough, pages whole groups out from the
oldest, down to the target ratio in one bite — or deeper when the conversation grows so
fast that the target would leave fewer than ``HEADROOM_TURNS`` turns before the next
trigger (every trigger costs the upstream its cached prefix past the head).

A collapsed band: when the pinned head and the verbatim tail alone fill most of the
room under the high water, a compaction cannot get far below it. Firing at the high water
then breaks the cache every two or three turns while freeing almost nothing: the
livelock this proxy exists to avoid. So when a compaction would leave room for fewer than
``MIN_BAND_TURNS`` turns of the observed growth below the high water (judged by the
larger of the last compaction's result and what the head, a range stub and the tail take
now), the high water is ignored and only the ceiling fires, which is as late as any
policy can compact: each message arrives verbatim and stays byte-stable until a
compaction, so the fewest compactions come from compacting only when the ceiling would
break, as deep as the layout allows (see :mod:`offload.proxy.rewrite.bound`).
Firing a turn earlier cannot keep more prefixes there: a compaction leaves the head, a
range stub and the tail, and the earlier one leaves a tail that still holds the group the
later one would have paged.

What then decides how often a small window breaks is how much room a compaction leaves,
and how much of it each turn takes: a large newest message (:func:`large`) arrives as its
first and last lines.
When the head and the tail alone break the ceiling (a whole file in a tool call, a long
tool output), the tail's older groups, which leave the tail with the next turn, are
stubbed down to the cut level, not just under the ceiling; its newest message, which the
model has not seen yet, goes last. In that state the pipeline also stubs a turn's new
messages, the newest excepted, as they arrive, when that spares a compaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from offload.config import ProxySettings

#: A compaction leaves room for about this many turns of growth below the high water.
HEADROOM_TURNS = 12

#: Below this many turns of room under the high water the band has collapsed: only the
#: ceiling fires (see the module docstring).
MIN_BAND_TURNS = 4

#: A message of more than this many stub thresholds (a quarter of the window at the
#: default ``stub_ratio`` of 0.02) is large: it arrives as its first and last lines beside
#: its stub and the exact call that reads the rest (see :func:`large`).
LARGE_THRESHOLDS = 12.5


def large(tokens: int, threshold: int) -> bool:
    """Whether a message of ``tokens`` is large under the stub ``threshold`` (the state's:
    it changes only at a compaction, so a message is large or not for as long as it stays
    on the wire).

    Shown whole, one output that takes a quarter of the window leaves the next turns so
    little room that each of them compacts (every compaction costs the upstream the whole
    wire past the head): at 8192 tokens a SWE-agent run of 2,000-token outputs compacted
    three turns in a row. So the newest message, when large, is shown as its first and last
    lines (two thresholds of tokens) and the exact read call, as it is when it cannot fit at
    all, and keeps that form while it stays on the wire; the model reads the lines between
    when it needs them.
    """
    return tokens > LARGE_THRESHOLDS * threshold


@dataclass(frozen=True)
class Layout:
    """Where the frontier is."""

    head: int
    paged: int
    stubbed: int
    forced: frozenset[int] = field(default_factory=frozenset)

    @classmethod
    def fresh(cls, head: int) -> Layout:
        """Nothing paged, nothing stubbed."""
        return cls(head, head, head, frozenset())


@dataclass(frozen=True)
class Budget:
    """The token figures of one context size."""

    n_ctx: int
    threshold: int  # a message's content above this is bulky
    high: int
    target: int
    ceiling: int
    bite: int

    @classmethod
    def of(cls, settings: ProxySettings, n_ctx: int, fixed: int = 0) -> Budget:
        """Ratios of ``settings`` applied to ``n_ctx``. ``fixed``: tokens the prompt holds
        beside its messages (the tool definitions a template renders into it): the band
        applies to the room they leave, and the ceiling bounds the whole prompt, so the
        messages get the ceiling less them."""
        fixed = max(0, fixed)
        room = max(1, n_ctx - fixed)
        ceiling = max(1, int(settings.emergency * n_ctx) - fixed)
        high = min(int(settings.high_water * room), ceiling)
        target = min(int(settings.target * room), high)
        return cls(
            n_ctx=n_ctx,
            threshold=max(1, int(settings.stub_ratio * room)),
            high=high,
            target=target,
            ceiling=ceiling,
            bite=max(0, high - target),
        )


def trigger(
    total: int, floor: int, budget: Budget, growth_per_turn: float = 0.0, least: int = 0
) -> tuple[bool, bool]:
    """(fire, emergency) for a wire of ``total`` tokens; ``floor`` is the wire right after
    the last compaction (0 before any). ``growth_per_turn`` (the tokens the conversation
    grows by per turn) and ``least`` (what the head, a range stub and the tail alone take
    now) tell whether the band has collapsed."""
    if total > budget.ceiling:
        return True, True
    if collapsed(max(floor, least), budget, growth_per_turn):
        return False, False
    if total > budget.high and total - floor >= budget.bite:
        return True, False
    return False, False


def needs_room(total: int, reserve: int, budget: Budget) -> bool:
    """Whether a wire of ``total`` tokens leaves fewer than ``reserve`` under the ceiling:
    a request that must append that much (a retrieval round's results) compacts first, so
    what it appends keeps its size; turns that append nothing keep the band."""
    return reserve > 0 and total + reserve > budget.ceiling


def collapsed(floor: int, budget: Budget, growth_per_turn: float) -> bool:
    """Whether a compaction that gets the wire down to ``floor`` leaves room for fewer
    than ``MIN_BAND_TURNS`` turns below the high water."""
    return budget.high - floor < MIN_BAND_TURNS * growth_per_turn


def cut_level(budget: Budget, growth_per_turn: float) -> int:
    """How far down a compaction cuts: the target, or lower so that about
    ``HEADROOM_TURNS`` turns of the observed growth fit below the high water — but never
    below half the target, so recent context beyond the tail survives a compaction."""
    deeper = int(budget.high - HEADROOM_TURNS * growth_per_turn)
    return max(budget.target // 2, min(budget.target, deeper))


@dataclass(frozen=True)
class Compaction:
    """What one compaction plans from: the current layout and each message's costs.

    ``group_starts[i]``: paging may end right before message ``i``;
    ``verbatim[i]``: wire tokens of message ``i`` as sent; ``as_stub(i)``: as stubbed
    (equal to verbatim when it is not bulky); ``forced_cost(i)``: stubbed regardless of
    size, None when a stub would not be smaller; ``range_tokens``: the cost of the range
    stub; ``cut``: the level to page down to (default the target).
    """

    layout: Layout
    n: int  # messages in the conversation
    protect: int  # where the protected tail starts
    group_starts: Sequence[bool]
    verbatim: Sequence[int]
    as_stub: Callable[[int], int]
    forced_cost: Callable[[int], int | None]
    range_tokens: int
    budget: Budget
    cut: int | None = None


def plan(c: Compaction) -> Layout:
    """The layout after one compaction (see :class:`Compaction`). The frontier never
    moves backwards and never enters the protected tail.

    The middle's costs are asked newest first and only as far as the plan needs them
    (:func:`_page`): a stub is rendered and counted to learn its cost, so the first
    request of a session of thousands of messages prices the few that stay on the wire,
    not every message it pages out.
    """
    layout, n, protect, budget = c.layout, c.n, c.protect, c.budget
    forced_cost, cut = c.forced_cost, c.cut
    level = budget.target if cut is None else cut
    head = layout.head
    stubbed = max(layout.stubbed, protect)
    # the tail's forced stubs are planned again (the tiers below stub what still does not
    # fit: the range stub this compaction renders may cost less than the one they were
    # forced beside); a large message keeps the form it arrived in
    forced = {
        i
        for i in layout.forced
        if i < head or layout.paged <= i < stubbed or large(c.verbatim[i], budget.threshold)
    }

    def cost(i: int) -> int:
        if i in forced:
            alt = forced_cost(i)
            if alt is not None:
                return alt
        return c.as_stub(i) if layout.paged <= i < stubbed else c.verbatim[i]

    fixed = sum(cost(i) for i in range(head)) + sum(cost(i) for i in range(stubbed, n))
    middle = _Middle(layout.paged, stubbed, cost)
    # the wire besides the middle with nothing paged (a range stub only if one was there)
    bare = fixed + (c.range_tokens if layout.paged > head else 0)
    paged, total = _page(c, middle, level, fixed + c.range_tokens, bare)
    if paged > layout.paged and not middle.exceeds(total - bare):
        # a range stub that costs more than it frees: page nothing
        paged, total = layout.paged, bare + middle.suffix(layout.paged)

    # The head and the tail alone still break the ceiling: stub their biggest messages,
    # never forwarding a message the window cannot hold. The tail's older groups go first
    # and down to the cut level: they leave the tail with the next turn, so their stubs
    # stay put, and the room they free is what spares the next turns a compaction each.
    # Then, only until the ceiling holds, the newest group (its newest message, which the
    # model has not seen yet, last) and the head.
    if total > budget.ceiling:
        newest = n - 1
        while newest > stubbed and not c.group_starts[newest]:
            newest -= 1
        tiers = (
            ([i for i in range(stubbed, newest)], min(level, budget.ceiling)),
            ([i for i in range(newest, n - 1)], budget.ceiling),
            ([n - 1] if n - 1 >= stubbed else [], budget.ceiling),
            ([i for i in range(head - 1, -1, -1)], budget.ceiling),
        )
        for candidates, limit in tiers:
            total = _force(candidates, limit, total, forced, c.verbatim, forced_cost)
    forced = {i for i in forced if i < head or i >= paged}
    return Layout(head, paged, stubbed, frozenset(forced))


class _Middle:
    """The costs of the middle ``[start, end)``, asked newest first and only as far as
    a plan needs them."""

    def __init__(self, start: int, end: int, cost: Callable[[int], int]) -> None:
        self.start = start
        self.end = end
        self._cost = cost
        self._sums = [0]  # [k]: the costs of the k newest messages of the middle

    def suffix(self, p: int) -> int:
        """The costs of ``[p, end)``."""
        k = self.end - p
        while len(self._sums) <= k:
            self._sums.append(self._sums[-1] + self._cost(self.end - len(self._sums)))
        return self._sums[k]

    def exceeds(self, limit: int) -> bool:
        """Whether the whole middle costs more than ``limit`` (costs are never negative,
        so this asks only until the sum passes it)."""
        while self._sums[-1] <= limit:
            if len(self._sums) > self.end - self.start:
                return False
            self.suffix(self.end - len(self._sums))
        return True


def _page(c: Compaction, middle: _Middle, level: int, paging: int, bare: int) -> tuple[int, int]:
    """(frontier, wire tokens) after paging whole groups out of ``middle`` from the oldest
    until the wire fits ``level``. The stops are the frontier, each group start after it
    and the middle's end; paging stops at the first that fits, or, when the tail starts
    mid-group, at the one before the end while the ceiling holds. ``paging``: the wire
    besides the middle once something is paged (the range stub with it); ``bare``: with
    nothing paged.

    Found from the end back: past the frontier the wire only shrinks as paging goes on,
    so the stops that fit are a run up to the end, and the walk ends at the first stop
    that does not fit (one group beyond what stays on the wire); then whether the
    frontier itself fits, asked only until the middle's sum passes the room."""
    first, end, starts = middle.start, middle.end, c.group_starts
    if first >= end:
        return first, bare
    mid_group = end < len(starts) and not starts[end]

    def fits_bare(limit: int) -> bool:
        return not middle.exceeds(limit - bare)

    paged, total, at = end, paging, end
    while True:
        stop = at - 1  # the stop before ``at``: a group start after the frontier
        while stop > first and not starts[stop]:
            stop -= 1
        if stop == first:
            break
        wire = paging + middle.suffix(stop)
        if wire > level:
            if at == end and mid_group and wire <= c.budget.ceiling:
                # short of a tail that starts mid-group (when nothing paged fits the level
                # instead, this frees less than it costs, and the plan pages nothing)
                return stop, wire
            break
        paged, total, at = stop, wire, stop
    single = stop == first and at == end  # one group only: the frontier, then the end
    if fits_bare(level) or (single and mid_group and fits_bare(c.budget.ceiling)):
        return first, bare + middle.suffix(first)
    return paged, total


def _force(
    candidates: Sequence[int],
    limit: int,
    total: int,
    forced: set[int],
    verbatim: Sequence[int],
    forced_cost: Callable[[int], int | None],
) -> int:
    """Stub ``candidates`` (added to ``forced``), the biggest saving first, until the wire
    of ``total`` tokens fits ``limit``; the wire's tokens after."""
    savings: list[tuple[int, int]] = []
    for i in candidates:
        if i in forced:
            continue
        alt = forced_cost(i)
        if alt is not None and alt < verbatim[i]:
            savings.append((alt - verbatim[i], i))
    for saving, i in sorted(savings):
        if total <= limit:
            break
        forced.add(i)
        total += saving
    return total
