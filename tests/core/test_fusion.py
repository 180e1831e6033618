"""core.fusion: the convex, lexical-dominant fusion of BM25 and semantic similarity."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offload.core.fusion import MAX_WEIGHT, calibrated_weight, fuse, peakedness


def test_with_no_semantic_side_the_lexical_order_is_kept() -> None:
    lexical = [("a", 9.0), ("b", 5.0), ("c", 5.0), ("d", 0.5)]
    assert [k for k, _ in fuse(lexical, {}, weight=0.3, floor=0.0)] == ["a", "b", "c", "d"]


def test_with_no_lexical_side_the_semantic_order_is_used() -> None:
    semantic = {"x": 0.2, "y": 0.9, "z": 0.5}
    assert [k for k, _ in fuse([], semantic, weight=0.3, floor=0.1)] == ["y", "z", "x"]


def test_both_sides_empty_give_nothing() -> None:
    assert fuse([], {}, weight=0.3, floor=0.0) == []


def test_semantic_similarity_breaks_a_lexical_tie() -> None:
    lexical = [("a", 4.0), ("b", 4.0)]
    fused = fuse(lexical, {"a": 0.3, "b": 0.8}, weight=0.3, floor=0.2)
    assert [k for k, _ in fused] == ["b", "a"]


def test_a_strong_lexical_lead_survives_a_semantic_preference() -> None:
    lexical = [("exact", 10.0), ("vague", 2.0)]
    fused = fuse(lexical, {"exact": 0.4, "vague": 0.9}, weight=0.3, floor=0.3)
    assert fused[0][0] == "exact"


def test_a_semantic_only_match_enters_the_ranking_below_strong_lexical_hits() -> None:
    lexical = [("a", 10.0), ("b", 1.0)]
    fused = dict(fuse(lexical, {"a": 0.5, "b": 0.3, "s": 0.9}, weight=0.3, floor=0.3))
    assert fused["a"] > fused["s"] > fused["b"]


def test_similarity_at_or_below_the_floor_adds_nothing() -> None:
    fused = dict(fuse([("a", 1.0)], {"a": 0.1, "b": 0.05, "c": 0.6}, weight=0.5, floor=0.2))
    assert fused["a"] == pytest.approx(0.5)
    assert fused["b"] == 0.0


def test_ties_keep_the_lexical_order_then_the_semantic_order() -> None:
    fused = fuse([("b", 1.0), ("a", 1.0)], {"d": 0.5, "c": 0.5}, weight=0.0, floor=0.0)
    assert [k for k, _ in fused] == ["b", "a", "c", "d"]


def test_a_weight_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="weight"):
        fuse([("a", 1.0)], {}, weight=1.5, floor=0.0)


keys = st.integers(min_value=0, max_value=30)
lexical_lists = st.lists(st.tuples(keys, st.floats(0, 50)), max_size=20)
semantic_maps = st.dictionaries(keys, st.floats(-1, 1), max_size=20)


@given(lexical_lists, semantic_maps, st.floats(0, 1), st.floats(-1, 1))
def test_fusion_is_deterministic_and_ranks_every_key_once(
    lexical: list[tuple[int, float]], semantic: dict[int, float], weight: float, floor: float
) -> None:
    first = fuse(lexical, semantic, weight=weight, floor=floor)
    again = fuse(list(lexical), dict(reversed(semantic.items())), weight=weight, floor=floor)
    assert first == again
    ranked = [k for k, _ in first]
    assert sorted(ranked) == sorted({k for k, _ in lexical} | set(semantic))
    scores = [s for _, s in first]
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 <= s <= 1.0 for s in scores)


def test_peakedness_is_one_for_a_lone_best_and_zero_for_a_flat_side() -> None:
    assert peakedness([3.0]) == 1.0
    assert peakedness([2.0, 2.0, 2.0]) == 0.0
    assert peakedness([]) == 0.0
    assert peakedness([0.3, 0.1], floor=0.3) == 0.0  # the best is no closer than typical
    # the next scores' mean on the floor-to-best scale: (0.5 + 0) / 2
    assert peakedness([1.0, 0.5, 0.0]) == pytest.approx(0.75)
    assert peakedness([0.9, 0.5, 0.1], floor=0.1) == pytest.approx(0.75)


def test_peakedness_looks_at_a_page_after_the_best() -> None:
    # the long tail below the next ten does not make the best stand out more
    assert peakedness([1.0] + [0.5] * 10 + [0.0] * 50) == pytest.approx(0.5)


def test_a_flat_semantic_side_gets_no_share_and_a_flat_lexical_side_the_most() -> None:
    peaked = [0.9, 0.2, 0.2]
    flat = [0.3, 0.3, 0.3]
    assert calibrated_weight(0.2, [5.0, 1.0], flat, 0.2) == 0.0
    assert calibrated_weight(0.2, [5.0, 5.0, 5.0], peaked, 0.2) == MAX_WEIGHT
    assert calibrated_weight(0.7, [5.0, 5.0, 5.0], peaked, 0.2) == 0.7  # never below config


def test_the_share_scales_with_the_sides_peakedness() -> None:
    lexical = [4.0, 2.0, 2.0]  # peakedness 0.5
    semantic = [0.9, 0.1, 0.1]  # peakedness 1 above the floor 0.1
    assert calibrated_weight(0.2, lexical, semantic, 0.1) == pytest.approx(0.4)
    assert calibrated_weight(0.2, [4.0, 0.0], [0.9, 0.5], 0.1) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="weight"):
        calibrated_weight(1.5, lexical, semantic, 0.1)


def test_a_clear_lexical_winner_keeps_first_place_against_flat_similarities() -> None:
    lexical = [("answer", 9.0), ("b", 2.0), ("c", 1.9), ("d", 1.8)]
    semantic = {"answer": 0.31, "b": 0.35, "c": 0.34, "d": 0.33, "e": 0.36}
    weight = calibrated_weight(0.2, [s for _, s in lexical], semantic.values(), 0.3)
    assert fuse(lexical, semantic, weight=weight, floor=0.3)[0][0] == "answer"


@given(st.lists(st.floats(0, 50), max_size=20), st.lists(st.floats(-1, 1), max_size=20))
def test_the_calibrated_share_stays_between_zero_and_its_bound(
    lexical: list[float], semantic: list[float]
) -> None:
    w = calibrated_weight(0.2, lexical, semantic, 0.0)
    assert 0.0 <= w <= MAX_WEIGHT
    assert w == calibrated_weight(0.2, list(reversed(lexical)), sorted(semantic), 0.0)


@pytest.mark.parametrize("top", [0, 1, 3, 10, 50])
def test_the_best_few_fused_are_the_first_of_the_whole_fused_order(top: int) -> None:
    # ties everywhere: equal lexical scores, equal similarities, keys on one side only
    lexical = [(k, float(10 - k // 3)) for k in range(20)]
    semantic = {k: (k % 4) / 4 for k in range(10, 35)}
    for weight in (0.0, 0.3, 0.5, 1.0):
        whole = fuse(lexical, semantic, weight=weight, floor=0.25)
        assert fuse(lexical, semantic, weight=weight, floor=0.25, top=top) == whole[:top]


def _reference(
    lexical: list[tuple[int, float]], semantic: dict[int, float], weight: float, floor: float
) -> list[tuple[int, float]]:
    """The fused order written out key by key (what fuse must equal, bit for bit)."""
    order: dict[int, int] = {}
    for key, _ in lexical:
        order.setdefault(key, len(order))
    for key in sorted((k for k in semantic if k not in order), key=lambda k: (-semantic[k], k)):
        order[key] = len(order)

    def unit(scores: dict[int, float], low: float) -> dict[int, float]:
        span = max(scores.values()) - low if scores else 0.0
        if span <= 0.0:
            return {k: 0.0 for k in scores}
        return {k: min(1.0, max(0.0, (v - low) / span)) for k, v in scores.items()}

    lex, sem = unit(dict(lexical[::-1]), 0.0), unit(semantic, floor)
    fused = {k: (1.0 - weight) * lex.get(k, 0.0) + weight * sem.get(k, 0.0) for k in order}
    return sorted(((k, fused[k]) for k in order), key=lambda kv: (-kv[1], order[kv[0]]))


def test_fused_scores_and_order_equal_the_formula_key_by_key_bit_for_bit() -> None:
    rng = random.Random(7)
    for _ in range(200):
        keys = rng.sample(range(60), rng.randint(1, 40))
        # repeated keys, equal scores and scores below the floor all occur
        lexical = [(rng.choice(keys), float(rng.randint(0, 6))) for _ in range(rng.randint(0, 30))]
        semantic = {
            k: rng.choice([0.1, 0.2, 0.35, 0.5, 0.9]) for k in rng.sample(keys, len(keys) // 2)
        }
        weight, floor = rng.choice([0.0, 0.3, 0.5, 1.0]), rng.choice([0.0, 0.2, 0.4])
        want = _reference(lexical, semantic, weight, floor)
        assert fuse(lexical, semantic, weight=weight, floor=floor) == want
        assert fuse(lexical, semantic, weight=weight, floor=floor, top=3) == want[:3]
