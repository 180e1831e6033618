"""Windowing: the trigger rule, the plan, and the invariants on random conversations."""

from __future__ import annotations

import copy
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st

from offload.config import ProxySettings
from offload.core.tokens import EstimateCounter
from offload.proxy.rewrite.messages import head_end, protect_start
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.stubs.expand import expand, is_proxy_note, is_range_stub
from offload.proxy.rewrite.window import (
    Budget,
    Compaction,
    Layout,
    collapsed,
    cut_level,
    needs_room,
    plan,
    trigger,
)
from offload.store.store import Store

Msgs = list[dict[str, Any]]
# a range stub: header, a 160-character gist (digits: ~1 token each), a contents line of at
# most 200 characters, the read and the search calls (a hypothesis example reached 264)
MAX_RANGE_TOKENS = 360
BUDGET = Budget.of(ProxySettings(high_water=0.5, target=0.35), 1000)  # threshold 20, high 500,
# target 350, ceiling 850: a band the collapse and cut tests below are laid out against


def test_the_high_water_fires_only_after_a_full_bite_of_growth() -> None:
    assert trigger(501, 0, BUDGET) == (True, False)
    assert trigger(500, 0, BUDGET) == (False, False)
    # just after a compaction that could only get down to 480: inside the band
    assert trigger(600, 480, BUDGET) == (False, False)
    assert trigger(630, 480, BUDGET) == (True, False)


def test_the_emergency_ratio_acts_even_inside_the_band() -> None:
    assert trigger(851, 840, BUDGET) == (True, True)


def test_a_request_that_must_append_fires_only_when_the_ceiling_leaves_too_little() -> None:
    assert needs_room(700, 151, BUDGET)  # 851 past the ceiling of 850
    assert not needs_room(700, 150, BUDGET)
    assert not needs_room(849, 0, BUDGET)  # an ordinary turn keeps the band


def test_a_reserve_compacts_a_wire_the_band_leaves_alone(tmp_path: Path) -> None:
    settings = ProxySettings(high_water=0.5, target=0.35)
    msgs: Msgs = [{"role": "system", "content": "sys"}]
    for i in range(30):
        role = "user" if i % 2 == 0 else "assistant"
        msgs.append({"role": role, "content": f"message {i} " + "word " * 20})
    msgs.append({"role": "user", "content": "the question"})
    with Store(tmp_path / "o.db", counter=EstimateCounter()) as store:
        pipe = Pipeline(store, settings, EstimateCounter())
        n_ctx = 2 * pipe.rewrite(msgs, 100_000).wire_tokens  # the wire at half: no trigger
        plain = pipe.rewrite(msgs, n_ctx)
        assert not plain.windowed
        room = int(0.85 * n_ctx) - plain.wire_tokens
        assert not pipe.rewrite(msgs, n_ctx, reserve=room).windowed
        roomier = pipe.rewrite(msgs, n_ctx, reserve=room + 200)
    assert roomier.windowed and roomier.break_cause == "windowing"
    assert roomier.wire_tokens + room + 200 <= int(0.85 * n_ctx)


def test_a_collapsed_band_leaves_only_the_ceiling_to_fire() -> None:
    # the last compaction got down to 480: 20 tokens under the high water, and turns
    # grow by 10, so a high-water compaction would buy two turns for a cache break
    assert collapsed(480, BUDGET, 10.0)
    assert trigger(630, 480, BUDGET, 10.0) == (False, False)
    assert trigger(849, 480, BUDGET, 10.0) == (False, False)
    assert trigger(851, 480, BUDGET, 10.0) == (True, True)
    # slow growth: the same floor leaves room for many turns, the band works
    assert not collapsed(480, BUDGET, 1.0)
    assert trigger(630, 480, BUDGET, 1.0) == (True, False)
    # before any compaction: judged by what the head and the tail alone take now
    assert trigger(501, 0, BUDGET, 10.0, least=300) == (True, False)
    assert trigger(501, 0, BUDGET, 10.0, least=480) == (False, False)


def test_a_fast_growing_conversation_is_cut_deeper_but_not_below_half_the_target() -> None:
    assert cut_level(BUDGET, 1.0) == BUDGET.target
    assert BUDGET.target // 2 <= cut_level(BUDGET, 20.0) < BUDGET.target
    assert cut_level(BUDGET, 1000.0) == BUDGET.target // 2


