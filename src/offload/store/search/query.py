"""Building search queries (pure): FTS5 MATCH expressions, SQL filter clauses and the
edit distance for typos.

Query terms come from :mod:`offload.core.text.analysis`; running the queries is
:mod:`offload.store.search.pipeline`'s and :mod:`offload.store.search.lexical`'s.
"""

from __future__ import annotations

from typing import Any

from offload.store.models import Filters


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def match_expression(terms: list[str]) -> str:
    """An FTS5 MATCH for any of ``terms`` (each quoted: user text is never syntax)."""
    return " OR ".join(_quote(t) for t in dict.fromkeys(terms))


def filter_sql(f: Filters, now: float, alias: str = "e") -> tuple[str, list[Any]]:
    """SQL conditions and parameters for ``f`` (always at least ``1``)."""
    conds: list[str] = [f"({alias}.expires IS NULL OR {alias}.expires > ?)"]
    params: list[Any] = [now]
    if f.scope is not None:
        conds.append(f"{alias}.scope = ?")
        params.append(f.scope)
    if f.kinds:
        conds.append(f"{alias}.kind IN ({','.join('?' * len(f.kinds))})")
        params.extend(f.kinds)
    if f.status is not None:
        conds.append(f"{alias}.status = ?")
        params.append(f.status)
    if f.pinned is not None:
        conds.append(f"{alias}.pinned = ?")
        params.append(1 if f.pinned else 0)
    if f.min_salience is not None:
        conds.append(f"{alias}.salience >= ?")
        params.append(f.min_salience)
    if f.source_prefix:
        conds.append(f"substr({alias}.source, 1, ?) = ?")
        params.extend([len(f.source_prefix), f.source_prefix])
    if f.created_after is not None:
        conds.append(f"{alias}.created >= ?")
        params.append(f.created_after)
    if f.created_before is not None:
        conds.append(f"{alias}.created < ?")
        params.append(f.created_before)
    return " AND ".join(conds), params


def edit_distance(a: str, b: str, limit: int) -> int:
    """Edit distance counting a swap of two neighbours as one edit (optimal string
    alignment), giving up (returning ``limit + 1``) once past ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            v = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                v = min(v, prev2[j - 2] + 1)
            cur.append(v)
        if min(cur) > limit:
            return limit + 1
        prev2, prev = prev, cur
    return prev[-1]


def typo_budget(term: str) -> int:
    """How many edits a term of this length may carry and still be the same word."""
    return 0 if len(term) < 4 else 1 if len(term) < 8 else 2
