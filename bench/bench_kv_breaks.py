"""Where the KV reuse on the wire goes: every prefix break priced, and the bound.

Each trace is played through the pipeline as ``bench_replay.py --kv`` plays it (each
request as sent, rendered with ChatML role markers and tokenized whole with cl100k; the
longest common token prefix with the session's previous request). Every request whose LCP
is shorter than the previous request is a break; it is classified by the pipeline's own
``break_cause`` (windowing, recall, loop_note, stubs_restored, client_edit, ...) and
priced at the previous request's tokens it does not reuse. Summed over a session, one
minus KV reuse is exactly the first request, the last request's growth over the first,
and the tokens the breaks lose, so the table accounts for all of it. ``recomputed`` is
the tokens the upstream computes again (all tokens minus those reused): the absolute cost,
which a ratio alone hides when a policy sends more tokens.

The bound (``--bound``): the least any compaction schedule could recompute under the
pipeline's rules (head pinned and verbatim, recent tail verbatim, wire under the ceiling),
when every compaction leaves only the head, one range stub (``--range-tokens``) and the
tail, and the wire only grows by appending between compactions: a dynamic program over
(turn, last compaction), in the proxy's own token counts, beside what the pipeline itself
recomputes with recall off in the same counts (``offload replay``'s ``reused_tokens``). ``best reuse`` is the highest
ratio any such schedule reaches (Dinkelbach's iteration over the same program). It models
neither the stubs of messages left in the middle nor forced stubs of a tail that alone
breaks the ceiling, so it is a bound for traces whose tails fit (the shared traces), not
for runs whose single calls fill the window.

Usage::

    python bench/bench_kv_breaks.py --traces DATA/traces [--baseline-src MAIN/src] [--bound]
        [--set target=0.2] [--extra heavy.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_replay import DEFAULT_TRACES, WireTokens, lcp, machine_line
from offload.config import ProxySettings
from offload.core.tokens import default_counter
from offload.proxy.rewrite.messages import head_end, message_tokens, protect_start
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.replay import Run, chain_runs, load_runs, replay, turn_points
from offload.store.store import Store

CASES = ((8192, True), (8192, False), (4096, True), (4096, False))


def _runs(path: Path, chained: bool, limit: int) -> list[Run]:
    runs = load_runs(path)[:limit]
    return [chain_runs(runs)] if chained else runs


def breaks(
    path: Path, n_ctx: int, chained: bool, recall: float, limit: int, overrides: dict[str, float]
) -> dict[str, Any]:
    """KV reuse of one trace and its breaks by cause: {cause: [count, tokens lost]}."""
    counter, tokens = default_counter(), WireTokens()
    shared = total = firsts = peak = windowing = 0
    causes: dict[str, list[int]] = {}
    settings = ProxySettings(**{"recall_ratio": recall, **overrides})
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "s.db", counter=counter) as st:
        pipeline = Pipeline(st, settings, counter)
        for run in _runs(path, chained, limit):
            previous: list[int] | None = None
            for k in turn_points(run.messages):
                result = pipeline.rewrite(run.messages[:k], n_ctx)
                wire = tokens.of(result.messages)
                total += len(wire)
                peak = max(peak, len(wire))
                windowing += result.windowed
                if previous is None:
                    firsts += len(wire)
                else:
                    common = lcp(previous, wire)
                    shared += common
                    if common < len(previous):
                        cause = result.break_cause or "unknown"
                        cell = causes.setdefault(cause, [0, 0])
                        cell[0] += 1
                        cell[1] += len(previous) - common
                previous = wire
    return {
        "file": path.name,
        "mode": "chained" if chained else "per run",
        "n_ctx": n_ctx,
        "recall": recall,
        "kv_reuse": round(shared / total, 4) if total else 1.0,
        "tokens": total,
        "recomputed": total - shared,
        "first": firsts,
        "windowing_turns": windowing,
        "peak": peak,
        "breaks": causes,
    }


def _schedule(
    m: list[Any], n_ctx: int, range_tokens: int, lam: float, tail: int
) -> tuple[int, int]:
    """(recomputed, wire tokens) of the schedule minimising recomputed - lam * wire."""
    counter = default_counter()
    ceiling = int(ProxySettings().emergency * n_ctx)
    pre = [0]
    for msg in m:
        pre.append(pre[-1] + message_tokens(counter, msg))
    points = turn_points(m)
    head = head_end(m)
    pinned = pre[head]
    protects = [protect_start(m[:p], head, tail) for p in points]

    def wire(k: int, t: int) -> int:  # at turn t, the last compaction at turn k (-1: none)
        n = points[t]
        return pre[n] if k < 0 else pinned + range_tokens + pre[n] - pre[protects[k]]

    def key(v: tuple[int, int]) -> float:
        return v[0] - lam * v[1]

    start = -1 if pre[points[0]] <= ceiling else 0
    w0 = wire(start, 0)
    best: dict[int, tuple[int, int]] = {start: (w0, w0)}
    for t in range(1, len(points)):
        nxt: dict[int, tuple[int, int]] = {}
        for k, (re, ws) in best.items():
            w = wire(k, t)
            if w <= ceiling:
                nxt[k] = (re + w - wire(k, t - 1), ws + w)
        w = wire(t, t)  # compact at t: everything past the head is computed again
        nxt[t] = min(((re + w - pinned, ws + w) for re, ws in best.values()), key=key)
        best = nxt
    return min(best.values(), key=key)


def bound(path: Path, n_ctx: int, chained: bool, limit: int, range_tokens: int) -> dict[str, Any]:
    """The least recomputed tokens, and the best reuse, of any schedule under the rules."""
    tail = ProxySettings().tail_messages
    runs = _runs(path, chained, limit)

    def total(lam: float) -> tuple[int, int]:
        sums = [_schedule(r.messages, n_ctx, range_tokens, lam, tail) for r in runs]
        return sum(s[0] for s in sums), sum(s[1] for s in sums)

    counter = default_counter()
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "s.db", counter=counter) as st:
        pipeline = Pipeline(st, ProxySettings(recall_ratio=0.0), counter)
        played = replay(runs, pipeline, n_ctx, chained=chained).totals()
    least, wire = total(0.0)
    best = (least, wire)
    for _ in range(8):  # Dinkelbach: the ratio recomputed / wire falls to its least
        lam = best[0] / best[1]
        nxt = total(lam)
        if nxt[0] / nxt[1] >= lam - 1e-9:
            break
        best = nxt
    return {
        "file": path.name,
        "mode": "chained" if chained else "per run",
        "n_ctx": n_ctx,
        "played_recomputed": played["wire_tokens"] - played["reused_tokens"],
        "played_reuse": played["kv_reuse_ratio"],
        "least_recomputed": least,
        "its_reuse": round(1 - least / wire, 4),
        "best_reuse": round(1 - best[0] / best[1], 4),
    }


def rows(files: list[Path], limit: int, overrides: dict[str, float]) -> list[dict[str, Any]]:
    out = []
    recall_on = ProxySettings().recall_ratio
    for path in files:
        for n_ctx, chained in CASES:
            for recall in (recall_on, 0.0) if (n_ctx, chained) == (8192, True) else (recall_on,):
                row = breaks(path, n_ctx, chained, recall, limit, overrides)
                print(json.dumps(row), file=sys.stderr, flush=True)
                out.append(row)
    return out


def render(trees: dict[str, list[dict[str, Any]]]) -> str:
    out = [
        "| file | mode | n_ctx | recall | tree | KV reuse | recomputed | windowing turns |"
        " lost to windowing (breaks) | lost to recall | lost to others | peak |",
        "|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    names = list(trees)
    for i, first in enumerate(trees[names[0]]):
        for name in names:
            r = trees[name][i]
            b = r["breaks"]
            win = b.get("windowing", [0, 0])
            rec = b.get("recall", [0, 0])
            other = {k: v for k, v in b.items() if k not in ("windowing", "recall")}
            others = ", ".join(f"{k} {v[1]:,} ({v[0]})" for k, v in sorted(other.items()))
            out.append(
                f"| {first['file']} | {first['mode']} | {first['n_ctx']} |"
                f" {'on' if first['recall'] else 'off'} | {name} | {r['kv_reuse']:.3f} |"
                f" {r['recomputed']:,} | {r['windowing_turns']} | {win[1]:,} ({win[0]}) |"
                f" {rec[1]:,} ({rec[0]}) | {others or '0'} | {r['peak']:,} |"
            )
    return "\n".join(out)


def render_bounds(bounds: list[dict[str, Any]]) -> str:
    out = [
        "| file | mode | n_ctx | played, recall off: recomputed | KV reuse |"
        " bound: least recomputed | its KV reuse | best KV reuse |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for b in bounds:
        out.append(
            f"| {b['file']} | {b['mode']} | {b['n_ctx']} | {b['played_recomputed']:,} |"
            f" {b['played_reuse']:.3f} | {b['least_recomputed']:,} |"
            f" {b['its_reuse']:.3f} | {b['best_reuse']:.3f} |"
        )
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    parser.add_argument("--extra", type=Path, nargs="*", default=[], help="more trace files")
    parser.add_argument("--runs", type=int, default=25, help="runs of each file")
    parser.add_argument("--baseline-src", type=Path, help="another tree's src/, played beside")
    parser.add_argument("--bound", action="store_true", help="also the bound of each file")
    parser.add_argument("--range-tokens", type=int, default=240, help="a range stub, for --bound")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a proxy setting"
    )
    parser.add_argument("--rows-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    overrides = {k: float(v) for k, v in (s.split("=", 1) for s in args.set)}
    files = [*sorted(args.traces.glob("*.jsonl")), *args.extra]
    if args.rows_only:
        for row in rows(files, args.runs, overrides):
            print(json.dumps(row))
        return 0
    other = None
    if args.baseline_src is not None:  # played at the same time, on the same machine state
        env = {**os.environ, "PYTHONPATH": str(args.baseline_src.resolve())}
        argv = [sys.executable, __file__, "--rows-only", "--traces", str(args.traces)]
        argv += ["--runs", str(args.runs), "--extra", *map(str, args.extra)]
        argv += [f"--set={s}" for s in args.set]
        other = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    trees = {"this tree": rows(files, args.runs, overrides)}
    if other is not None:
        out, _ = other.communicate()
        trees["baseline"] = [json.loads(line) for line in out.splitlines() if line.strip()]
    command = " ".join(["python bench/bench_kv_breaks.py", *sys.argv[1:]])
    print(f"```\n{command}\n```\n\n{machine_line()}\n\n{render(trees)}\n")
    if args.bound:
        found = [bound(p, n, c, args.runs, args.range_tokens) for p in files for n, c in CASES]
        print(render_bounds(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