def test_plan_pages_whole_groups_from_the_oldest_down_to_the_target() -> None:
    # head: 2 messages of 50; then 8 groups of [assistant 10, tool 90]; tail = last group
    n = 2 + 16
    verbatim = [50, 50] + [10, 90] * 8
    starts = [True, True] + [True, False] * 8
    layout = plan(
        Compaction(
            Layout.fresh(2),
            n,
            protect=n - 2,
            group_starts=starts,
            verbatim=verbatim,
            as_stub=lambda i: verbatim[i],
            forced_cost=lambda i: None,
            range_tokens=30,
            budget=BUDGET,
        )
    )
    assert layout.stubbed == n - 2
    assert starts[layout.paged]  # never splits a call from its answers
    kept = sum(verbatim[layout.paged :]) + 100 + 30
    assert kept <= BUDGET.target
    assert kept + 100 > BUDGET.target  # one bite: no deeper than needed


def test_an_overflowing_tail_loses_its_older_group_and_keeps_its_newest_message_verbatim() -> None:
    # head 2 x 100; a tail of two groups [assistant 150, tool 200], [assistant 150, tool
    # 400] that alone breaks the ceiling (850); every message stubs to 40
    verbatim = [100, 100, 150, 200, 150, 400]
    layout = plan(
        Compaction(
            Layout.fresh(2),
            6,
            protect=2,
            group_starts=[True, True, True, False, True, False],
            verbatim=verbatim,
            as_stub=lambda i: verbatim[i],
            forced_cost=lambda i: 40,
            range_tokens=30,
            budget=BUDGET,
        )
    )
    # stubbing the newest message alone would save the most, but the model has not seen
    # it yet; the older group leaves the tail with the next turn, so its stubs stay put
    # and both go, leaving room for the turns to come
    assert layout.forced == frozenset({2, 3})
    assert sum(40 if i in layout.forced else t for i, t in enumerate(verbatim)) <= BUDGET.ceiling


def test_a_compaction_sends_a_tail_stub_forced_earlier_verbatim_once_it_fits() -> None:
    # head 2 x 100; a middle of two groups; a tail [assistant 150, tool 200] whose assistant
    # message an earlier turn stubbed in an emergency; paged out, the middle leaves room
    verbatim = [100, 100, 150, 200, 150, 200]
    forced = Layout(2, 2, 2, frozenset({4}))
    layout = plan(
        Compaction(
            forced,
            6,
            protect=4,
            group_starts=[True, True, True, False, True, False],
            verbatim=verbatim,
            as_stub=lambda i: verbatim[i],
            forced_cost=lambda i: 40,
            range_tokens=30,
            budget=BUDGET,
        )
    )
    assert layout.paged == 4
    assert layout.forced == frozenset()  # 100 + 100 + 30 + 150 + 200 fits: all verbatim


def test_a_large_message_keeps_the_stub_it_arrived_as_through_a_compaction() -> None:
    verbatim = [100, 100, 150, 200, 150, 260]  # 260 > 12.5 x the threshold of 20: large
    layout = plan(
        Compaction(
            Layout(2, 2, 2, frozenset({5})),
            6,
            protect=4,
            group_starts=[True, True, True, False, True, False],
            verbatim=verbatim,
            as_stub=lambda i: verbatim[i],
            forced_cost=lambda i: 40,
            range_tokens=30,
            budget=BUDGET,
        )
    )
    assert layout.forced == frozenset({5})


def test_plan_never_moves_the_frontier_backwards() -> None:
    verbatim = [10] * 20
    before = Layout(2, 6, 10, frozenset())
    after = plan(
        Compaction(before, 20, 16, [True] * 20, verbatim, lambda i: 10, lambda i: None, 30, BUDGET)
    )
    assert after.paged >= before.paged
    assert after.stubbed >= before.stubbed


# -- invariants on random conversations ------------------------------------------------------

_WORDS = st.sampled_from(["alpha", "beta", "gamma", "delta", "error:", "path/to/file.py", "42"])


@st.composite
def texts(draw: st.DrawFn) -> str:
    words = draw(st.lists(_WORDS, min_size=1, max_size=12))
    repeat = draw(st.sampled_from([1, 1, 1, 5, 30, 80]))  # some bulky, most small
    return " ".join(words) * repeat


