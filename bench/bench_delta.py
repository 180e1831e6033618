"""Delta stubs on the shared traces: how often a bulky message is stubbed as a near
duplicate of an earlier body, what it saves, and what the similarity test costs a turn.

Each trace file is replayed turn by turn through the proxy's pipeline (per run, every run
its own session, and chained, all runs as one session), once with ``delta_stubs`` on and
once off, side by side in one process. Reported:

- ``delta_stubs``: distinct messages sent as a delta stub; ``turns_with_delta``: turns
  whose wire carries one;
- ``delta_vs_plain_tokens``: summed over those distinct messages, the delta stub's tokens
  and the plain stub's (gist) tokens it replaces;
- ``wire_tokens``: the wire summed over every turn, on and off;
- ``test_ms``: time in the similarity test (candidate scan, resemblance, diff, render)
  per turn, p50 / p95 / max, and the rewrite time per turn, p50 / p95, on and off;
- every wire expanded back to the client's exact messages (``expand_ok``).

A store figure beside it: what one near-duplicate body (a 2,000-line file re-read with one
line changed) adds on disk when stored in full, as the store does, and what its zstd
frame would weigh compressed against the earlier body as a dictionary (a delta block).

Usage: ``python bench/bench_delta.py --traces DIR [--n-ctx 8192]``. Counts are exact cl100k.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zstandard

from offload.config import ProxySettings
from offload.core.tokens import default_counter
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.replay import Run, chain_runs, load_runs, turn_points
from offload.proxy.rewrite.stubs.expand import expand
from offload.proxy.rewrite.stubs.message_stubs import StubMaker
from offload.proxy.rewrite.stubs.parts import MessageStub
from offload.store.store import Store

MARK = "\nsame as the "


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _timed(stubs: StubMaker, spent: list[float], made: dict[str, tuple[int, int]]) -> None:
    """Wrap the instance's similarity test: its time summed into ``spent[0]``, each delta
    stub it makes recorded as (its tokens, the plain stub's) by short reference."""
    inner: Callable[..., Any] = stubs.delta_stub

    def timed(plain: MessageStub, *args: Any) -> MessageStub | None:
        started = time.perf_counter()
        try:
            out: MessageStub | None = inner(plain, *args)
        finally:
            spent[0] += time.perf_counter() - started
        if out is not None:
            made[out.digest[:12]] = (out.stub_tokens, plain.stub_tokens)
        return out

    stubs.delta_stub = timed  # type: ignore[method-assign,assignment]


def replay_one(path: Path, n_ctx: int, chained: bool, deltas: bool) -> dict[str, Any]:
    runs = load_runs(path)
    if chained:
        runs = [chain_runs(runs)]
    return {"file": path.name, **replay_runs(runs, n_ctx, chained, deltas)}


def replay_runs(runs: list[Run], n_ctx: int, chained: bool, deltas: bool) -> dict[str, Any]:
    counter = default_counter()
    wire_tokens = 0
    seen: dict[str, tuple[int, int]] = {}
    turns_with = 0
    test_ms: list[float] = []
    rewrite_ms: list[float] = []
    ok = True
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "s.db", counter=counter) as st:
        pipeline = Pipeline(st, ProxySettings(delta_stubs=deltas), counter)
        spent = [0.0]
        made: dict[str, tuple[int, int]] = {}
        _timed(pipeline.stubs, spent, made)
        memo: dict[str, Any] = {}
        for run in runs:
            for k in turn_points(run.messages):
                request = run.messages[:k]
                spent[0] = 0.0
                started = time.perf_counter()
                result = pipeline.rewrite(request, n_ctx)
                rewrite_ms.append((time.perf_counter() - started) * 1000)
                test_ms.append(spent[0] * 1000)
                wire_tokens += result.wire_tokens
                ok = ok and expand(st, result.messages, None, memo) == request
                found = False
                for m in result.messages:
                    text = m.get("content")
                    if isinstance(text, str) and MARK in text.split("\nread: ")[0]:
                        found = True
                        short = text.split("stored as ctx:sha256:", 1)[1][:12]
                        seen[short] = made[short]
                turns_with += found
    return {
        "chained": chained,
        "delta_stubs_on": deltas,
        "turns": len(rewrite_ms),
        "near_duplicates_found": len(made),
        "delta_stubs": len(seen),
        "turns_with_delta": turns_with,
        "delta_vs_plain_tokens": [
            sum(d for d, _ in seen.values()),
            sum(p for _, p in seen.values()),
        ],
        "wire_tokens": wire_tokens,
        "test_ms_p50_p95_max": [round(_pct(test_ms, q), 3) for q in (0.5, 0.95, 1.0)],
        "rewrite_ms_p50_p95": [round(_pct(rewrite_ms, q), 2) for q in (0.5, 0.95)],
        "expand_ok": ok,
    }


