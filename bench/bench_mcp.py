"""MCP server latency per tool over stdio, at a realistic store size.

    python bench/bench_mcp.py --entries 10000 --calls 200

Fills a fresh store (real agent-trace messages from tests/data/traces, made unique
with a seeded suffix; generated text when the traces are absent), spawns
``python -m offload.cli.main mcp`` as a real subprocess, and times each tool round trip
through the SDK's stdio client (JSON-RPC framing, the SDK on both sides, the store).
Prints a markdown table (p50, p95 in ms) for docs/benchmarks/runtime.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters

import bench_store  # a sibling script: sys.path[0] is bench/
from bench_store import WORDS, trace_texts
from offload.config import load_settings
from offload.core.tokens import estimate_tokens
from offload.store.store import Store

KINDS = ("log", "file", "tool", "note", "trace")


def corpus(n: int, seed: int = 7) -> Iterator[tuple[str, str, str]]:
    """(kind, topic, body) for ``n`` distinct entries."""
    rng = random.Random(seed)
    texts = trace_texts(min_chars=200, max_chars=20000)
    if not texts:
        words = WORDS[:9]  # the first nine: the generated fallback stays as it was
        texts = ["\n".join(" ".join(rng.choices(words, k=12)) for _ in range(40))]
    for i in range(n):
        body = rng.choice(texts)
        first = next((ln for ln in body.splitlines() if ln.strip()), "entry")[:60]
        yield rng.choice(KINDS), f"{first} #{i}", f"{body}\n-- bench entry {i} {rng.random()}\n"


def fill(home: Path, scope: str, n: int) -> float:
    """Put ``n`` entries into the store at ``home``; seconds taken."""
    settings = load_settings(env={}, flags={"store.home": str(home)})
    started = time.perf_counter()
    with Store.open(settings) as store:
        for kind, topic, body in corpus(n):
            # the estimate keeps the fill fast; it is the timed calls that matter here
            store.put(body, kind=kind, topic=topic, scope=scope, tokens=estimate_tokens(body))
    return time.perf_counter() - started


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def timed(
    calls: int, fn: Callable[[int], Awaitable[Any]], warmup: int = 3
) -> tuple[float, float]:
    """(p50, p95) in milliseconds of ``calls`` awaited calls of ``fn(i)``."""
    for i in range(warmup):
        await fn(i)
    samples = []
    for i in range(calls):
        t0 = time.perf_counter()
        await fn(i)
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples), pct(samples, 0.95)


async def run(entries: int, calls: int) -> list[tuple[str, float, float]]:
    """Fill a store, start the server over stdio, time every read-side and write-side tool."""
    tmp = Path(tempfile.mkdtemp(prefix="offload-bench-mcp-"))
    project = tmp / "proj"
    (project / ".git").mkdir(parents=True)
    (project / "doc.md").write_text("# Doc\n" + "".join(f"## S{i}\ntext {i}\n" for i in range(20)))
    home = tmp / "home"
    fill_s = fill(home, str(project.resolve()), entries)
    print(f"filled {entries} entries in {fill_s:.1f}s", file=sys.stderr)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_")}
    env["OFFLOAD_HOME"] = str(home)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "offload.cli.main", "mcp"], env=env, cwd=project
    )
    rows: list[tuple[str, float, float]] = []
    async with Client(params) as c:

        async def call(tool: str, **args: Any) -> str:
            res = await c.call_tool(tool, args)
            text: str = res.content[0].text  # type: ignore[union-attr]
            if res.is_error:
                raise RuntimeError(f"{tool}: {text}")
            return text

        matrix = await call("matrix", limit=200)
        refs = re.findall(r"ctx:sha256:[0-9a-f]{12}", matrix)
        words = ["error", "config", "test", "flight", "python", "traceback", "file", "reservation"]

        async def checkout_checkin(i: int) -> None:
            out = await call("checkout", ref=refs[i % len(refs)])
            nonce = re.search(r"<offload:body:([0-9a-f]{24}) ", out).group(1)  # type: ignore[union-attr]
            await call("checkin", ref=refs[i % len(refs)], nonce=nonce)

        plan: list[tuple[str, int, Callable[[int], Awaitable[Any]]]] = [
            ("peek", calls, lambda i: call("peek")),
            ("recall", calls, lambda i: call("recall", ref=refs[i % len(refs)])),
            ("read", calls, lambda i: call("read", ref=refs[i % len(refs)], limit=50)),
            ("matrix (50)", calls // 2, lambda i: call("matrix", offset=(i * 50) % entries)),
            ("search (1 query)", calls // 2, lambda i: call("search", queries=[words[i % 8]])),
            (
                "search (3 queries)",
                calls // 4,
                lambda i: call("search", queries=[words[i % 8], words[(i + 3) % 8], "run"]),
            ),
            ("retrieve", calls // 2, lambda i: call("retrieve", ref=refs[i % len(refs)])),
            ("checkout+checkin", calls // 4, checkout_checkin),
            (
                "offload (new, 1 KB)",
                calls // 2,
                lambda i: call("offload", content=f"bench {i} " * 110),
            ),
            ("offload_path", calls // 4, lambda i: call("offload_path", path="doc.md")),
            ("pin", calls // 4, lambda i: call("pin", ref=refs[i % len(refs)])),
            ("stats", calls // 2, lambda i: call("stats")),
        ]
        for name, n, fn in plan:
            p50, p95 = await timed(n, fn)
            rows.append((name, p50, p95))
            print(f"{name}: p50 {p50:.2f} ms, p95 {p95:.2f} ms", file=sys.stderr)
    return rows


def main() -> int:
    """Run and print the markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=10000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--traces", type=Path, default=bench_store.TRACES, help="trace directory")
    args = parser.parse_args()
    bench_store.TRACES = args.traces
    rows = anyio.run(run, args.entries, args.calls)
    when = datetime.now(UTC).strftime("%Y-%m-%d")
    cpus = os.cpu_count()
    print(
        f"\n{args.entries} entries, {platform.python_implementation()} "
        f"{platform.python_version()}, {cpus} cores, {when}\n"
    )
    print("| tool | p50 ms | p95 ms |\n|---|---:|---:|")
    for name, p50, p95 in rows:
        print(f"| {name} | {p50:.2f} | {p95:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