@st.composite
def conversations(draw: st.DrawFn) -> Msgs:
    msgs: Msgs = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": draw(texts())})
    msgs.append({"role": "user", "content": draw(texts())})
    for t in range(draw(st.integers(min_value=1, max_value=15))):
        kind = draw(st.sampled_from(["chat", "tools", "tools", "parts"]))
        if kind == "tools":
            ids = [f"c{t}_{k}" for k in range(draw(st.integers(min_value=1, max_value=3)))]
            msgs.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                        for i in ids
                    ],
                }
            )
            for i in ids:
                msgs.append({"role": "tool", "tool_call_id": i, "content": draw(texts())})
        else:
            msgs.append({"role": "assistant", "content": draw(texts())})
        if kind == "parts":
            msgs.append({"role": "user", "content": [{"type": "text", "text": draw(texts())}]})
        else:
            msgs.append({"role": "user", "content": draw(texts())})
    return msgs


def _requests(msgs: Msgs) -> list[Msgs]:
    return [msgs[:k] for k, m in enumerate(msgs) if m["role"] == "assistant"] + [msgs]


def _valid_tool_structure(wire: Msgs) -> bool:
    open_calls: set[str] = set()
    for m in wire:
        if m["role"] == "assistant":
            open_calls = {c["id"] for c in m.get("tool_calls") or []}
        elif m["role"] == "tool":
            if m["tool_call_id"] not in open_calls:
                return False
        else:
            open_calls = set()
    return True


@pytest.mark.slow
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(msgs=conversations(), n_ctx=st.sampled_from([1500, 3000, 6000]), alternate=st.booleans())
def test_windowing_invariants_hold_on_random_conversations(
    msgs: Msgs, n_ctx: int, alternate: bool
) -> None:
    counter = EstimateCounter()
    proxy = ProxySettings()
    budget = Budget.of(proxy, n_ctx)
    with (
        tempfile.TemporaryDirectory() as tmp,
        Store(Path(tmp) / "a.db", counter=counter) as store,
        Store(Path(tmp) / "b.db", counter=counter) as twin_store,
    ):
        pipe = Pipeline(store, proxy, counter)
        twin = Pipeline(twin_store, proxy, counter)
        for request in _requests(msgs):
            result = pipe.rewrite(request, n_ctx, alternate=alternate)
            sent = result.messages
            # the recall block is the proxy's own, before the last group: judge the rest
            wire = [m for m in sent if not is_proxy_note(m)]
            # deterministic bytes: an independent pipeline and store agree exactly
            assert twin.rewrite(copy.deepcopy(request), n_ctx, alternate=alternate).messages == sent
            # every removed byte is retrievable, byte for byte
            assert expand(store, wire) == request
            assert _valid_tool_structure(sent)
            head = head_end(request)
            start = protect_start(request, head, proxy.tail_messages)
            head_tokens = sum(pipe.stubs.tokens(m) for m in request[:head])
            tail_tokens = sum(pipe.stubs.tokens(m) for m in request[start:])
            tail_len = len(request) - start
            between = wire[head : len(wire) - tail_len]
            ranges = [pipe.stubs.tokens(m) for m in between if is_range_stub(m)]
            assert all(r <= MAX_RANGE_TOKENS for r in ranges)
            # What must sit between head and tail: the middle as laid out, or at best one
            # range stub standing in for it (as rendered, when there is none yet).
            if not ranges and start > head:
                paged = sum(pipe.stubs.tokens(m) for m in request[head:start])
                stub, _ = pipe.stubs.render_range(
                    result.session_id, request, head, head, start, None, paged
                )
                ranges = [stub.tokens]
            least = min(sum(pipe.stubs.tokens(m) for m in between), max(ranges or [0]))
            note(f"{len(request)} msgs: head+least+tail {head_tokens + least + tail_tokens}")
            if head_tokens + least + tail_tokens <= budget.ceiling:
                # the head is pinned and the tail arrives verbatim
                assert wire[:head] == request[:head]
                assert wire[len(wire) - tail_len :] == request[start:]
                assert result.wire_tokens <= budget.ceiling
            assert result.wire_tokens == sum(pipe.stubs.tokens(m) for m in sent)


# -- the middle priced lazily: the same plan as pricing every message ------------------------


