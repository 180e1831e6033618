"""The proxy's chat hop, lean client against httpx, side by side in one run.

``offload.proxy.transport.http1`` (asyncio transports and httptools) carries chat completions to a
plain-HTTP upstream; httpx carries everything else. This measures what the lean client
saves on one hop: each pair sends the same chat request (a ~30 KB body) once through each
client, in random order, to the instant stub upstream of ``bench_proxy.py`` (its own
process: canned chunked SSE, connection closed after every stream like llama-server, kept
alive for plain answers). Each client is used as the proxy uses it: ``Http1Pool`` with
``prepare()`` as the request arrives; one ``httpx.AsyncClient`` through the proxy's
``send_upstream`` (``send(stream=True)``, one resend on a connection the upstream just
closed) and ``aiter_raw``. The event loop is uvloop's, as under ``offload serve``.

Reported per measure (streamed, plain): the median wall time of a request for each client,
the median of the per-pair differences and its p90, and each client's CPU per request in
this process (``time.process_time`` over the whole run of its requests).

Usage: ``python bench/bench_upstream_client.py [--n 1000] [--seed 1]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_proxy import fifty_messages, machine, start_stub
from offload.proxy.transport.forward import send_upstream
from offload.proxy.transport.http1 import Http1Pool

CHAT = "/v1/chat/completions"
Send = Callable[[bytes], Awaitable[int]]


def lean(pool: Http1Pool) -> Send:
    async def send(body: bytes) -> int:
        pool.prepare()
        reply = await pool.request("POST", CHAT, [("content-type", "application/json")], body)
        size = 0
        async for chunk in reply.aiter_raw():
            size += len(chunk)
        await reply.aclose()
        return size

    return send


def with_httpx(client: httpx.AsyncClient, url: str) -> Send:
    async def send(body: bytes) -> int:
        request = client.build_request(
            "POST", url + CHAT, content=body, headers={"content-type": "application/json"}
        )
        reply = await send_upstream(client, request)  # the proxy's one resend on a stale connection
        size = 0
        async for chunk in reply.aiter_raw():
            size += len(chunk)
        await reply.aclose()
        return size

    return send


async def measure(url: str, stream: bool, n: int, seed: int) -> dict[str, float]:
    body = json.dumps({"messages": fifty_messages(), "max_tokens": 1, "stream": stream}).encode()
    pool = Http1Pool(url, timeout_s=30, connect_timeout_s=5)
    client = httpx.AsyncClient(timeout=30)
    clients = {"lean": lean(pool), "httpx": with_httpx(client, url)}
    walls: dict[str, list[float]] = {"lean": [], "httpx": []}
    cpu = {"lean": 0.0, "httpx": 0.0}
    rng = random.Random(seed)
    try:
        for name in clients:  # warm both: first connects, imports, caches
            for _ in range(20):
                await clients[name](body)
        for _ in range(n):
            order = list(clients)
            rng.shuffle(order)
            for name in order:
                c0, t0 = time.process_time(), time.perf_counter()
                await clients[name](body)
                walls[name].append(time.perf_counter() - t0)
                cpu[name] += time.process_time() - c0
    finally:
        await pool.aclose()
        await client.aclose()
    diffs = sorted(h - w for h, w in zip(walls["httpx"], walls["lean"], strict=True))
    return {
        "lean_ms": statistics.median(walls["lean"]) * 1e3,
        "httpx_ms": statistics.median(walls["httpx"]) * 1e3,
        "saved_median_ms": statistics.median(diffs) * 1e3,
        "saved_p90_ms": diffs[int(0.9 * (len(diffs) - 1))] * 1e3,
        "lean_cpu_ms": cpu["lean"] / n * 1e3,
        "httpx_cpu_ms": cpu["httpx"] / n * 1e3,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="pairs per measure")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    stub, url = start_stub()
    try:
        print(f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {machine()}, n={args.n}")
        print("| measure | lean | httpx | saved (median of pairs) | p90 | CPU lean | CPU httpx |")
        print("|---|---|---|---|---|---|---|")
        for stream in (True, False):
            r = uvloop.run(measure(url, stream, args.n, args.seed))
            name = "streamed (new connection)" if stream else "plain (kept alive)"
            print(
                f"| {name} | {r['lean_ms']:.2f} ms | {r['httpx_ms']:.2f} ms"
                f" | {r['saved_median_ms']:.2f} ms | {r['saved_p90_ms']:.2f} ms"
                f" | {r['lean_cpu_ms']:.2f} ms | {r['httpx_cpu_ms']:.2f} ms |"
            )
    finally:
        stub.terminate()
        stub.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
