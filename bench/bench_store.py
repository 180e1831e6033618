"""Store benchmarks: offload, resolve, read a line range, search, on-disk size.

    python bench/bench_store.py --sizes 1000 10000 100000

Builds a store per size from realistic text (the shared agent traces mixed with generated
code, logs and JSON), then measures medians. Prints a markdown table for
docs/benchmarks.md. Deterministic corpus (seeded).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from offload.core.lines import read_lines
from offload.core.tokens import EstimateCounter
from offload.store.maintenance import compact
from offload.store.store import Store

# the traces the repository ships (--data DIR, e.g. ../shared/data, for the full set)
TRACES = Path(__file__).resolve().parents[1] / "tests" / "data" / "traces"
WORDS = [
    "config",
    "parser",
    "request",
    "handler",
    "retry",
    "timeout",
    "socket",
    "cache",
    "index",
    "token",
    "budget",
    "session",
    "window",
    "stub",
    "frontier",
    "schema",
    "migration",
    "checkout",
    "nonce",
    "fence",
    "label",
    "preview",
    "contents",
    "upstream",
    "gateway",
    "catalog",
    "search",
    "recall",
    "offload",
    "block",
    "chunk",
]


def trace_texts(min_chars: int = 201, max_chars: int | None = None) -> list[str]:
    """Message contents from the shared traces (real agent text), within the length bounds."""
    out: list[str] = []
    for f in sorted(TRACES.glob("*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            for m in json.loads(line).get("messages", []):
                c = m.get("content")
                if (
                    isinstance(c, str)
                    and min_chars <= len(c)
                    and (max_chars is None or len(c) <= max_chars)
                ):
                    out.append(c)
    return out


def gen_code(rng: random.Random) -> str:
    name = rng.choice(WORDS)
    lines = [f"def {name}_{rng.randrange(10**6)}(self, {rng.choice(WORDS)}):"]
    for _ in range(rng.randrange(10, 80)):
        a, b = rng.sample(WORDS, 2)
        lines.append(f"    {a}_{rng.randrange(100)} = self.{b}({a!r}, {rng.randrange(1000)})")
    return "\n".join(lines) + "\n"


def gen_log(rng: random.Random) -> str:
    rows = []
    for i in range(rng.randrange(20, 200)):
        lvl = rng.choice(["INFO", "INFO", "DEBUG", "WARN", "ERROR"])
        rows.append(
            f"2026-11-{rng.randrange(1, 29):02d}T10:{i % 60:02d}:00Z {lvl} "
            f"{rng.choice(WORDS)}: {rng.choice(WORDS)} {rng.randrange(10**5)} ms "
            f"ERR_{rng.choice(WORDS).upper()}" * (lvl == "ERROR")
        )
    return "\n".join(rows) + "\n"


def gen_json(rng: random.Random) -> str:
    items = [
        {"id": rng.randrange(10**6), "name": rng.choice(WORDS), "tags": rng.sample(WORDS, 3),
         "status": rng.choice(["ok", "failed", "pending"]), "ms": rng.random() * 100}
        for _ in range(rng.randrange(5, 60))
    ]  # fmt: skip
    return json.dumps({"items": items, "total": len(items)}, indent=2)


def corpus(n: int, seed: int = 7) -> Iterator[str]:
    """``n`` realistic texts, unique (a counter line makes each distinct)."""
    rng = random.Random(seed)
    real = trace_texts()
    makers: list[Callable[[random.Random], str]] = [gen_code, gen_log, gen_json]
    for i in range(n):
        text = real[rng.randrange(len(real))] if real and i % 4 == 0 else rng.choice(makers)(rng)
        yield f"{text}\n# item {i}\n"


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def build(path: Path, n: int) -> tuple[Store, float, int]:
    store = Store(path, counter=EstimateCounter())
    raw = 0
    t = time.perf_counter()
    for text in corpus(n):
        raw += len(text.encode())
        store.put(text, kind="bench", topic=text[:30])
    return store, time.perf_counter() - t, raw


def bench_size(n: int, tmp: Path) -> dict[str, float]:
    store, build_s, raw = build(tmp / f"s{n}.db", n)
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    disk = sum(p.stat().st_size for p in tmp.glob(f"s{n}.db*"))
    rng = random.Random(1)
    refs = [e.ref for e in store.entries(limit=200)]
    big = store.put("\n".join(f"line {i}: " + "x" * 60 for i in range(20000)), topic="big").entry
    res: dict[str, float] = {"entries": n, "build_s": build_s}
    for label, size in (
        ("offload_1kb", 1024),
        ("offload_100kb", 100 * 1024),
        ("offload_1mb", 1024 * 1024),
    ):
        counter = iter(range(10**9))

        def put(size: int = size, counter: Iterator[int] = counter) -> None:
            body = (gen_log(rng) * (size // 2000 + 1))[
                :size
            ] + f"\n{next(counter)}-{time.time_ns()}"
            store.put(body, kind="bench")

        res[label] = median_ms(put, 15 if size < 10**6 else 7)
    res["resolve"] = median_ms(lambda: store.resolve(rng.choice(refs)), 300)
    res["read_range"] = median_ms(
        lambda: read_lines(
            store.body(store.resolve(big.ref)), offset=rng.randrange(1, 19000), limit=200
        ),
        50,
    )
    queries = [
        "timeout retry",
        "ERR_SOCKET",
        "checkout nonce",
        "parser",
        "upstream gateway",
        "index_42",
        "traceback",
    ]
    res["search_p50"] = median_ms(lambda: store.search(rng.choice(queries), limit=5), 100)
    res["search_partial_p50"] = median_ms(lambda: store.search("rser", limit=5), 5)
    res["disk_ratio"] = disk / raw
    store.close()
    return res


def tool_outputs(min_bytes: int) -> list[str]:
    """Real bulky tool outputs: trace observations, source files as a read_file returns
    them (the standard library), and MCP catalogs (JSON)."""
    out: list[str] = []
    for f in sorted(TRACES.glob("*.jsonl")):
        for line in f.read_text().splitlines():
            for m in json.loads(line)["messages"]:
                c = m.get("content")
                if m.get("role") in ("tool", "user") and isinstance(c, str) and len(c) >= min_bytes:
                    out.append(c)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    out += [p.read_text() for p in sorted(stdlib.glob("*.py"))[:150]]
    out += [p.read_text() for p in sorted((TRACES.parent / "catalogs").glob("*.json"))]
    return out


def disk_ratio(tmp: Path, name: str, texts: list[str]) -> tuple[float, float]:
    """Bytes on disk over raw UTF-8 bytes of the distinct texts: as written (after a WAL
    checkpoint), and after `offload doctor --compact`."""
    with Store(tmp / f"{name}.db", counter=EstimateCounter()) as store:
        raw = sum(len(t.encode()) for t in texts if store.put(t, kind="tool-output").created)
    written = sum(p.stat().st_size for p in tmp.glob(f"{name}.db*")) / raw
    with Store(tmp / f"{name}.db", counter=EstimateCounter()) as store:
        _, after = compact(store)
    return written, after / raw


def cli_wall(tmp: Path) -> dict[str, float]:
    env = {"OFFLOAD_HOME": str(tmp / "cli"), "PATH": "/usr/bin:/bin"}
    out = {}
    for name, argv in (("help", ["--help"]), ("ls", ["ls", "--all-scopes"])):
        times = []
        for _ in range(7):
            t = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "offload.cli.main", *argv],
                env=env,
                capture_output=True,
                check=False,
            )
            times.append((time.perf_counter() - t) * 1000)
        out[name] = statistics.median(times)
    return out


def main() -> None:
    global TRACES  # a script's one data root
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--data", type=Path, default=TRACES.parent, help="holds traces/, catalogs/")
    args = ap.parse_args()
    TRACES = args.data / "traces"
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows = [bench_size(n, tmp) for n in args.sizes]
        bulky = disk_ratio(tmp, "bulky", tool_outputs(2048))
        small = disk_ratio(tmp, "small", [t for t in trace_texts() if len(t) < 2048])
        wall = cli_wall(tmp)
    cols = [
        "entries",
        "build_s",
        "offload_1kb",
        "offload_100kb",
        "offload_1mb",
        "resolve",
        "read_range",
        "search_p50",
        "search_partial_p50",
        "disk_ratio",
    ]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print(
            "| "
            + " | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols)
            + " |"
        )
    print(
        f"\nbulky tool outputs (>= 2 KB, real): on disk {bulky[0]:.2f} x raw, {bulky[1]:.2f} compacted"
    )
    print(f"small trace messages (< 2 KB): on disk {small[0]:.2f} x raw, {small[1]:.2f} compacted")
    print(f"CLI wall (median of 7): --help {wall['help']:.0f} ms, ls {wall['ls']:.0f} ms")


if __name__ == "__main__":
    main()
