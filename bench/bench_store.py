"""Store benchmarks: offload, resolve, read a line range, search, on-disk size.

    python bench/bench_store.py --sizes 1000 10000 100000

Builds a store per size from realistic text (the shared agent traces mixed with generated
code, logs and JSON), then measures medians. Prints a markdown table for
docs/benchmarks/store.md and docs/benchmarks/team-store.md. Deterministic corpus (seeded).

Backends side by side, through the public API only (``offload.store.open_store``
with ``store.url``), so any backend the settings accept runs the same workload:

    python bench/bench_store.py --url sqlite:///tmp/b/offload.db \
        --url postgresql://postgres@127.0.0.1:5432/bench --entries 100000

Each URL's store is filled to ``--entries`` (scope ``bench``; a store that already holds
them is reused, so a 1,000,000-entry build is paid once: ~30 min per backend here), then:
natural-language search p50/p95, resolve p50, offload of 100 KB p50, and the put
throughput of 1 and ``--writers`` processes (each its own scope, started together).
Beside it the ceiling: the same processes doing plain one-row inserts of the same ~4 KB
texts, one transaction each, straight into the database (``ceiling``: what the machine
and the database allow writers in parallel at this load; no put can do better).

``--corpus synthetic`` (the default) is the worst case for exact top-k search: its texts
are built from 31 words, each in 40-80 % of the texts, so a question's words match most
rows. ``--corpus locomo`` stores real conversation turns (two per entry, from
``DATA/memory/locomo_dev.json``; bench_search.py's speed corpus, scopes s0..s7) and asks
LoCoMo's questions of the whole store: a realistic vocabulary. ``--writers 0`` times the
search side only.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import multiprocessing
import os
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from offload.config import SearchSettings, Settings, StoreSettings
from offload.core.text.lines import read_lines
from offload.core.tokens import EstimateCounter
from offload.store import Filters, open_store
from offload.store.life.maintenance import compact
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
        # one error suffix per ERROR row (multiplying the whole row left four rows in
        # five blank, and a "100 KB" put of them 86 KB at the median)
        rows.append(
            f"2026-11-{rng.randrange(1, 29):02d}T10:{i % 60:02d}:00Z {lvl} "
            f"{rng.choice(WORDS)}: {rng.choice(WORDS)} {rng.randrange(10**5)} ms"
            + (f" ERR_{rng.choice(WORDS).upper()}" if lvl == "ERROR" else "")
        )
    return "\n".join(rows) + "\n"


def big_log(rng: random.Random, size: int, tag: str) -> str:
    """A log body of exactly ``size`` characters and one more line, ``tag`` (unique): a
    generated log repeated as often as it takes, then cut."""
    log = gen_log(rng)
    return (log * (size // len(log) + 1))[:size] + f"\n{tag}"


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
            store.put(big_log(rng, size, f"{next(counter)}-{time.time_ns()}"), kind="bench")

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


def disk_ratio(tmp: Path, name: str, texts: list[str]) -> tuple[float, float, dict[str, float]]:
    """Bytes on disk over raw UTF-8 bytes of the distinct texts: as written (after a WAL
    checkpoint), after `offload doctor --compact`, and each table's and index's share of
    the compacted file (SQLite's dbstat), largest first."""
    with Store(tmp / f"{name}.db", counter=EstimateCounter()) as store:
        raw = sum(len(t.encode()) for t in texts if store.put(t, kind="tool-output").created)
    written = sum(p.stat().st_size for p in tmp.glob(f"{name}.db*")) / raw
    with Store(tmp / f"{name}.db", counter=EstimateCounter()) as store:
        _, after = compact(store)
    with contextlib.closing(sqlite3.connect(tmp / f"{name}.db")) as conn:
        parts = conn.execute(
            "SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
        ).fetchall()
    return written, after / raw, {part: size / raw for part, size in parts}


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


# -- backends side by side (--url) ---------------------------------------------------------

BENCH_SCOPE = "bench"
BUILD_BATCH = 1000
# natural-language questions over the corpus' vocabulary (seeded templates, not keywords)
QUESTION_TEMPLATES = (
    "why did the {a} {b} fail with a timeout",
    "where is the {a} for the {b} configured",
    "what happened to the {a} after the {b} retry",
    "how does the {a} handler read the {b}",
    "which {a} errors did the {b} log show",
    "when was the {a} {b} last changed and why",
)


def open_url(url: str, home: Path, resident_mb: int | None = None) -> Store:
    """The store at ``url`` through the public API (``store.url``), the estimate counter;
    ``resident_mb``: the in-memory index's bound (``search.resident_mb``; None: the
    default), where the tree has one.

    A tree without the ``store.url`` setting (before the storage seam) opens sqlite:/// URLs
    by path, and refuses others plainly.
    """
    if "url" in {f.name for f in dataclasses.fields(StoreSettings)}:
        overrides: dict[str, object] = {"store.home": str(home), "store.url": url}
        if resident_mb is not None and "resident_mb" in {
            f.name for f in dataclasses.fields(SearchSettings)
        }:
            overrides["search.resident_mb"] = resident_mb
        settings = Settings().with_overrides(overrides)
        return open_store(settings=settings, counter=EstimateCounter())
    if url.startswith("sqlite:///"):
        return open_store(url[len("sqlite://") :], counter=EstimateCounter())
    raise SystemExit(f"this tree has no store.url setting: cannot open {url.split('://')[0]}")


def questions(n: int, seed: int = 3) -> list[str]:
    """``n`` natural-language questions built from the corpus' words."""
    rng = random.Random(seed)
    return [
        rng.choice(QUESTION_TEMPLATES).format(a=a, b=b)
        for a, b in (rng.sample(WORDS, 2) for _ in range(n))
    ]


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def timed_ms(fn: Callable[[], object], repeat: int, cpu: list[float] | None = None) -> list[float]:
    """Each call's wall time in ms (and its CPU time in this process into ``cpu``)."""
    out = []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        out.append((time.perf_counter() - t) * 1000)
        if cpu is not None:
            cpu.append((time.process_time() - c) * 1000)
    return out


@dataclasses.dataclass(frozen=True)
class Workload:
    """What ``--url`` mode stores and asks: the corpus' texts (and each one's scope), the
    questions, and the scope searched (None: the whole store)."""

    name: str
    texts: Callable[[int], Iterator[str]]
    scope_of: Callable[[int], str]
    questions: Callable[[int], list[str]]
    search_scope: str | None
    scopes: tuple[str, ...]


SYNTHETIC = Workload(
    "synthetic", corpus, lambda i: BENCH_SCOPE, lambda n: questions(n), BENCH_SCOPE, (BENCH_SCOPE,)
)


def locomo_workload(path: Path) -> Workload:
    """LoCoMo-derived texts and questions: bench_search.py's speed corpus exactly (two real
    conversation turns per entry, seeded; scopes s0..s7 by 2,000s; its questions asked of
    the whole store), so a store either benchmark built, or migrated, is reused by both."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_search import load, scale_texts

    convs = load(path)
    asked = [q for c in convs for q, _, _ in c.questions]
    return Workload(
        "locomo",
        lambda n: iter(scale_texts(convs, n)),
        lambda i: f"s{i // 2000 % 8}",
        lambda n: [asked[i % len(asked)] for i in range(n)],
        None,
        tuple(f"s{k}" for k in range(8)),
    )


def fill(store: Store, n: int, work: Workload = SYNTHETIC) -> tuple[float, list[str]]:
    """Fill the workload's scopes to ``n`` entries (put_many in batches); build seconds and
    up to 300 refs to resolve."""
    have = sum(store.count(Filters(scope=s)) for s in work.scopes)
    t = time.perf_counter()
    texts = work.texts(n)
    for _ in range(have):  # the corpus is deterministic: skip what an earlier run stored
        next(texts)
    batch: list[str] = []
    done, scope = have, work.scope_of(have)
    for text in texts:
        if batch and (len(batch) == BUILD_BATCH or work.scope_of(done + len(batch)) != scope):
            store.put_many(batch, kind="bench", scope=scope)
            done += len(batch)
            batch = []
            print(f"  built {done:,}/{n:,} ({time.perf_counter() - t:.0f} s)", file=sys.stderr)
        scope = work.scope_of(done + len(batch))
        batch.append(text)
    if batch:
        store.put_many(batch, kind="bench", scope=scope)
    build_s = time.perf_counter() - t
    rng = random.Random(5)
    sample = store.entries(
        Filters(scope=work.scopes[0]),
        limit=300,
        offset=rng.randrange(max(1, n // len(work.scopes) - 300)),
    )
    return build_s, [e.ref for e in sample]


def latencies(
    store: Store,
    refs: list[str],
    searches: int,
    work: Workload = SYNTHETIC,
    hits_out: Path | None = None,
    put_samples: int = 41,
) -> dict[str, float]:
    """Search, resolve and offload-100 KB figures on a filled store (after a warm-up);
    ``hits_out``: each timed question's top 10 entry ids written there (JSON), to compare
    two rankings of one store; ``put_samples``: the 100 KB puts timed."""
    rng = random.Random(11)
    asked = work.questions(searches)
    for q in asked[:10]:
        store.search(q, scope=work.search_scope, limit=10)
    search: list[float] = []
    shown: list[list[int]] = []
    for q in asked:
        t = time.perf_counter()
        found = store.search(q, scope=work.search_scope, limit=10)
        search.append((time.perf_counter() - t) * 1000)
        shown.append([h.entry.id for h in found])
    if hits_out is not None:
        hits_out.write_text(json.dumps({"questions": asked, "hits": shown}))
    resolve_cpu: list[float] = []
    resolve = timed_ms(lambda: store.resolve(rng.choice(refs)), 300, resolve_cpu)
    stamp = iter(range(10**9))

    def put_100kb() -> None:
        body = big_log(rng, 100 * 1024, f"{next(stamp)}-{time.time_ns()}")
        store.put(body, kind="bench", scope="bench-offload")

    offload_cpu: list[float] = []
    offload = timed_ms(put_100kb, put_samples, offload_cpu)
    return {
        "search_p50": percentile(search, 0.5),
        "search_p95": percentile(search, 0.95),
        "resolve_p50": percentile(resolve, 0.5),
        "resolve_client_cpu_p50": percentile(resolve_cpu, 0.5),
        "offload_100kb_p50": percentile(offload, 0.5),
        "offload_100kb_client_cpu_p50": percentile(offload_cpu, 0.5),
    }


def writer_main(url: str, home: Path, puts: int, seed: int) -> None:
    """A writer child: open, say ready, wait for go, put ``puts`` ~4 KB JSON entries in its
    own scope, print its first and last timestamps."""
    rng = random.Random(seed)
    bodies = [f"{gen_json(rng)[:4096]}\n{seed}-{i}-{time.time_ns()}" for i in range(puts)]
    with open_url(url, home) as store:
        store.count()  # connect (and migrate) before the clock starts
        print("ready", flush=True)
        sys.stdin.readline()
        start, cpu = time.time(), time.process_time()
        for body in bodies:
            store.put(body, kind="bench", scope=f"bench-writer-{seed}")
        print(f"{start} {time.time()} {time.process_time() - cpu}", flush=True)


def trivial_main(url: str, puts: int, seed: int) -> None:
    """A ceiling child: the same start protocol as :func:`writer_main`, but ``puts``
    trivial inserts of a ~4 KB text straight into the database, one transaction each (no
    offload code: what the database and the machine allow at this load)."""
    rng = random.Random(seed)
    bodies = [gen_json(rng)[:4096] for _ in range(puts)]
    if url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(
            url[len("sqlite://") :] + ".ceiling", timeout=60, isolation_level=None
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS ceiling (id INTEGER PRIMARY KEY, v TEXT)")
        sql = "INSERT INTO ceiling (v) VALUES (?)"
    else:
        import psycopg

        conn = psycopg.connect(url, autocommit=True)  # type: ignore[assignment]
        sql = "INSERT INTO bench_ceiling (v) VALUES (%s)"
    print("ready", flush=True)
    sys.stdin.readline()
    start, cpu = time.time(), time.process_time()
    for body in bodies:
        conn.execute(sql, (body,))
    print(f"{start} {time.time()} {time.process_time() - cpu}", flush=True)
    conn.close()


def ceiling_table(url: str) -> None:
    """Create the ceiling's table once, before its writers start."""
    if url.startswith("sqlite:///"):
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_ceiling (id bigserial PRIMARY KEY, v text)")


def server_cpu_s(url: str) -> float:
    """CPU seconds a local PostgreSQL server has used so far: its postmaster (with the
    children it has reaped) and every live child (0 for SQLite, which runs in the writer;
    NaN when the server's processes cannot be read: not on this machine)."""
    if url.startswith("sqlite:///"):
        return 0.0
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SHOW data_directory").fetchone()
    try:
        pid = int((Path(str(row and row[0])) / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError, TypeError):
        return float("nan")
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        me, parent = int(stat.parent.name), int(fields[1])
        if me == pid:  # utime stime cutime cstime
            total += sum(int(f) for f in fields[11:15])
        elif parent == pid:
            total += int(fields[11]) + int(fields[12])
    return total / tick


@dataclasses.dataclass(frozen=True)
class Run:
    """One throughput run: puts per second, and per put the writers' own CPU time, the
    server's and the rest of the wall time (waits: fsync, locks, the run queue), in ms."""

    puts_s: float
    client_ms: float
    server_ms: float
    wait_ms: float


def throughput(
    url: str, home: Path, writers: int, puts: int, round_no: int, *, trivial: bool = False
) -> Run:
    """Puts per second of ``writers`` processes writing at once (first start to last end);
    ``trivial``: the ceiling's plain inserts instead of puts."""
    cmd = [sys.executable, __file__, "--writer", url, "--home", str(home), "--puts", str(puts)]
    cmd += ["--trivial"] if trivial else []
    procs = [
        subprocess.Popen(
            [*cmd, "--seed", str(round_no * 100 + i)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(writers)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        server = server_cpu_s(url)
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        spans, cpu = [], 0.0
        for p in procs:
            out, _ = p.communicate(timeout=3600)
            start, end, used = (float(x) for x in out.split())
            spans.append((start, end))
            cpu += used
            if p.returncode:
                raise SystemExit(f"a writer failed ({p.returncode})")
        server = server_cpu_s(url) - server
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    wall = max(e for _, e in spans) - min(s for s, _ in spans)
    n = writers * puts
    c, srv = cpu / n * 1000, server / n * 1000
    return Run(n / wall, c, srv, writers * wall / n * 1000 - c - srv)


def paired(
    url: str, home: Path, writers: int, puts: int, rounds: int, first: int, trivial: bool = False
) -> tuple[Run, Run, list[float]]:
    """``rounds`` pairs of runs, one writer and ``writers`` at once, the pair's order
    alternating (a run slowed by the one before it, or by the machine's load drifting,
    shows in one ratio, not in every one): the median run of each kind (field by field)
    and each pair's speedup. Seeds are taken from ``first`` on."""
    ones, manys, ratios = [], [], []
    for r in range(rounds):
        runs: dict[int, Run] = {}  # 0: one writer, 1: all of them
        for kind in (0, 1) if r % 2 == 0 else (1, 0):
            count = 1 if kind == 0 else writers
            runs[kind] = throughput(url, home, count, puts, first + 2 * r + kind, trivial=trivial)
        one, many = runs[0], runs[1]
        ones.append(one)
        manys.append(many)
        ratios.append(many.puts_s / one.puts_s)
    return _median_run(ones), _median_run(manys), ratios


def _median_run(runs: list[Run]) -> Run:
    return Run(
        *(statistics.median(getattr(r, f.name) for r in runs) for f in dataclasses.fields(Run))
    )


def resident_built(store: Store, question: str) -> dict[str, float | str]:
    """Start the store's in-memory index as a user does (a first search), wait for its
    background build, and what it took (wall and the build's own seconds, MB, the
    process's peak resident memory); nothing for a store without one."""
    t = time.perf_counter()
    store.search(question, scope=None, limit=10)
    idx = getattr(store, "resident", None)
    if idx is None:
        return {}
    idx.built.wait()
    idx.entry_map.wait()  # the chunk -> entry map (store/search/memory/entrymap.py)
    idx.entry_keys.wait()  # the entries' columns (store/search/memory/entrykeys.py)
    r = idx.report
    return {
        "resident_wall_s": time.perf_counter() - t,
        "resident_build_s": r.seconds,
        "resident_rows": str(r.rows),
        "resident_mb": r.nbytes / 2**20,
        "resident_refused": r.refused or "no",
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _probe_once(text: str) -> None:
    counts = Counter(text.split())
    json.dumps(counts)
    sorted(counts)


def _probe_text() -> str:
    return " ".join(f"word{i % 997} value_{i}" for i in range(20_000))


def cpu_probe_ms() -> float:
    """A fixed CPU-bound workload's best time of five, in CPU milliseconds (counting and
    encoding words, as a put's analysis does, but with no offload code): the machine's
    speed at that moment, whatever the tree. This machine's speed swings up to 2x within
    minutes; a run whose probe reads slower ran in a slow phase."""
    text = _probe_text()
    best = float("inf")
    for _ in range(5):
        t = time.process_time()
        _probe_once(text)
        best = min(best, time.process_time() - t)
    return best * 1000


def _probe_seconds(rounds: int, start_at: float) -> float:
    """The probe's workload ``rounds`` times from ``start_at`` (epoch seconds): the CPU
    seconds it took (a child of :func:`cpu_parallel`). CPU time, not wall: another process
    taking turns on a core does not count, a core slowed by its busy sibling does."""
    text = _probe_text()
    time.sleep(max(0.0, start_at - time.time()))  # both children start together
    t = time.process_time()
    for _ in range(rounds):
        _probe_once(text)
    return time.process_time() - t


def cpu_parallel(rounds: int = 50) -> float:
    """How much CPU work two processes get done at once against one alone, the median of
    three pairs: what any CPU-bound pair of processes can gain on this machine now (2.0 on
    two whole cores; two hyperthreads of one core give less)."""
    ctx = multiprocessing.get_context("spawn")
    ratios = []
    with ctx.Pool(2) as pool:
        pool.starmap(_probe_seconds, [(1, 0.0)] * 2)  # both children started and idle
        for _ in range(3):
            solo = _probe_seconds(rounds, 0.0)
            start_at = time.time() + 0.5
            both = pool.starmap(_probe_seconds, [(rounds, start_at)] * 2)
            ratios.append(2 * solo / max(both))
    return statistics.median(ratios)


def load_average() -> str:
    """The 1-minute load average now."""
    return f"{os.getloadavg()[0]:.1f}"


def bench_url(url: str, args: argparse.Namespace, home: Path) -> dict[str, float | str]:
    """Every team-store figure for one backend."""
    row: dict[str, float | str] = {"backend": url.split("://")[0], "load_before": load_average()}
    if args.writers > 0:
        # before anything of the run: after it, the server's background work (vacuum,
        # checkpoints) made a solo probe slower and this ratio read up to 2.9
        row["cpu_parallel"] = cpu_parallel()
    with open_url(url, home, args.resident_mb) as store:
        build_s, refs = fill(store, args.entries, args.work)
        row["build_s"] = build_s
        row.update(resident_built(store, args.work.questions(1)[0]))
        row["cpu_probe_ms_before"] = cpu_probe_ms()
        row.update(
            latencies(store, refs, args.searches, args.work, args.hits_out, args.put_samples)
        )
        row["cpu_probe_ms_after"] = cpu_probe_ms()
    if args.writers <= 0:  # --writers 0: the search side only
        row["load_after"] = load_average()
        return row
    n, rounds = args.writers, args.writer_rounds
    one, many, ratios = paired(url, home, n, args.writer_puts, rounds, 1)
    row.update({"puts_s_1": one.puts_s, f"puts_s_{n}": many.puts_s})
    row["speedup"] = statistics.median(ratios)
    if rounds > 1:
        row["speedup_rounds"] = " ".join(f"{r:.2f}" for r in ratios)
    # per put, from one writer: client CPU C, server CPU S, wait W; on 2 cores that get P
    # times one core's work done together, N writers reach at most min(N / (C+S+W),
    # P / (C+S)) puts/s: a speedup of P(C+S+W)/(C+S), before the cost of N processes
    # taking turns on them
    for label, run in (("1", one), (str(n), many)):
        row[f"put_client_cpu_ms_{label}"] = run.client_ms
        row[f"put_server_cpu_ms_{label}"] = run.server_ms
        row[f"put_wait_ms_{label}"] = run.wait_ms
    cpu = one.client_ms + one.server_ms
    # two cores allow at most P times one's CPU work (cpu_parallel, measured first)
    row["speedup_bound"] = min(n, float(row["cpu_parallel"]) * (cpu + one.wait_ms) / cpu)
    # the same, for plain inserts: how far this machine lets writers run in parallel now
    ceiling_table(url)
    one, many, ratios = paired(url, home, n, args.writer_puts, rounds, 1 + 2 * rounds, True)
    row.update({"inserts_s_1": one.puts_s, f"inserts_s_{n}": many.puts_s})
    row["ceiling"] = statistics.median(ratios)
    row["load_after"] = load_average()
    return row


def main_urls(args: argparse.Namespace) -> None:
    """``--url`` mode: the same workload on each backend, one markdown table."""
    with tempfile.TemporaryDirectory() as d:
        rows = [bench_url(u, args, Path(d)) for u in args.url]
    keys = [k for k in rows[0] if k != "backend"]
    writers = f"writers 1 vs {args.writers}, {args.writer_puts} puts of ~4 KB each"
    print(f"corpus: {args.work.name}; entries: {args.entries:,}; {args.searches} questions; "
          f"{writers if args.writers > 0 else 'no writers'}")  # fmt: skip
    print("| figure | " + " | ".join(str(r["backend"]) for r in rows) + " |")
    print("|---|" + "---:|" * len(rows))
    for k in keys:
        cells = [f"{r[k]:.3f}" if isinstance(r[k], float) else str(r[k]) for r in rows]
        print(f"| {k} | " + " | ".join(cells) + " |")


def main() -> None:
    global TRACES  # a script's one data root
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--data", type=Path, default=TRACES.parent, help="holds traces/, catalogs/")
    ap.add_argument("--url", action="append", default=[], help="a store URL (repeatable)")
    ap.add_argument("--entries", type=int, default=100_000, help="--url: entries to fill")
    ap.add_argument("--searches", type=int, default=200, help="--url: questions timed")
    ap.add_argument("--put-samples", type=int, default=41, help="--url: 100 KB puts timed")
    ap.add_argument("--writers", type=int, default=8, help="--url: concurrent writers (0: none)")
    ap.add_argument(
        "--corpus",
        choices=["synthetic", "locomo"],
        default="synthetic",
        help="--url: synthetic (31 words, each in 40-80%% of texts: the worst case for exact "
        "top-k) or locomo (DATA/memory/locomo_dev.json's turns and questions)",
    )
    ap.add_argument("--hits-out", type=Path, help="--url: write each question's top 10 here")
    ap.add_argument(
        "--resident-mb",
        type=int,
        help="--url: the in-memory index's bound in MB (search.resident_mb; default: "
        "the setting's), built before the questions are timed",
    )
    ap.add_argument("--writer-puts", type=int, default=200, help="--url: puts per writer")
    ap.add_argument(
        "--writer-rounds",
        type=int,
        default=1,
        help="--url: pairs of writer runs (one writer, then all; the order alternating); "
        "the speedup is the pairs' median",
    )
    ap.add_argument("--writer", help=argparse.SUPPRESS)  # a writer child's store URL
    ap.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--puts", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--trivial", action="store_true", help=argparse.SUPPRESS)  # ceiling child
    args = ap.parse_args()
    TRACES = args.data / "traces"
    args.work = SYNTHETIC
    if args.url and args.corpus == "locomo":
        args.work = locomo_workload(args.data / "memory" / "locomo_dev.json")
    if args.writer and args.trivial:
        trivial_main(args.writer, args.puts, args.seed)
        return
    if args.writer:
        writer_main(args.writer, args.home, args.puts, args.seed)
        return
    if args.url:
        main_urls(args)
        return
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
    largest = list(bulky[2].items())[:5]
    print("  of it, compacted: " + ", ".join(f"{part} {share:.2f}" for part, share in largest))
    print(f"small trace messages (< 2 KB): on disk {small[0]:.2f} x raw, {small[1]:.2f} compacted")
    print(f"CLI wall (median of 7): --help {wall['help']:.0f} ms, ls {wall['ls']:.0f} ms")


if __name__ == "__main__":
    main()
