"""A soak of ``offload serve``: many concurrent clients for a while, then quiet, watching the
process's memory and file descriptors the whole time.

``offload serve`` runs in its own process on loopback with its own OFFLOAD_HOME, in front of
the instant llama-like stub upstream of ``bench/bench_proxy.py`` (its own process too).
``--clients`` clients share the load, round robin over three kinds:

- mcp: the official SDK client over Streamable HTTP at ``/mcp``; each session stores a
  text (``offload``), searches it (``search``) and reads it back (``read``) a few times,
  then closes, and a new session begins (sessions come and go, as agents' do);
- proxy: ``POST /v1/chat/completions`` with a short conversation and a bulky tool output
  (which the proxy pages out), through one keep-alive client;
- stats: ``GET /api/stats`` (the dashboard's poll: proxy, store and surface figures).

First every client runs ``--prime-s`` and the server is left quiet for ``--idle-s``: its
figures then are the idle ones (what a process holds once it has loaded what it loads on
first use, the token counter and the search index, and met the load's concurrency once:
SQLite keeps the descriptors of closed connections for reuse while the file is locked). Then the load, then
quiet again. Every ``--sample-s`` a line shows the server's RSS (``/proc/PID/status``), the
memory it holds to search the store and the store's live entries (``/api/stats``), open fds
(``/proc/PID/fd``), threads, sockets in CLOSE-WAIT, requests and errors so far. When the
load stops, the same is sampled through ``--idle-s`` of quiet. The summary gives errors,
latency percentiles per kind, RSS after warm-up (``--warmup-s``) and at the end of the
load, RSS and fds after the quiet, against the targets: 0 errors, RSS growth after warm-up
at most 25 %, RSS released when the load stops (back within 10 % of the warm-up figure),
fds back to their idle count. Beside the growth it gives the growth net of the search
memory: the in-memory index of the entries the load stores grows with them by design.
Every loop is bounded: the run ends by itself.

``--big-mb N`` first sends one chat request whose user message is N MB and reports the
server's peak RSS (VmHWM) before and after it: what an accepted large body costs.

Usage (the acceptance run, on a quiet machine):

    python bench/bench_soak.py --clients 16 --minutes 15

Quick check: ``--clients 6 --minutes 2 --idle-s 40``. ``--json FILE`` writes the summary;
``--check`` makes the exit status say whether the targets were met.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from bench_proxy import start_stub  # noqa: E402
from realparts import free_port, wait_until  # noqa: E402

CHAT = "/v1/chat/completions"
OFFLOAD = (sys.executable, "-m", "offload.cli.main")
OP_TIMEOUT_S = 60.0  # one request's ceiling: a hung server is an error, not a hang
SESSION_CALLS = 3  # offload/search/read rounds per MCP session
REF = re.compile(r"ctx:sha256:[0-9a-f]{8,64}")
TARGET_GROWTH = 0.25
TARGET_RELEASE = 0.10


# -- the server process ------------------------------------------------------------------


@dataclass
class Sample:
    """One look at the server process."""

    t: float
    rss_mb: float
    hwm_mb: float
    fds: int
    threads: int
    close_wait: int
    # the store's figures at the time (``/api/stats``): live entries, and the memory the
    # process holds to search them (resident index, vectors, cached bodies), -1 unread
    entries: int = -1
    search_mb: float = -1.0


async def with_store(s: Sample, url: str) -> Sample:
    """``s`` with the store's entries and search memory as ``/api/stats`` gives them."""
    try:
        async with httpx.AsyncClient(base_url=url, timeout=OP_TIMEOUT_S) as client:
            store = (await client.get("/api/stats")).json()["store"]
        return dataclasses.replace(
            s, entries=int(store["entries"]), search_mb=store["search_memory_bytes"] / 2**20
        )
    except (httpx.HTTPError, KeyError, ValueError, TypeError):
        return s


def _status(pid: int) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def _close_wait(pid: int) -> int:
    """Sockets of ``pid`` in CLOSE-WAIT (the peer closed, the process has not)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for row in path.read_text().splitlines()[1:]:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "08" and cols[9] in inodes:
                count += 1
    return count


def sample(pid: int, t0: float) -> Sample:
    """The process's RSS, peak RSS, fds, threads and CLOSE-WAIT sockets now."""
    status = _status(pid)

    def mb(key: str) -> float:
        return int(status[key].split()[0]) / 1024

    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return Sample(
        t=time.monotonic() - t0,
        rss_mb=mb("VmRSS"),
        hwm_mb=mb("VmHWM"),
        fds=fds,
        threads=int(status["Threads"]),
        close_wait=_close_wait(pid),
    )


