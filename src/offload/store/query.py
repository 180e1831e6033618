"""Building search queries (pure): FTS5 MATCH strings and SQL filter clauses.

User text never reaches FTS5 syntax unquoted: every term is a quoted phrase, so quotes,
operators, parentheses and emoji are all just text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from offload.store.models import Filters

# Mirrors FTS5's unicode61 tokenizer closely enough: runs of letters and digits.
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
_ASCII_SEPARATORS = str.maketrans({c: " " for c in map(chr, range(128)) if not c.isalnum()})


def tokens(text: str) -> list[str]:
    """Lower-cased index terms of ``text`` as unicode61 would see them."""
    return [t.lower() for t in _TOKEN.findall(text)]


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


@dataclass(frozen=True)
class Plan:
    """The MATCH expressions to try, strictest first."""

    words: tuple[tuple[str, ...], ...]  # each user word -> its index terms

    @property
    def empty(self) -> bool:
        """True when the query holds no searchable term at all."""
        return not self.words

    def all_words(self) -> str:
        """Every term of every word must appear in the chunk."""
        return " AND ".join(_quote(t) for w in self.words for t in w)

    def any_prefix(self) -> str:
        """Any word, its last term as a prefix (``parseCfg`` finds ``parseCfgFile``).

        Terms of one word are ANDed, not a phrase: the index keeps no positions (its
        ``detail=column`` keeps it under 0.6x of the raw text).
        """
        parts = []
        for w in self.words:
            terms = [_quote(t) for t in w]
            terms[-1] += "*"
            parts.append(terms[0] if len(terms) == 1 else "(" + " AND ".join(terms) + ")")
        return " OR ".join(parts)

    def terms(self) -> list[str]:
        """Distinct terms, in order of appearance."""
        seen: dict[str, None] = {}
        for w in self.words:
            for t in w:
                seen.setdefault(t, None)
        return list(seen)


def plan(query: str) -> Plan:
    """Split a user query into words of index terms."""
    words = []
    for raw in query.split():
        ts = tokens(raw)
        if ts:
            words.append(tuple(ts))
    return Plan(tuple(words[:32]))


VOCABULARY_SCAN_CHARS = 256 * 1024


def vocabulary_terms(text: str) -> set[str]:
    """Distinct terms worth remembering for partial-identifier and typo matching.

    Only the first 256 KB of a body is scanned: splitting a megabyte into words costs more
    than the rest of an offload, and the full-text index (prefix matches included) still
    covers every byte; only infix/typo matches deep inside huge bodies are given up.
    """
    text = text[:VOCABULARY_SCAN_CHARS]
    if text.isascii():
        # the ASCII pattern is several times faster than the Unicode one on big bodies
        distinct = set(text.lower().translate(_ASCII_SEPARATORS).split())
    else:
        distinct = set(_TOKEN.findall(text.lower()))
    return {t for t in distinct if 3 <= len(t) <= 64 and not t.isdigit()}


def any_of(terms: Iterable[str]) -> str:
    """A MATCH expression for any of the exact ``terms``."""
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


def snippet(text: str, terms: Sequence[str], first_line: int, width: int) -> tuple[int, str]:
    """The line (number, excerpt) of ``text`` that best shows ``terms``."""
    lines = text.splitlines() or [""]
    lowered = [t.lower() for t in terms]
    best_i, best_n, best_pos = 0, -1, 0
    for i, line in enumerate(lines):
        low = line.lower()
        n = sum(1 for t in lowered if t in low)
        if n > best_n:
            pos = min((low.find(t) for t in lowered if t in low), default=0)
            best_i, best_n, best_pos = i, n, pos
            if n == len(lowered):
                break
    line = lines[best_i]
    if len(line) > width:
        start = max(0, best_pos - width // 3)
        line = ("…" if start else "") + line[start : start + width] + "…"
    return first_line + best_i, line.strip()
