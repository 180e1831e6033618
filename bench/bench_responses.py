"""What serving a request as the OpenAI Responses API costs the proxy over the chat route.

The same 50-message request (bench_proxy.py's tau-bench messages) goes through one proxy
as a chat request (``/v1/chat/completions``) and as the Responses request a Responses
client sends for it (``/v1/responses``: ``instructions`` and ``input`` items), both routes
side by side in one run:

- CPU: the proxy process's own CPU time (``/proc/PID/stat``) per request, over batches of
  ``--batch`` requests of each route, alternating (random order within each pair of
  batches), streamed and whole; reported as the mean over all batches and the median of
  the paired ratios (the clock ticks every 10 ms: a batch of 50 resolves 0.2 ms);
- wall: pairs of one request per route in random order, the median of the per-pair
  differences (time to the first text: chat's first ``content`` delta, Responses' first
  ``response.output_text.delta``; whole: the whole answer).

Usage: ``python bench/bench_responses.py [--upstream URL] [--batches 12] [--batch 50]
[--pairs 200] [--seed 1]``. Without ``--upstream`` the instant stub upstream of
bench_proxy.py (its own process), so the model's time and noise drop out; the proxy runs
as ``offload proxy`` in its own process.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench_proxy import fifty_messages, machine, start_proxy, start_stub

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"


def as_responses(body: dict[str, Any]) -> dict[str, Any]:
    """The Responses request a Responses client sends for a chat request of plain text
    messages."""
    messages = body["messages"]
    head = messages[0]["role"] == "system"
    items: list[dict[str, Any]] = []
    for m in messages[1:] if head else messages:
        kind = "output_text" if m["role"] == "assistant" else "input_text"
        items.append({"role": m["role"], "content": [{"type": kind, "text": m["content"]}]})
    out: dict[str, Any] = {"input": items, "max_output_tokens": body["max_tokens"]}
    if head:
        out["instructions"] = messages[0]["content"]
    for key in ("temperature", "stream"):
        if key in body:
            out[key] = body[key]
    return out


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU time so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def first_text(client: httpx.Client, url: str, body: dict[str, Any]) -> float:
    """Seconds to the first text of a streamed answer (read to its end)."""
    marker = b"output_text.delta" if url.endswith(RESPONSES) else b'"content"'
    t0 = time.perf_counter()
    seen = None
    with client.stream("POST", url, json=body) as resp:
        assert resp.status_code == 200, resp.read()[:300]
        for chunk in resp.iter_raw():
            if seen is None and marker in chunk:
                seen = time.perf_counter() - t0
    assert seen is not None, "no text in the answer"
    return seen


def whole(client: httpx.Client, url: str, body: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    resp = client.post(url, json=body)
    assert resp.status_code == 200, resp.text[:300]
    return time.perf_counter() - t0


Timer = Callable[[httpx.Client, str, dict[str, Any]], float]


def cpu_batches(
    client: httpx.Client, proxy: tuple[int, str], bodies: dict[str, dict[str, Any]], args: Any
) -> dict[str, list[float]]:
    """CPU ms per request of each route, one figure per batch (the routes alternate)."""
    pid, url = proxy
    timer: Timer = first_text if next(iter(bodies.values())).get("stream") else whole
    rng = random.Random(args.seed)
    per: dict[str, list[float]] = {path: [] for path in bodies}
    for _ in range(args.batches):
        order = list(bodies)
        rng.shuffle(order)
        for path in order:
            before = cpu_seconds(pid)
            for _ in range(args.batch):
                timer(client, url + path, bodies[path])
            per[path].append(1000 * (cpu_seconds(pid) - before) / args.batch)
    return per


def wall_pairs(
    client: httpx.Client, url: str, bodies: dict[str, dict[str, Any]], args: Any
) -> list[float]:
    """Per pair: Responses' time minus chat's, in ms."""
    timer: Timer = first_text if bodies[CHAT].get("stream") else whole
    rng = random.Random(args.seed + 1)
    diffs = []
    for _ in range(args.pairs):
        order = list(bodies)
        rng.shuffle(order)
        got = {path: timer(client, url + path, bodies[path]) for path in order}
        diffs.append(1000 * (got[RESPONSES] - got[CHAT]))
    return diffs


def row(name: str, cpu: dict[str, list[float]], diffs: list[float]) -> str:
    """One table row: CPU per request over all batches, the median paired ratio, the wall
    pairs' median difference."""
    chat, resp = statistics.fmean(cpu[CHAT]), statistics.fmean(cpu[RESPONSES])
    ratios = [r / c for c, r in zip(cpu[CHAT], cpu[RESPONSES], strict=True) if c > 0]
    return (
        f"| {name} | {chat:.2f} | {resp:.2f} | {statistics.median(ratios):.2f} "
        f"| {statistics.median(diffs):+.2f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream")
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    stub = None
    upstream = args.upstream
    if upstream is None:
        stub, upstream = start_stub()
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    proc, url = start_proxy(upstream, tempfile.mkdtemp(prefix="offload-bench-"))
    try:
        chat = {"messages": fifty_messages(), "max_tokens": 1, "temperature": 0}
        rows = []
        with httpx.Client(timeout=600) as client:
            for name, stream in (("whole answer", False), ("streamed", True)):
                body = {**chat, "stream": True} if stream else chat
                bodies = {CHAT: body, RESPONSES: as_responses(body)}
                for path, b in bodies.items():  # warm both routes
                    whole(client, url + path, {**b, "stream": False})
                cpu = cpu_batches(client, (proc.pid, url), bodies, args)
                rows.append(row(name, cpu, wall_pairs(client, url, bodies, args)))
    finally:
        proc.terminate()
        proc.wait(15)
        if stub is not None:
            stub.terminate()
            stub.wait(15)
    cmd = "python bench/bench_responses.py " + " ".join(sys.argv[1:])
    print(
        "\n".join(
            [
                f"## The Responses route against the chat route ({dt.date.today().isoformat()})",
                "",
                f"Command: `{cmd.strip()}`  ",
                f"Machine: {machine()}  ",
                f"Upstream: {'instant stub' if stub is not None else upstream}; "
                f"{args.batches} batches of {args.batch} requests per route, "
                f"{args.pairs} wall pairs; load average before the run: {load}.",
                "",
                "| 50-message request | chat: proxy CPU ms/request | Responses: proxy CPU "
                "ms/request | Responses / chat (paired) | wall: Responses - chat, median ms |",
                "|---|---|---|---|---|",
                *rows,
            ]
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