def _eager_plan(c: Compaction) -> tuple[int, int]:
    """(frontier, wire tokens) of the paging step as a plan that prices every message of
    the middle first finds them: the specification :func:`plan` keeps."""
    layout, budget = c.layout, c.budget
    level = budget.target if c.cut is None else c.cut
    head, stubbed = layout.head, max(layout.stubbed, c.protect)
    head_cost = sum(c.verbatim[i] for i in range(head))
    middle = [c.as_stub(i) for i in range(layout.paged, stubbed)]
    rest = sum(c.verbatim[i] for i in range(stubbed, c.n))
    remaining, paged, had_range = sum(middle), layout.paged, layout.paged > head
    unpaged = head_cost + (c.range_tokens if had_range else 0) + remaining + rest
    while True:
        ranged = c.range_tokens if (paged > head or had_range) else 0
        total = head_cost + ranged + remaining + rest
        if total <= level or paged >= stubbed:
            break
        step = paged + 1
        while step < stubbed and not c.group_starts[step]:
            step += 1
        tail_mid_group = step < len(c.group_starts) and not c.group_starts[step]
        if step == stubbed and tail_mid_group and total <= budget.ceiling:
            break
        remaining -= sum(middle[paged - layout.paged : step - layout.paged])
        paged = step
    if total >= unpaged:
        paged, total = layout.paged, unpaged
    return paged, total


@st.composite
def compactions(draw: st.DrawFn) -> Compaction:
    n = draw(st.integers(min_value=2, max_value=16))
    head = draw(st.integers(min_value=1, max_value=min(3, n - 1)))
    paged = draw(st.integers(min_value=head, max_value=n))
    stubbed = draw(st.integers(min_value=paged, max_value=n))
    protect = draw(st.integers(min_value=stubbed, max_value=n))
    verbatim = draw(st.lists(st.integers(0, 250), min_size=n, max_size=n))
    stubs = [min(v, draw(st.integers(0, 120))) for v in verbatim]
    starts = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return Compaction(
        Layout(head, paged, stubbed),
        n,
        protect,
        starts,
        verbatim,
        lambda i: stubs[i],
        lambda i: None,
        draw(st.integers(0, 400)),
        BUDGET,
        draw(st.none() | st.integers(0, 600)),
    )


def _compaction(layout: Layout, verbatim: list[int], starts: list[bool], rng: int) -> Compaction:
    n = len(verbatim)
    stub = lambda i: 40  # noqa: E731
    return Compaction(
        layout, n, layout.stubbed, starts, verbatim, stub, lambda i: None, rng, BUDGET
    )


@settings(max_examples=250, deadline=None)
@given(c=compactions())
# a range stub dearer than all it would free: nothing paged
@example(c=_compaction(Layout(1, 1, 3), [10, 50, 50, 400, 10], [True] * 5, 300))
# the whole middle fits without a range stub; with one, paging up to a tail that starts
# mid-group would fit only under the ceiling
@example(
    c=_compaction(Layout(1, 1, 3), [10, 50, 50, 100, 10], [True, True, True, False, True], 300)
)
# a tail that starts mid-group: paging stops short of it while the ceiling holds
@example(
    c=_compaction(
        Layout(1, 1, 4), [10, 90, 90, 90, 400, 10], [True, True, True, True, False, True], 10
    )
)
def test_a_plan_pricing_the_middle_newest_first_pages_as_one_pricing_every_message(
    c: Compaction,
) -> None:
    asked: list[int] = []

    def as_stub(i: int) -> int:
        asked.append(i)
        return c.as_stub(i)

    laid = plan(replace(c, as_stub=as_stub))
    paged, _ = _eager_plan(c)
    assert laid.paged == paged
    assert len(asked) == len(set(asked))  # each message priced once at most


def test_a_plan_of_a_long_middle_prices_only_the_messages_near_what_stays() -> None:
    # 5,000 messages of 100 tokens that stub to 60, one group each, and a tail of 2: the
    # target (350) keeps a few of them; the others are paged out without being priced
    n = 5000
    asked: list[int] = []

    def as_stub(i: int) -> int:
        asked.append(i)
        return 60

    layout = plan(
        Compaction(
            Layout.fresh(1),
            n,
            n - 2,
            [True] * n,
            [100] * n,
            as_stub,
            lambda i: None,
            140,
            BUDGET,
        )
    )
    assert layout.paged > n - 10
    assert len(asked) <= 10
    assert min(asked) >= layout.paged - 3


@given(n_ctx=st.integers(1, 200_000), fixed=st.integers(0, 300_000))
def test_a_budgets_fixed_tokens_come_off_its_ceiling_and_keep_its_levels_in_order(
    n_ctx: int, fixed: int
) -> None:
    settings = ProxySettings()
    budget = Budget.of(settings, n_ctx, fixed)
    alone = Budget.of(settings, n_ctx)
    assert budget.ceiling == max(1, alone.ceiling - fixed)
    assert 0 <= budget.target <= budget.high <= budget.ceiling
    assert budget.bite == budget.high - budget.target
    assert Budget.of(settings, n_ctx, 0) == alone
