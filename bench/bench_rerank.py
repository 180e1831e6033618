"""What a second pass over the first 50 hits could add to LoCoMo recall: each candidate
signal measured as a re-ranking of the hybrid search's top 50, its one weight chosen on
conversations 1-N and reported on the others (held out).

    python bench/bench_rerank.py --data DATA/memory/locomo_dev.json --split 2

The store is filled and searched exactly as ``bench_search.py --only recall`` does (each
conversation's turns through ``put_many``, one call a session with its date as the event
time, then its questions, ``store.search(question, scope=conversation, limit=50)``). The
search engine is not changed: every signal is computed here, on the hits' own text, and
multiplies a hit's score by ``1 + weight * signal`` (signal in [0, 1]); the hits are then
sorted again. The signals:

- ``named common``: the share of the query's terms too common in the scope to be searched
  for (core/selectivity.py: held by more than a quarter of its entries, a speaker's name)
  that the hit holds;
- ``coverage``: the idf-weighted share of the searched terms the hit holds;
- ``neighbour``: the idf-weighted share of the searched terms the hit lacks and the turn
  just before or after it holds;
- ``proximity``: the searched terms the hit holds over the shortest span of its words
  holding them all (two or more);
- ``stretch``: BM25 (k1 1.2, b 0.75) of the searched terms over the hit's stretch (the
  turns of its scope stored with its event time: a LoCoMo session), the idf and average
  length over the scope's stretches, divided by the best stretch's among the hits;
- ``sub-queries``: not a factor: a question with a coordination (``and``, ``or``, ``but``,
  commas) split at it, each part searched alone (top 50) and fused with the whole
  question's hits by reciprocal rank (k 60, the whole question weighted 1, the parts
  sharing 1); the weight chosen is the whole question's (1, 2 or 4).

``R@50`` is the bound of any re-ranking of the top 50. LoCoMo is CC BY-NC: pass its path.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_search as bs

DEPTH = 50
WEIGHTS = (0.1, 0.2, 0.3, 0.5, 1.0)
K1, B = 1.2, 0.75
_COORD = re.compile(r"\s*(?:,\s*(?:and|or)\b|,|\band\b|\bor\b|\bbut\b)\s*", re.IGNORECASE)

Row = dict[str, Any]


def subqueries(question: str) -> list[str]:
    """The parts of a question split at its coordinations (none: not split). Two words of
    the same shape around a lone ``and``/``or`` (``Caroline and Melanie``) are a pair of
    conjuncts: the question once with each; else each clause alone."""
    body = question.rstrip("?.! ")
    pair = re.search(r"\b(\w+) (and|or) (\w+)\b", body)
    if pair and pair.group(1)[:1].isupper() == pair.group(3)[:1].isupper():
        a, b = pair.group(1), pair.group(3)
        return [body[: pair.start()] + w + body[pair.end() :] for w in (a, b)]
    parts = [p for p in _COORD.split(body) if len(p.split()) >= 2]
    return parts if len(parts) >= 2 else []


def collect(convs: list[bs.Conversation], tmp: Path) -> list[Row]:
    """Every question's top 50 hybrid hits (turn ids, scores) and its parts' hits."""
    import offload

    store = offload.open_store(tmp / "rerank.db", embedder=bs.embedder())
    rows: list[Row] = []
    for ci, c in enumerate(convs):
        ids = bs.put_sessions(store, c, True)
        by_id = {i: dia for i, (dia, _) in zip(ids, c.turns, strict=True)}
        for question, cat, ev in c.questions:
            hits = store.search(question, scope=c.sample_id, limit=DEPTH)
            parts = [
                [
                    by_id.get(h.entry.id, "?")
                    for h in store.search(p, scope=c.sample_id, limit=DEPTH)
                ]
                for p in subqueries(question)
            ]
            rows.append(
                {
                    "conv": ci,
                    "cat": cat,
                    "q": question,
                    "ev": ev,
                    "hits": [by_id.get(h.entry.id, "?") for h in hits],
                    "scores": [h.score for h in hits],
                    "parts": parts,
                }
            )
    store.close()
    return rows


class Scope:
    """One conversation as the signals read it: each turn's terms, its stretch."""

    def __init__(self, c: bs.Conversation) -> None:
        from offload.core.text import analysis

        self.at = {dia: i for i, (dia, _) in enumerate(c.turns)}
        self.counts = [Counter(analysis.index_terms(t)) for _, t in c.turns]
        self.words = [analysis.content_terms(t) for _, t in c.turns]
        self.df: Counter[str] = Counter()
        for counts in self.counts:
            self.df.update(counts.keys())
        self.stretch = list(c.dates)
        self.stretches: dict[float | None, Counter[str]] = defaultdict(Counter)
        for counts, when in zip(self.counts, self.stretch, strict=True):
            self.stretches[when].update(counts)


