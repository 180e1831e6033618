"""Which query terms say something about what is searched (pure).

BM25 weighs a term by its rarity in the whole index, but a search is often confined to one
scope, where a term can be everywhere: a speaker's name in a conversation, a project's name
in its notes, "error" in a log's scope. Such a term matches a large share of what is
searched and ranks an entry for merely belonging there, over the entries that hold the
question's other, telling words. Like a stopword, it is then not searched for, as long as
the query has other terms (a query made only of such terms keeps them all).

The share (a quarter) is a round value, not fitted: LoCoMo recall measured with 0.15 and
with 0.3 differed by 0.003 (docs/benchmarks/search.md "Search").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["COMMON_SHARE", "MIN_SEARCHED", "common_cap", "selective"]

#: a term held by more than this share of the searched entries is too common to search for
COMMON_SHARE = 0.25
#: below this many searched entries a share says little: every term is kept
MIN_SEARCHED = 20


def common_cap(searched: int) -> int | None:
    """How many searched entries make a term common (None: the set is too small)."""
    if searched < MIN_SEARCHED:
        return None
    return int(COMMON_SHARE * searched) + 1


def selective(terms: Sequence[str], held: Mapping[str, int], searched: int) -> list[str]:
    """``terms`` without those ``held`` (term -> how many of the ``searched`` entries hold
    it; a term not given counts as rare) by at least :func:`common_cap` entries, in
    order; all of them when none would be left or too few entries are searched."""
    cap = common_cap(searched)
    if cap is None:
        return list(terms)
    kept = [t for t in terms if held.get(t, 0) < cap]
    return kept or list(terms)
