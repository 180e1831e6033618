"""Proxy overhead against a real llama.cpp server, direct and proxied side by side in one run.

- latency: a 50-message chat request (tau-bench messages, trimmed so the proxy forwards them
  unchanged and both paths send the same prompt), ``max_tokens`` 1.
- TTFB: time to the first streamed byte of the same request with ``stream``.
- TTFB, new turn: as above, but each pair ends in a user message never seen before, so the
  proxy must count it (one ``/tokenize`` call); the upstream's prompt cache is warmed with
  that prompt first (untimed) so both paths find it cached alike.
- TTFB, a real next turn: each of those requests goes through the proxy first (untimed,
  up to 12 tokens), and the timed pair sends it again with the model's answer as the
  assistant message and a new user message after it, as an agent's next request does
  (the proxy counted the answer while relaying it, so only the new message waits for a
  count).
- concurrency: 64 streaming clients at once through one proxy; every stream must be
  complete (``[DONE]``), carry one completion id of its own, and no id may appear twice.

Each measure runs ``--n`` pairs: one direct and one proxied request in random order, so
drifts in machine load and in the upstream hit both alike. Reported: the median of the
per-pair differences, a 10 % trimmed mean of them, and their p90 and p95.

Connections are those a real client has: kept alive to the proxy (uvicorn keeps them) and
to the upstream for plain answers, but a fresh one to the upstream for every stream, since
llama-server closes its connection after each streamed answer (while advertising
keep-alive; a client that reuses it fails now and then with "Server disconnected without
sending a response"). The proxy pays that upstream connect on streams just as a direct
client does.

Usage: ``python bench/bench_proxy.py [--upstream URL | --stub] [--n 300] [--clients 64]
[--seed 1] [--append docs/benchmarks/proxy.md]``. Without ``--upstream`` it starts SmolLM2-135M in
xllamacpp (n_ctx 8192, one thread). ``--stub`` puts an instant llama-like upstream in its own
process instead (canned chunked SSE, connection closed after each stream, ``/props`` and
``/tokenize``): the model's own time and noise drop out, leaving the proxy's. The proxy runs
as ``offload proxy`` in its own process.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from realparts import LlamaServer, free_port, require_llama, wait_until  # noqa: E402

# a trace the repository ships (--trace FILE for another)
TRACES = ROOT / "tests" / "data" / "traces" / "taubench_gpt4o_airline.jsonl"
CHAT = "/v1/chat/completions"


def fifty_messages() -> list[dict[str, Any]]:
    """50 real messages (user/assistant text only, each trimmed to 200 characters)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are an airline agent."}]
    with TRACES.open() as fh:
        for line in fh:
            for msg in json.loads(line)["messages"]:
                if msg["role"] in ("user", "assistant") and isinstance(msg.get("content"), str):
                    if out[-1]["role"] == msg["role"]:
                        continue
                    out.append({"role": msg["role"], "content": msg["content"][:200]})
                if len(out) == 50:
                    return out if out[-1]["role"] == "user" else [*out[:-1], out[1]]
    raise SystemExit("not enough trace messages")


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) in milliseconds."""
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def trimmed_mean(values: list[float], cut: float = 0.1) -> float:
    """The mean without the lowest and highest ``cut`` share, in milliseconds."""
    ordered = sorted(values)
    k = int(len(ordered) * cut)
    kept = ordered[k : len(ordered) - k] or ordered
    return 1000 * statistics.fmean(kept)


def timed_post(client: httpx.Client, url: str, body: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    resp = client.post(url, json=body)
    dt_ = time.perf_counter() - t0
    assert resp.status_code == 200, resp.text[:300]
    return dt_


def timed_ttfb(client: httpx.Client, url: str, body: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    with client.stream("POST", url, json=body) as resp:
        assert resp.status_code == 200, resp.read()[:300]
        chunks = resp.iter_raw()
        next(chunks)
        first = time.perf_counter() - t0
        for _chunk in chunks:
            pass
    return first


Timer = Callable[[httpx.Client, str, dict[str, Any]], float]  # timed_post or timed_ttfb
FAILED: dict[str, int] = {"direct": 0, "proxy": 0}  # requests that failed, per path


def attempt(timer: Timer, client: httpx.Client, url: str, body: dict[str, Any]) -> float | None:
    """The time, or None when the request failed (counted in FAILED, the pair dropped)."""
    try:
        return timer(client, url, body)
    except (AssertionError, httpx.HTTPError) as exc:
        print(f"failed: {url}: {exc!r}"[:300], file=sys.stderr)
        return None


def pairs(
    clients: tuple[httpx.Client, httpx.Client],
    upstream: str,
    proxy_url: str,
    timer: Timer,
    bodies: list[dict[str, Any]],
    rng: random.Random,
    warm: bool = False,
) -> tuple[list[float], list[float]]:
    """(direct, proxied) times of one pair per body, in random order within each pair;
    ``clients``: (to the upstream, to the proxy)."""
    to_upstream, to_proxy = clients
    direct: list[float] = []
    proxied: list[float] = []
    for body in bodies:
        if warm:  # put this prompt in the upstream's cache before either path is timed
            timed_post(to_upstream, upstream + CHAT, {**body, "stream": False})
        order = [(to_upstream, upstream, "direct"), (to_proxy, proxy_url, "proxy")]
        rng.shuffle(order)
        got: dict[str, float | None] = {}
        for client, base, path in order:
            got[path] = attempt(timer, client, base + CHAT, body)
            FAILED[path] += got[path] is None
        d, p = got["direct"], got["proxy"]
        if d is not None and p is not None:
            direct.append(d)
            proxied.append(p)
    return direct, proxied


def next_turns(
    client: httpx.Client, proxy_url: str, firsts: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """An agent's next requests: each first request goes through the proxy (streamed,
    untimed) and its answer comes back as the assistant message before a new user message."""
    out = []
    for i, first in enumerate(firsts):
        answer = []
        with client.stream("POST", proxy_url + CHAT, json={**first, "max_tokens": 12}) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: {"):
                    for choice in json.loads(line[6:]).get("choices") or ():
                        answer.append((choice.get("delta") or {}).get("content") or "")
        messages = [
            *first["messages"],
            {"role": "assistant", "content": "".join(answer)},
            {"role": "user", "content": f"Thanks. What next? ({i})"},
        ]
        out.append({**first, "messages": messages})
    return out


def row(name: str, direct: list[float], proxied: list[float], target: str) -> str:
    """One table row: p50s of both paths, then the per-pair added time."""
    diff = [p - d for p, d in zip(proxied, direct, strict=True)]
    return (
        f"| {name} | {pct(direct, 0.5):.1f} ms | {pct(proxied, 0.5):.1f} ms "
        f"| {statistics.median(diff) * 1000:.2f} ms | {trimmed_mean(diff):.2f} ms "
        f"| {pct(diff, 0.9):.2f} ms | {pct(diff, 0.95):.2f} ms | {target} |"
    )


async def one_stream(client: httpx.AsyncClient, url: str, i: int) -> dict[str, Any]:
    body = {
        "messages": [{"role": "user", "content": f"Client {i}: name a colour and a number."}],
        "max_tokens": 8,
        "temperature": 0,
        "stream": True,
    }
    raw = b""
    async with client.stream("POST", url + CHAT, json=body) as resp:
        status = resp.status_code
        async for chunk in resp.aiter_raw():
            raw += chunk
    events = [e for e in raw.decode().split("\n\n") if e.startswith("data: ")]
    ids = {json.loads(e[6:])["id"] for e in events if e != "data: [DONE]"}
    return {"status": status, "done": events[-1] == "data: [DONE]" if events else False, "ids": ids}


async def concurrency(url: str, clients: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=clients + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        t0 = time.perf_counter()
        results = await asyncio.gather(*(one_stream(client, url, i) for i in range(clients)))
        elapsed = time.perf_counter() - t0
    all_ids = [i for r in results for i in r["ids"]]
    return {
        "clients": clients,
        "ok": sum(r["status"] == 200 and r["done"] and len(r["ids"]) == 1 for r in results),
        "unique_ids": len(set(all_ids)) == len(all_ids) == clients,
        "seconds": elapsed,
    }


STUB_SSE = [
    b'data: {"id":"stub","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n',
    b'data: {"id":"stub","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
    b'"timings":{"cache_n":5,"prompt_n":1}}\n\n',
    b"data: [DONE]\n\n",
]


def _stub_answer(path: bytes, body: bytes, n: int) -> tuple[bytes, bool]:
    """(the whole response, keep the connection) for the stub's ``n``-th request."""
    if path in (b"/props", b"/tokenize", b"/v1/chat/completions"):
        request = json.loads(body) if body else {}
        if path == b"/props":
            obj: dict[str, Any] = {"default_generation_settings": {"n_ctx": 8192}}
        elif path == b"/tokenize":
            obj = {"tokens": list(range(len(request["content"].split())))}
        elif request.get("stream"):
            head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            events = [c.replace(b'"stub"', b'"stub-%d"' % n) for c in STUB_SSE]
            chunks = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in events)
            # like llama-server: keep-alive advertised, connection closed after a stream
            head += b"keep-alive: timeout=5, max=100\r\ntransfer-encoding: chunked\r\n\r\n"
            return head + chunks + b"0\r\n\r\n", False
        else:
            obj = {
                "id": "stub",
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "hi"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 1},
            }
        payload = json.dumps(obj).encode()
        status = b"200 OK"
    else:
        payload, status = b"{}", b"404 Not Found"
    head = b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    return head % (status, len(payload)) + payload, True