def query_terms(question: str, scope: Scope) -> tuple[list[str], list[str], dict[str, float]]:
    """The question's searched terms, those too common in the scope, each term's idf."""
    from offload.core import selectivity
    from offload.core.text import analysis

    terms = list(dict.fromkeys(analysis.analyse_query(question).any_of))
    n = len(scope.counts)
    cap = selectivity.common_cap(n) or n + 1
    common = [t for t in terms if scope.df[t] >= cap]
    searched = [t for t in terms if t not in common] or terms
    idf = {t: math.log(1 + (n - scope.df[t] + 0.5) / (scope.df[t] + 0.5)) for t in terms}
    return searched, common, idf


def signals(r: Row, scope: Scope) -> dict[str, list[float]]:
    """Each signal's value for each of the row's hits."""
    searched, common, idf = query_terms(r["q"], scope)
    total = sum(idf[t] for t in searched) or 1.0
    stretch = _stretch_scores(searched, scope)
    out: dict[str, list[float]] = defaultdict(list)
    for dia in r["hits"]:
        i = scope.at[dia]
        own = scope.counts[i]
        out["named common"].append(sum(t in own for t in common) / len(common) if common else 0.0)
        out["coverage"].append(sum(idf[t] for t in searched if t in own) / total)
        near = set()
        for j in (i - 1, i + 1):
            if 0 <= j < len(scope.counts):
                near |= scope.counts[j].keys()
        out["neighbour"].append(sum(idf[t] for t in searched if t in near and t not in own) / total)
        out["proximity"].append(_proximity(scope.words[i], set(searched)))
        out["stretch"].append(stretch.get(scope.stretch[i], 0.0))
    best = max(out["stretch"], default=0.0) or 1.0
    out["stretch"] = [v / best for v in out["stretch"]]
    return out


def _stretch_scores(terms: Sequence[str], scope: Scope) -> dict[float | None, float]:
    """BM25 of ``terms`` over each stretch of the scope, as one document each."""
    docs = scope.stretches
    n = len(docs)
    lengths = {k: sum(c.values()) for k, c in docs.items()}
    avg = statistics.fmean(lengths.values())
    df = {t: sum(1 for c in docs.values() if t in c) for t in terms}
    idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in terms}
    out = {}
    for k, c in docs.items():
        norm = 1 - B + B * lengths[k] / avg
        out[k] = sum(idf[t] * c[t] * (K1 + 1) / (c[t] + K1 * norm) for t in terms if c[t])
    return out


def _proximity(words: Sequence[str], terms: set[str]) -> float:
    """The distinct ``terms`` held over the shortest span holding them all (0: fewer than 2)."""
    at = [i for i, w in enumerate(words) if w in terms]
    need = len({words[i] for i in at})
    if need < 2:
        return 0.0
    best = len(words)
    for a in range(len(at)):
        seen: set[str] = set()
        for b in at[a:]:
            seen.add(words[b])
            if len(seen) == need:
                best = min(best, b - at[a] + 1)
                break
    return need / best


