"""Fusing a lexical ranking with semantic similarity: a convex combination, lexical dominant.

Reciprocal-rank fusion weighs the two lists equally by position, so a mediocre semantic list
pushes good BM25 hits down (measured in docs/benchmarks/search.md: it lowers BM25's recall). Here
each side's score is first put on [0, 1] for this one query, and the fused score is
``(1 - weight) * lexical + weight * semantic`` with the lexical side dominant:

- lexical: the score over the best lexical score (BM25 is positive here, higher better);
- semantic: the similarity between the corpus's typical similarity to the query (``floor``,
  e.g. the median; unrelated texts score about that) and the best one, clipped at 0: a
  text no closer than a typical one adds nothing, whatever the raw cosine.

Keys found by only one side keep 0 from the other, so a semantic-only match can climb in
only when it is much closer than anything else. Ties keep the lexical order, then the
semantic order, then the key: the result depends only on the inputs.

The share can follow the query (:func:`calibrated_weight`): a side whose best scores stand
well above the rest (:func:`peakedness`) knows what it found; a flat side does not. The
semantic share is the configured one scaled by how peaked the semantic side is against the
lexical side, so a static embedding's flat similarities on a question the words answer
clearly cannot pull the lexical ranking down, and it gets more say when the words leave a
crowd of equal matches.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar


class _Key(Hashable, Protocol):
    def __lt__(self, other: Any, /) -> bool: ...


K = TypeVar("K", bound=_Key)

#: how many scores after the best say how far it stands out (a page of hits)
PEAK_DEPTH = 10
#: the most a calibrated semantic share reaches (unless configured higher): lexical keeps
#: at least half
MAX_WEIGHT = 0.5


def peakedness(scores: Iterable[float], floor: float = 0.0) -> float:
    """How far the best of ``scores`` stands above the next :data:`PEAK_DEPTH`, in [0, 1]:
    one minus their mean on the scale where ``floor`` is 0 and the best is 1.

    1 when nothing competes with the best (a single score), 0 when the next ones equal it
    or the best is not above ``floor``.
    """
    ranked = heapq.nlargest(PEAK_DEPTH + 1, scores)
    if not ranked or ranked[0] <= floor:
        return 0.0
    rest = ranked[1 : PEAK_DEPTH + 1]
    if not rest:
        return 1.0
    span = ranked[0] - floor
    return 1.0 - sum(min(1.0, max(0.0, (v - floor) / span)) for v in rest) / len(rest)


def calibrated_weight(
    weight: float, lexical: Iterable[float], semantic: Iterable[float], floor: float
) -> float:
    """The semantic share for one query: ``weight`` x the semantic side's
    :func:`peakedness` (above ``floor``) over the lexical side's, at most the larger of
    ``weight`` and :data:`MAX_WEIGHT` (that bound when the lexical side is flat)."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight must be within [0, 1], got {weight}")
    cap = max(weight, MAX_WEIGHT)
    sem = peakedness(semantic, floor)
    lex = peakedness(lexical)
    if sem == 0.0:
        return 0.0
    if lex == 0.0:
        return cap
    return min(cap, weight * sem / lex)


def fuse(
    lexical: Sequence[tuple[K, float]],
    semantic: Mapping[K, float],
    *,
    weight: float,
    floor: float,
    top: int | None = None,
) -> list[tuple[K, float]]:
    """(key, fused score) best first; with ``top``, only the best ``top`` of that list.

    ``lexical``: (key, score) best first, scores >= 0. ``semantic``: each key's similarity
    to the query (the semantic candidates and, where known, the lexical ones); equal
    similarities are ordered by key. ``floor``:
    the similarity of a typical text. ``weight`` in [0, 1]: the semantic share.
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight must be within [0, 1], got {weight}")
    import numpy as np

    order: dict[K, int] = {}
    for key, _ in lexical:
        order.setdefault(key, len(order))
    # only the keys the lexical side lacks take a place from the semantic order
    only = [k for k in semantic if k not in order]
    for key in sorted(only, key=lambda k: (-semantic[k], k)):
        order[key] = len(order)
    first = dict(lexical[::-1])  # reversed: the first score of a repeated key wins
    lex = np.zeros(len(order))
    lex[[order[k] for k in first]] = _unit(list(first.values()), 0.0)
    sem = np.zeros(len(order))
    sem[[order[k] for k in semantic]] = _unit(list(semantic.values()), floor)
    # elementwise, in the order a loop over the keys would take: the same bits
    fused = (1.0 - weight) * lex + weight * sem
    # best first; equal scores keep their place in ``order`` (a stable sort)
    ranked = np.argsort(-fused, kind="stable")
    if top is not None:
        ranked = ranked[:top]
    keys = list(order)
    return [(keys[i], float(fused[i])) for i in ranked.tolist()]


def _unit(scores: Sequence[float], floor: float) -> Any:
    """Scores mapped to [0, 1] as a float64 array: ``floor`` and below to 0, the best to 1
    (NaN to 0, as ``min(1.0, max(0.0, x))`` would)."""
    import numpy as np

    values = np.asarray(scores, dtype=np.float64)
    if not len(values):
        return values
    span = float(values.max()) - floor
    if span <= 0.0:
        return np.zeros(len(values))
    return np.fmin(np.fmax((values - floor) / span, 0.0), 1.0)