def start_serve(upstream: str, home: Path, project: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``offload serve`` on a free loopback port with its own home; waits until it answers."""
    port = free_port()
    env = {**os.environ, "OFFLOAD_HOME": str(home)}
    log = (home / "serve.log").open("wb")
    proc = subprocess.Popen(
        [*OFFLOAD, "serve", "--port", str(port), "--upstream", upstream, "--scope", "soak"],
        env=env,
        cwd=project,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise SystemExit(f"offload serve exited: see {home / 'serve.log'}")
        try:
            return httpx.get(url + "/api/stats", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(up, 120, interval=0.2, what="offload serve up")
    return proc, url


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 15 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


# -- the clients ----------------------------------------------------------------------------


@dataclass
class Tally:
    """Latencies per kind and the errors, shared by every client."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    async def timed(self, kind: str, call: Callable[[], Awaitable[bool | str]]) -> None:
        """Run one operation; it returns True, or what went wrong."""
        start = time.perf_counter()
        try:
            outcome = await asyncio.wait_for(call(), OP_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - every failure is counted and shown
            outcome = f"{type(exc).__name__}: {exc}"
        if outcome is True:
            self.latencies.setdefault(kind, []).append(time.perf_counter() - start)
        else:
            self.errors.append(f"{kind}: {str(outcome)[:300]}")

    @property
    def done(self) -> int:
        return sum(len(v) for v in self.latencies.values())


def tool_output(n: int) -> str:
    """A bulky, distinct tool output (~6 KB) the proxy pages out."""
    rows = [
        f"row {n}-{i}: status=ok latency_ms={(n * 7 + i) % 97} host=node{i % 5}" for i in range(120)
    ]
    return "\n".join(rows)


async def proxy_client(url: str, deadline: float, tally: Tally, idx: int) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=OP_TIMEOUT_S) as client:
        n = 0
        while time.monotonic() < deadline:
            n += 1
            body = {
                "model": "stub",
                "messages": [
                    {"role": "system", "content": "You are a terse assistant."},
                    {"role": "user", "content": f"client {idx} turn {n}: summarise the log"},
                    {"role": "assistant", "content": "Reading it."},
                    {"role": "user", "content": tool_output(idx * 100_000 + n)},
                ],
                "max_tokens": 8,
            }

            async def call(body: dict[str, Any] = body) -> bool | str:
                resp = await client.post(CHAT, json=body)
                ok = resp.status_code == 200 and "choices" in resp.json()
                return True if ok else f"{resp.status_code} {resp.text}"

            await tally.timed("proxy", call)


async def stats_client(url: str, deadline: float, tally: Tally) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=OP_TIMEOUT_S) as client:
        while time.monotonic() < deadline:

            async def call() -> bool | str:
                resp = await client.get("/api/stats")
                ok = resp.status_code == 200 and "store" in resp.json()
                return True if ok else f"{resp.status_code} {resp.text}"

            await tally.timed("stats", call)
            await asyncio.sleep(0.5)  # a dashboard polls; it does not hammer


async def mcp_client(url: str, deadline: float, tally: Tally, idx: int) -> None:
    from mcp.client.streamable_http import streamable_http_client

    from mcp import Client

    n = 0
    while time.monotonic() < deadline:
        try:
            async with asyncio.timeout(OP_TIMEOUT_S * (SESSION_CALLS + 1)):
                async with Client(streamable_http_client(url + "/mcp")) as client:
                    for _ in range(SESSION_CALLS):
                        n += 1
                        await _mcp_round(client, tally, f"soak{idx}x{n}")
        except Exception as exc:  # noqa: BLE001 - a session that fails is an error
            tally.errors.append(f"mcp session: {type(exc).__name__}: {str(exc)[:300]}")