def reranked(r: Row, values: list[float], weight: float) -> list[str]:
    scored = [
        (s * (1 + weight * v), -i, h)
        for i, (h, s, v) in enumerate(zip(r["hits"], r["scores"], values, strict=True))
    ]
    scored.sort(reverse=True)
    return [h for _, _, h in scored]


def fused(r: Row, weight: float, k: int = 60) -> list[str]:
    if not r["parts"]:
        return r["hits"]
    lists = [(r["hits"], weight), *((p, 1.0 / len(r["parts"])) for p in r["parts"])]
    score: dict[str, float] = defaultdict(float)
    for hits, w in lists:
        for i, h in enumerate(hits):
            score[h] += w / (k + i + 1)
    return sorted(score, key=lambda h: -score[h])[:DEPTH]


def recall(rows: Sequence[Row], order: Callable[[Row], list[str]], k: int) -> float:
    if not rows:
        return 0.0
    return statistics.fmean(
        sum(e in set(order(r)[:k]) for e in r["ev"]) / len(r["ev"]) for r in rows
    )


def fitted(rows: Sequence[Row], rank: Callable[[Row, float], list[str]], weight: float) -> float:
    """R@5 + R@10 of ``rows`` ranked by ``rank`` at ``weight``."""
    return recall(rows, lambda r: rank(r, weight), 5) + recall(rows, lambda r: rank(r, weight), 10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="locomo_dev.json")
    ap.add_argument("--split", type=int, default=2, help="weights chosen on conversations 1-N")
    ap.add_argument("--dump", type=Path, help="keep the hits here (and reuse them if present)")
    args = ap.parse_args()
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    convs = bs.load(args.data)
    t = time.perf_counter()
    if args.dump is not None and args.dump.exists():
        rows = json.loads(args.dump.read_text())
    else:
        with tempfile.TemporaryDirectory(prefix="bench-rerank-") as d:
            rows = collect(convs, Path(d))
        if args.dump is not None:
            args.dump.write_text(json.dumps(rows))
    scopes = [Scope(c) for c in convs]
    for r in rows:
        r["signals"] = signals(r, scopes[r["conv"]])
    fit = [r for r in rows if r["conv"] < args.split]
    held = [r for r in rows if r["conv"] >= args.split]
    groups = {"all": rows, "fit": fit, "held out": held}
    for cat in sorted({r["cat"] for r in rows}):
        groups[f"category {cat}"] = [r for r in rows if r["cat"] == cat]
    families: dict[str, tuple[Sequence[float], Callable[[Row, float], list[str]]]] = {
        name: (WEIGHTS, lambda r, w, name=name: reranked(r, r["signals"][name], w))
        for name in ("named common", "coverage", "neighbour", "proximity", "stretch")
    }
    families["sub-queries"] = ((1.0, 2.0, 4.0), fused)
    first: Callable[[Row], list[str]] = lambda r: r["hits"]  # noqa: E731
    print("| ranking | weight | " + " | ".join(f"{g} R@5 / R@10" for g in groups) + " |")
    print("|---|---:|" + "---|" * len(groups))

    def line(name: str, weight: str, order: Callable[[Row], list[str]]) -> None:
        cells = [
            f"{recall(rs, order, 5):.3f} / {recall(rs, order, 10):.3f}" for rs in groups.values()
        ]
        print(f"| {name} | {weight} | " + " | ".join(cells) + " |")

    line("first pass (the search)", "", first)
    for name, (weights, rank) in families.items():
        # the weight with the best R@5 + R@10 on the fitting half
        best = max(weights, key=lambda w, rank=rank: fitted(fit, rank, w))
        line(name, f"{best:g}", lambda r, w=best, rank=rank: rank(r, w))
    bound = " | ".join(f"{recall(rs, first, DEPTH):.3f}" for rs in groups.values())
    print(f"| R@50 of the first pass (the bound) | | {bound} |")
    split = sum(1 for r in rows if r["parts"])
    print(f"questions split into parts: {split} of {len(rows)}")
    print(f"(run: {time.perf_counter() - t:.1f} s)")
    load = os.getloadavg()
    print(f"load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
