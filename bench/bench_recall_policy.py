"""What a recall policy costs in KV reuse and buys in evidence, priced turn by turn.

Every turn is played once with the recall gate off (``proxy.recall_min_new = 0``) and its
features recorded: the block's tokens, the newest message's role, the gate's novelty (the
share of the query's weight the best hit brings back in terms the wire lacks), ``hit`` (the
share the best hit holds at all) and ``wmax`` (the share the best-matching message already
on the wire holds). A policy (which turns get their block) is then priced without playing
again: a block placed after the newest message and dropped the next turn costs exactly its
tokens of reuse (KV reuse = shared / (wire + the blocks sent)), and on a LoCoMo question it
brings the evidence when the gate-off block did. ``held`` prices the same blocks kept where
they were sent until the window next moves (each block computed once, then reused).

Usage: ``python bench/bench_recall_policy.py --traces DATA/traces --locomo DATA/memory/locomo_dev.json``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_recall import SCOPE, chat_of, reached  # noqa: E402
from bench_replay import WireTokens, lcp  # noqa: E402
from offload.config import ProxySettings  # noqa: E402
from offload.core import analysis  # noqa: E402
from offload.core.tokens import default_counter  # noqa: E402
from offload.proxy.rewrite import recall  # noqa: E402
from offload.proxy.rewrite.memory import SessionIndex  # noqa: E402
from offload.proxy.rewrite.messages import Message, content_text  # noqa: E402
from offload.proxy.rewrite.pipeline import Pipeline  # noqa: E402
from offload.proxy.rewrite.replay import chain_runs, load_runs, turn_points  # noqa: E402
from offload.store.store import Store  # noqa: E402

Row = dict[str, Any]
_SEEN: dict[str, float] = {}
_GATE = recall.returns_to


def _features(
    index: SessionIndex,
    query: str,
    found: Sequence[recall.RecallHit],
    tail: int,
    wire: Sequence[Message],
    least: float,
) -> bool:
    before = wire[: len(wire) - tail] if tail else wire
    text = "\n".join(content_text(m) for m in before).lower()
    terms = list(dict.fromkeys(analysis.terms(recall.content_words(query))))
    weights = {t: index.weight(t) for t in terms}
    total = sum(weights.values()) or 1.0

    def share(body: str) -> float:
        held = set(analysis.terms(body))
        return sum(w for t, w in weights.items() if t in held) / total

    best = found[: recall.SEARCH_LIMIT]
    _SEEN["nov"] = max([recall.novelty(index, query, h, text) for h in best] or [0.0])
    _SEEN["hit"] = max([share(h.text) for h in best] or [0.0])
    _SEEN["wmax"] = max([share(content_text(m)) for m in before[1:]] or [0.0])
    return _GATE(index, query, found, tail, wire, least)


recall.returns_to = _features  # the pipeline's gate, watched


def _settings(**kw: Any) -> ProxySettings:
    return dataclasses.replace(ProxySettings(**kw), recall_min_new=0.0)


def trace_turns(path: Path, n_ctx: int, chained: bool, runs_limit: int) -> list[Row]:
    counter, tokens = default_counter(), WireTokens()
    runs = load_runs(path)[:runs_limit]
    runs = [chain_runs(runs)] if chained else runs
    out: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "s.db", counter=counter) as st:
        pipe = Pipeline(st, _settings(), counter)
        for run in runs:
            previous: list[int] | None = None
            for k in turn_points(run.messages):
                _SEEN.clear()
                sent = pipe.rewrite(run.messages[:k], n_ctx).messages
                block = sent[-1] if sent and recall.is_recall_block(sent[-1]) else None
                wire = tokens.of(sent[:-1] if block else sent)
                row: Row = {"wire": len(wire), "block": len(tokens.of([block])) if block else 0}
                row["shared"] = lcp(previous, wire) if previous is not None else 0
                row["kept"] = previous is not None and row["shared"] == len(previous)
                row["first"] = previous is None
                row["role"] = run.messages[k - 1]["role"]
                out.append({**row, **_SEEN})
                previous = wire
    return out


def locomo_turns(path: Path, n_ctx: int) -> list[Row]:
    counter = default_counter()
    out: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "s.db", counter=counter) as st:
        pipe = Pipeline(st, _settings(scope=SCOPE), counter, scope=SCOPE)
        for sample in json.loads(path.read_text()):
            msgs, by_id = chat_of(sample)
            for k in range(2, len(msgs)):
                if msgs[k]["role"] == "assistant":
                    pipe.rewrite(msgs[:k], n_ctx)
            for qa in sample["qa"]:
                texts = [by_id[e] for e in qa.get("evidence", []) if e in by_id]
                if not texts:
                    continue
                _SEEN.clear()
                request = [*msgs, {"role": "user", "content": str(qa["question"])}]
                sent = pipe.rewrite(request, n_ctx).messages
                block = sent[-1] if recall.is_recall_block(sent[-1]) else None
                base = "\n".join(content_text(m) for m in (sent[:-1] if block else sent))
                with_block = base + ("\n" + content_text(block) if block else "")
                row = {"off": reached(texts, base), "on": reached(texts, with_block)}
                out.append({**row, **_SEEN})
    return out


Policy = Callable[[Row], bool]


def kv(rows: Sequence[Row], fires: Policy, held: bool = False) -> float:
    """KV reuse when the turns ``fires`` picks send their block (``held``: kept in place
    until the window next moves, else dropped the next turn)."""
    shared = total = 0
    kept_blocks = last = 0
    for row in rows:
        block = row["block"] if row["block"] and fires(row) else 0
        if row["kept"] and held:
            shared += row["shared"] + kept_blocks + last
            kept_blocks += last
        else:
            shared += row["shared"]
            kept_blocks = 0
        total += row["wire"] + kept_blocks + block
        last = block
    return shared / total if total else 1.0


def evidence(rows: Sequence[Row], fires: Policy) -> float:
    return sum(r["on"] if fires(r) else r["off"] for r in rows) / max(1, len(rows))


POLICIES: dict[str, Policy] = {
    "off": lambda r: False,
    "every turn": lambda r: True,
    "novelty >= 0.15": lambda r: r.get("nov", 0.0) >= 0.15,
    "novelty >= 0.3 (default)": lambda r: r.get("nov", 0.0) >= 0.3,
    "novelty >= 0.5": lambda r: r.get("nov", 0.0) >= 0.5,
    "newest is a user message": lambda r: r.get("role", "user") == "user",
    "user message and novelty >= 0.3": lambda r: (
        r.get("role", "user") == "user" and r.get("nov", 0.0) >= 0.3
    ),
    "best hit beats the wire": lambda r: r.get("hit", 0.0) > r.get("wmax", 0.0),
    "hit >= 0.5 and beats the wire": lambda r: (
        r.get("hit", 0.0) >= 0.5 and r.get("hit", 0.0) > r.get("wmax", 0.0)
    ),
    "hit >= 0.7 and beats the wire 2x": lambda r: (
        r.get("hit", 0.0) >= 0.7 and r.get("hit", 0.0) > 2 * r.get("wmax", 0.0)
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=Path, required=True)
    parser.add_argument("--locomo", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=25)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    sets = {
        f"{p.stem} {'chained' if c else 'per run'}": trace_turns(p, 8192, c, args.runs)
        for p in sorted(args.traces.glob("*.jsonl"))
        for c in (True, False)
    }
    loco = {n: locomo_turns(args.locomo, n) for n in (8192, 4096)}
    names = list(sets)
    print(f"load {load:.1f}\n")
    print("| policy | " + " | ".join(names) + " | LoCoMo 8192 | LoCoMo 4096 |")
    print("|---|" + "---:|" * (len(names) + 2))
    for name, fires in POLICIES.items():
        cells = [f"{kv(sets[s], fires):.3f} / {kv(sets[s], fires, True):.3f}" for s in names]
        cells += [f"{evidence(loco[n], fires):.1%}" for n in (8192, 4096)]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