async def _mcp_round(client: Any, tally: Tally, word: str) -> None:
    ref: list[str] = []

    async def put() -> bool | str:
        text = f"{word} calibration notes\n" + tool_output(len(word))
        result = await client.call_tool("offload", {"content": text, "topic": f"{word} notes"})
        text = "".join(getattr(block, "text", "") for block in result.content)
        found = REF.search(text)
        if result.is_error or found is None:
            return text
        ref.append(found.group(0))
        return True

    async def find() -> bool | str:
        result = await client.call_tool("search", {"queries": [word]})
        return True if not result.is_error else str(result.content)

    async def read() -> bool | str:
        if not ref:
            return "no reference to read (the offload call failed)"
        result = await client.call_tool("read", {"ref": ref[0]})
        return True if not result.is_error else str(result.content)

    await tally.timed("mcp.offload", put)
    await tally.timed("mcp.search", find)
    await tally.timed("mcp.read", read)


# -- the run ---------------------------------------------------------------------------------


async def big_request(url: str, pid: int, megabytes: float) -> dict[str, Any]:
    """One chat request with a ``megabytes`` MB user message; peak RSS before and after."""
    before = sample(pid, 0.0)
    text = ("lorem ipsum dolor sit amet " * (int(megabytes * 1024 * 1024) // 27 + 1))[
        : int(megabytes * 1024 * 1024)
    ]
    body = {"model": "stub", "messages": [{"role": "user", "content": text}], "max_tokens": 8}
    start = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        resp = await client.post(CHAT, json=body)
    took = time.perf_counter() - start
    after = sample(pid, 0.0)
    return {
        "mb": megabytes,
        "status": resp.status_code,
        "seconds": round(took, 2),
        "rss_before_mb": round(before.rss_mb, 1),
        "peak_before_mb": round(before.hwm_mb, 1),
        "peak_after_mb": round(after.hwm_mb, 1),
        "peak_growth_mb": round(after.hwm_mb - before.hwm_mb, 1),
    }


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def show(s: Sample, phase: str, tally: Tally) -> None:
    print(
        f"{s.t:7.0f}s {phase:5} rss {s.rss_mb:7.1f} MB  search {s.search_mb:6.1f} MB  "
        f"entries {s.entries:6}  fds {s.fds:4}  threads {s.threads:3}  "
        f"close-wait {s.close_wait:2}  ok {tally.done:6}  errors {len(tally.errors)}",
        flush=True,
    )


def _clients(url: str, n: int, deadline: float, tally: Tally) -> list[Awaitable[None]]:
    """``n`` clients, round robin over the kinds (mcp, proxy, stats)."""
    clients: list[Awaitable[None]] = []
    for i in range(n):
        kind = ("mcp", "proxy", "stats")[i % 3]
        if kind == "mcp":
            clients.append(mcp_client(url, deadline, tally, i))
        elif kind == "proxy":
            clients.append(proxy_client(url, deadline, tally, i))
        else:
            clients.append(stats_client(url, deadline, tally))
    return clients


async def _quiet(
    pid: int, t0: float, seconds: float, every: float, tally: Tally, url: str
) -> list[Sample]:
    """Samples through ``seconds`` of no load."""
    out: list[Sample] = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        await asyncio.sleep(min(every, max(0.0, until - time.monotonic())))
        out.append(await with_store(sample(pid, t0), url))
        show(out[-1], "quiet", tally)
    return out


async def run(args: argparse.Namespace, pid: int, url: str) -> dict[str, Any]:
    """Prime (every client briefly, then quiet: the idle figures of a process that has
    loaded what it loads on first use and met the load's concurrency once), the load, then
    quiet again."""
    tally = Tally()
    t0 = time.monotonic()
    show(sample(pid, t0), "start", tally)
    await asyncio.gather(*_clients(url, args.clients, time.monotonic() + args.prime_s, tally))
    primed = await _quiet(pid, t0, args.idle_s, args.sample_s, tally, url)
    baseline = primed[-1] if primed else sample(pid, t0)
    samples: list[tuple[str, Sample]] = [("idle", baseline)]
    start = time.monotonic()
    deadline = start + args.minutes * 60
    load = asyncio.gather(*_clients(url, args.clients, deadline, tally))
    warmup_end = start + min(args.warmup_s, args.minutes * 60 / 2)
    warm: Sample | None = None
    while not load.done():
        await asyncio.wait([load], timeout=args.sample_s)
        s = await with_store(sample(pid, t0), url)
        samples.append(("load", s))
        show(s, "load", tally)
        if warm is None and time.monotonic() >= warmup_end:
            warm = s
    await load
    end_of_load = samples[-1][1]
    quiet = await _quiet(pid, t0, args.idle_s, args.sample_s, tally, url)
    samples += [("quiet", s) for s in quiet]
    return summary(args, tally, samples, baseline, warm or end_of_load, end_of_load)


def summary(
    args: argparse.Namespace,
    tally: Tally,
    samples: list[tuple[str, Sample]],
    baseline: Sample,
    warm: Sample,
    end_of_load: Sample,
) -> dict[str, Any]:
    after = samples[-1][1]
    under_load = [s for phase, s in samples if phase == "load" and s.t >= warm.t]
    growth = (max(s.rss_mb for s in under_load) - warm.rss_mb) / warm.rss_mb if under_load else 0
    # the same growth less what the process holds to search the store at each sample: the
    # index of the entries the load stored grows with them by design (search.resident_mb)
    net = [s.rss_mb - max(0.0, s.search_mb) for s in under_load]
    net_growth = (max(net) - (warm.rss_mb - max(0.0, warm.search_mb))) / warm.rss_mb if net else 0
    out: dict[str, Any] = {
        "clients": args.clients,
        "minutes": args.minutes,
        "requests_ok": tally.done,
        "errors": len(tally.errors),
        "first_errors": tally.errors[:10],
        "latency_ms": {
            kind: {
                "n": len(v),
                "p50": round(statistics.median(v) * 1000, 1),
                "p90": round(pct(v, 0.9) * 1000, 1),
                "p99": round(pct(v, 0.99) * 1000, 1),
            }
            for kind, v in sorted(tally.latencies.items())
        },
        "rss_mb": {
            "idle_before": round(baseline.rss_mb, 1),
            "after_warmup": round(warm.rss_mb, 1),
            "peak_under_load": round(max((s.rss_mb for s in under_load), default=0), 1),
            "end_of_load": round(end_of_load.rss_mb, 1),
            "after_quiet": round(after.rss_mb, 1),
        },
        "search_memory_mb": {
            "after_warmup": round(warm.search_mb, 1),
            "end_of_load": round(end_of_load.search_mb, 1),
            "after_quiet": round(after.search_mb, 1),
        },
        "entries": {"after_warmup": warm.entries, "end_of_load": end_of_load.entries},
        "fds": {
            "idle_before": baseline.fds,
            "end_of_load": end_of_load.fds,
            "after_quiet": after.fds,
        },
        "close_wait_after_quiet": after.close_wait,
        "threads": {"idle_before": baseline.threads, "after_quiet": after.threads},
    }
    out["targets"] = {
        "no_errors": not tally.errors,
        "rss_growth_after_warmup": round(growth, 3),
        "rss_growth_ok": growth <= TARGET_GROWTH,
        "rss_growth_net_of_search_memory": round(net_growth, 3),
        "rss_released": after.rss_mb <= warm.rss_mb * (1 + TARGET_RELEASE),
        "fds_back": after.fds <= baseline.fds,
    }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--warmup-s", type=float, default=60.0)
    parser.add_argument(
        "--idle-s", type=float, default=60.0, help="quiet sampled before and after the load"
    )
    parser.add_argument(
        "--prime-s", type=float, default=10.0, help="every client this long, before the idle"
    )
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--big-mb", type=float, default=0.0, help="one request this large first")
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    if args.clients < 1 or args.minutes <= 0 or args.sample_s <= 0 or args.idle_s < 0:
        parser.error("--clients, --minutes and --sample-s must be above 0, --idle-s 0 or more")
    stub, upstream = start_stub()
    try:
        with tempfile.TemporaryDirectory(prefix="offload-soak-") as tmp:
            home, project = Path(tmp) / "home", Path(tmp) / "project"
            home.mkdir()
            project.mkdir()
            proc, url = start_serve(upstream, home, project)
            try:
                big = asyncio.run(big_request(url, proc.pid, args.big_mb)) if args.big_mb else None
                if big is not None:
                    print("big request:", json.dumps(big), flush=True)
                result = asyncio.run(run(args, proc.pid, url))
                result["big_request"] = big
            finally:
                stop(proc)
    finally:
        stub.kill()
        stub.wait(5)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    met = result["targets"]
    ok = met["no_errors"] and met["rss_growth_ok"] and met["rss_released"] and met["fds_back"]
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    raise SystemExit(main())