def store_figure() -> dict[str, Any]:
    """Bytes on disk of a re-read file with one line changed, stored in full (as the store
    does), beside its zstd frame against the first read as a dictionary."""
    rng = random.Random(7)
    words = ("alpha", "beta", "gamma", "delta", "return", "self", "value", "index", "count")
    lines = [f"{i:5d}  " + " ".join(rng.choice(words) for _ in range(8)) for i in range(2000)]
    first = "\n".join(lines) + "\n"
    lines[1000] = "  changed line"
    second = "\n".join(lines) + "\n"
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "s.db"
        with Store(db) as st:

            def on_disk() -> int:
                st.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                return sum(os.path.getsize(Path(tmp) / f) for f in os.listdir(tmp))

            before = on_disk()
            st.put(first, kind="proxy")
            after_first = on_disk()
            st.put(second, kind="proxy")
            after_second = on_disk()
            block = st.conn.execute(
                "SELECT length(data) FROM blocks ORDER BY id DESC LIMIT 1"
            ).fetchone()[0]
    base = zstandard.ZstdCompressionDict(first.encode(), dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    framed = zstandard.ZstdCompressor(level=6, dict_data=base).compress(second.encode())
    return {
        "body_bytes": len(second.encode()),
        "first_put_disk_bytes": after_first - before,
        "second_put_disk_bytes": after_second - after_first,
        "second_block_bytes": block,
        "second_as_zstd_delta_bytes": len(framed),
    }


def rereads() -> Run:
    """A coding session that reads one 80-line module every fourth call, one line of it
    changed each time (short answers between): the case delta stubs are for."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful agent."},
        {"role": "user", "content": "Fix the module."},
    ]
    for t in range(40):
        body = "\n".join(
            f"def step_{i}(value):\n    return value * {i + (t if i == 7 else 0)}"
            for i in range(40)
        )
        call = {"name": "read_file", "arguments": '{"path": "m.py"}'}
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"call_{t}", "type": "function", "function": call}],
            }
        )
        msgs.append(
            {
                "role": "tool",
                "tool_call_id": f"call_{t}",
                "name": "read_file",
                "content": body if t % 4 == 0 else f"ok {t}",
            }
        )
    msgs.append({"role": "assistant", "content": "done"})
    return Run("rereads", msgs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=Path, required=True)
    ap.add_argument("--rereads-only", action="store_true", help="only the re-read session")
    ap.add_argument("--n-ctx", type=int, nargs="+", default=[8192, 4096])
    args = ap.parse_args()
    out: dict[str, Any] = {"load": os.getloadavg()[0], "replays": []}
    for n_ctx in [] if args.rereads_only else args.n_ctx:
        for path in sorted(args.traces.glob("*.jsonl")):
            for chained in (False, True):
                for deltas in (True, False):
                    row = {"n_ctx": n_ctx, **replay_one(path, n_ctx, chained, deltas)}
                    out["replays"].append(row)
                    print(json.dumps(row), flush=True)
    for deltas in (True, False):
        row = {"n_ctx": 8192, "file": "rereads", **replay_runs([rereads()], 8192, False, deltas)}
        out["replays"].append(row)
        print(json.dumps(row), flush=True)
    out["store"] = store_figure()
    print(json.dumps(out["store"]))
    out["load_after"] = os.getloadavg()[0]
    print(json.dumps({"load": out["load"], "load_after": out["load_after"]}))


if __name__ == "__main__":
    main()