def serve_stub(port: int) -> None:
    """Serve the instant upstream on 127.0.0.1:``port`` until killed."""
    import itertools

    import uvloop

    counter = itertools.count()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                answer, keep = _stub_answer(head.split(b" ", 2)[1], body, next(counter))
                writer.write(answer)
                await writer.drain()
                if not keep:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    uvloop.run(main())


def start_stub() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve-stub", str(port)])
    url = f"http://127.0.0.1:{port}"
    wait_answering(url + "/props", 30, "stub upstream up")
    return proc, url


def start_proxy(upstream: str, home: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "OFFLOAD_HOME": home}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "offload.cli.main",
            "proxy",
            "--upstream",
            upstream,
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    wait_answering(url + "/api/stats", 60, "proxy up")
    return proc, url


def wait_answering(url: str, timeout_s: float, what: str) -> None:
    """Wait until ``url`` answers 200."""

    def up() -> bool:
        try:
            return httpx.get(url, timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(up, timeout_s, what=what)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def main() -> int:
    global TRACES  # a script's one data root
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream")
    parser.add_argument("--stub", action="store_true", help="an instant stub as the upstream")
    parser.add_argument("--serve-stub", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=300, help="pairs per measure")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--append", metavar="FILE")
    parser.add_argument("--trace", type=Path, default=TRACES, help="a tau-bench trace (JSONL)")
    args = parser.parse_args()
    TRACES = args.trace
    if args.serve_stub:
        serve_stub(args.serve_stub)
        return 0
    llama = None
    stub: subprocess.Popen[bytes] | None = None
    upstream = args.upstream
    if args.stub:
        stub, upstream = start_stub()
        described = "instant stub (canned chunked SSE, `--stub`), in its own process"
    elif upstream is None:
        llama = LlamaServer(require_llama(), 8192).start()
        upstream = llama.base_url
        described = "llama.cpp (xllamacpp, SmolLM2-135M Q4_1, n_ctx 8192, 1 thread)"
    else:
        described = upstream
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    home = tempfile.mkdtemp(prefix="offload-bench-")
    proxy, proxy_url = start_proxy(upstream, home)
    try:
        msgs = fifty_messages()
        body = {"messages": msgs, "max_tokens": 1, "temperature": 0}
        sbody = {**body, "stream": True}
        rng = random.Random(args.seed)
        fresh = [
            {
                **sbody,
                "messages": [
                    *msgs[:-1],
                    {"role": "user", "content": f"{msgs[-1]['content']} (turn {i})"},
                ],
            }
            for i in range(args.n)
        ]
        # connections as a real client has them (see the module docstring)
        fresh_limits = httpx.Limits(max_keepalive_connections=0)
        with (
            httpx.Client(timeout=600) as kept,
            httpx.Client(timeout=600, limits=fresh_limits) as fresh_conn,
            httpx.Client(timeout=600) as to_proxy,
        ):
            for _ in range(3):  # warm both paths and the upstream's prompt cache
                timed_post(kept, upstream + CHAT, body)
                timed_post(to_proxy, proxy_url + CHAT, body)
            stats = to_proxy.get(proxy_url + "/api/stats").json()["live"]["counters"]
            assert stats["stubs_made"] == 0 and stats["windowed"] == 0, stats
            assert stats["client_tokens"] == stats["wire_tokens"], stats
            n = args.n
            direct, proxied = pairs(
                (kept, to_proxy), upstream, proxy_url, timed_post, [body] * n, rng
            )
            streams = (fresh_conn, to_proxy)
            ttfb_d, ttfb_p = pairs(streams, upstream, proxy_url, timed_ttfb, [sbody] * n, rng)
            new_d, new_p = pairs(streams, upstream, proxy_url, timed_ttfb, fresh, rng, warm=True)
            turns = next_turns(to_proxy, proxy_url, fresh)
            next_d, next_p = pairs(streams, upstream, proxy_url, timed_ttfb, turns, rng, warm=True)
            stats = to_proxy.get(proxy_url + "/api/stats").json()["live"]["counters"]
            assert stats["stubs_made"] == 0 and stats["windowed"] == 0, stats
            assert stats["client_tokens"] == stats["wire_tokens"], stats
        conc = asyncio.run(concurrency(proxy_url, args.clients))
    finally:
        proxy.terminate()
        proxy.wait(15)
        if llama is not None:
            llama.stop()
        if stub is not None:
            stub.terminate()
            stub.wait(15)
    cmd = "python bench/bench_proxy.py " + " ".join(sys.argv[1:])
    lines = [
        f"## Proxy overhead ({dt.date.today().isoformat()})",
        "",
        f"Command: `{cmd.strip()}`  ",
        f"Machine: {machine()}  ",
        f"Upstream: {described}; proxy: `offload proxy` in its own process; {args.n} pairs per measure, random order "
        f"within each pair (seed {args.seed}); load average before the run: {load}.",
        "",
        "| measure | direct p50 | proxy p50 | added: median of pair differences | added: 10 % "
        "trimmed mean | added p90 | added p95 | target |",
        "|---|---|---|---|---|---|---|---|",
        row("50-message request, max_tokens 1", direct, proxied, "p50 < 5 ms"),
        row("streaming time to first byte", ttfb_d, ttfb_p, "< 2 ms"),
        row("streaming TTFB, new last message each pair", new_d, new_p, "(< 2 ms)"),
        row(
            "streaming TTFB, a real next turn (the model's answer + a new message)",
            next_d,
            next_p,
            "(< 2 ms)",
        ),
        "",
        f"Failed requests (their pairs left out): direct {FAILED['direct']}, "
        f"through the proxy {FAILED['proxy']}.",
        "",
        f"Concurrency: {conc['clients']} streaming clients at once through one proxy: "
        f"{conc['ok']}/{conc['clients']} complete single-id streams, ids unique across "
        f"clients: {conc['unique_ids']}, {conc['seconds']:.1f} s in all (the upstream "
        "serves one slot at a time).",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.append:
        path = Path(args.append)
        if not path.exists():
            path.write_text("# Benchmarks\n\n")
        with path.open("a") as fh:
            fh.write("\n" + text)
    ok = conc["ok"] == conc["clients"] and conc["unique_ids"] and not FAILED["proxy"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
