"""What transparent retrieval costs when the model does not use it: two proxies side by side
in one run, one offering the proxy's memory tools (``proxy.retrieval = "on"``) and one not
(``"off"``), in front of the same upstream, on the 50-message request of
``bench_proxy.py``.

Each measure runs ``--n`` pairs, one request to each proxy in random order (drifts in load
hit both alike): a whole answer (``max_tokens`` 1), the time to the first streamed byte, and
the time to the end of a stream. Reported: both p50s and the per-pair added time (median,
10 % trimmed mean, p90). With ``--stub`` the upstream is ``bench_proxy``'s instant stub (its
``/props`` says nothing of tools, so ``"auto"`` would offer them too), so the model's own
time drops out and only the proxy's remains; without it, SmolLM2-135M in xllamacpp (whose
template renders no tools: the tools go on the wire all the same with ``"on"``).

Usage: ``python bench/bench_retrieval.py [--stub | --upstream URL] [--n 300] [--seed 1]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_proxy import (
    CHAT,
    LlamaServer,
    fifty_messages,
    free_port,
    machine,
    pairs,
    pct,
    require_llama,
    row,
    start_stub,
    timed_post,
    timed_ttfb,
    wait_answering,
)


def timed_stream(client: httpx.Client, url: str, body: dict[str, Any]) -> float:
    """Seconds to the end of a streamed answer."""
    t0 = time.perf_counter()
    with client.stream("POST", url, json=body) as resp:
        assert resp.status_code == 200, resp.read()[:300]
        for _chunk in resp.iter_raw():
            pass
    return time.perf_counter() - t0


def start_proxy(upstream: str, home: str, retrieval: str) -> tuple[subprocess.Popen[bytes], str]:
    """``offload proxy`` in its own process with ``proxy.retrieval`` set."""
    port = free_port()
    env = {**os.environ, "OFFLOAD_HOME": home, "OFFLOAD_PROXY__RETRIEVAL": retrieval}
    cmd = [sys.executable, "-m", "offload.cli.main", "proxy", "--upstream", upstream]
    cmd += ["--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env)
    url = f"http://127.0.0.1:{port}"
    wait_answering(url + "/api/stats", 60, f"proxy ({retrieval}) up")
    return proc, url


def micro(rounds: int = 2000) -> list[str]:
    """The added code itself, in process (no sockets, so load noise stays small): offering
    the tools on the 50-message body, and filtering a 300-event stream that calls none."""
    from offload.proxy.retrieval.retrieval import NAMES
    from offload.proxy.retrieval.retrieval_loop import offer
    from offload.proxy.retrieval.retrieval_stream import RoundFilter

    body = {"messages": fifty_messages(), "max_tokens": 1, "temperature": 0}
    raw = json.dumps(body).encode()
    events = [
        b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":" word"}}],'
        b'"created":1,"id":"chatcmpl-x","model":"m","object":"chat.completion.chunk"}\n\n'
    ] * 299
    events.append(
        b'data: {"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"id":"chatcmpl-x",'
        b'"usage":{"prompt_tokens":900,"completion_tokens":300},"timings":{"cache_n":899}}\n\n'
    )
    names = frozenset(NAMES)

    def filtered() -> None:
        flt = RoundFilter(names, first_round=True, sent_text=False)
        for event in events:
            flt.feed(event)
        flt.close()
        flt.finish(flt.usage, "")

    out = []
    for what, fn in (
        (
            "offer the tools on the 50-message request (spliced bytes)",
            lambda: offer(body, raw, "on", None),
        ),
        ("filter a 300-event streamed answer that calls no tool", filtered),
    ):
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out.append(
            f"| {what} | {statistics.median(times) * 1e6:.1f} µs | {pct(times, 0.9) * 1000:.1f} µs |"
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream")
    parser.add_argument("--stub", action="store_true", help="bench_proxy's instant upstream")
    parser.add_argument("--n", type=int, default=300, help="pairs per measure")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--micro", action="store_true", help="only the in-process measures")
    args = parser.parse_args()
    if args.micro:
        load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
        print(
            f"Command: `python bench/bench_retrieval.py --micro` ({dt.date.today().isoformat()}), load {load}\n"
        )
        print("| in process | median | p90 |\n|---|---|---|")
        print("\n".join(micro()))
        return 0
    llama = stub = None
    upstream = args.upstream
    if args.stub:
        stub, upstream = start_stub()
        described = "bench_proxy's instant stub, in its own process"
    elif upstream is None:
        llama = LlamaServer(require_llama(), 8192).start()
        upstream = llama.base_url
        described = "llama.cpp (xllamacpp, SmolLM2-135M Q4_1, n_ctx 8192, 1 thread)"
    else:
        described = upstream
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    procs: list[subprocess.Popen[bytes]] = []
    try:
        off, off_url = start_proxy(upstream, tempfile.mkdtemp(prefix="offload-bench-"), "off")
        procs.append(off)
        on, on_url = start_proxy(upstream, tempfile.mkdtemp(prefix="offload-bench-"), "on")
        procs.append(on)
        msgs = fifty_messages()
        body = {"messages": msgs, "max_tokens": 1, "temperature": 0}
        sbody = {**body, "stream": True}
        rng = random.Random(args.seed)
        with httpx.Client(timeout=600) as to_off, httpx.Client(timeout=600) as to_on:
            for _ in range(3):  # warm both proxies and the upstream's prompt cache
                timed_post(to_off, off_url + CHAT, body)
                timed_post(to_on, on_url + CHAT, body)
            both = (to_off, to_on)
            whole = pairs(both, off_url, on_url, timed_post, [body] * args.n, rng)
            ttfb = pairs(both, off_url, on_url, timed_ttfb, [sbody] * args.n, rng)
            ends = pairs(both, off_url, on_url, timed_stream, [sbody] * args.n, rng)
            counters = to_on.get(on_url + "/api/stats").json()["live"]["counters"]
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(15)
        if llama is not None:
            llama.stop()
        if stub is not None:
            stub.terminate()
            stub.wait(15)
    assert counters["retrieval_rounds"] == 0, counters
    cmd = "python bench/bench_retrieval.py " + " ".join(sys.argv[1:])
    lines = [
        f"Command: `{cmd.strip()}` ({dt.date.today().isoformat()})  ",
        f"Machine: {machine()}  ",
        f"Upstream: {described}; two `offload proxy` processes (retrieval off, on); {args.n}"
        f" pairs per measure, random order within each pair (seed {args.seed}); load average"
        f" before the run: {load}.",
        "",
        "| measure | off p50 | on p50 | added: median of pair differences | added: 10 % "
        "trimmed mean | added p90 | target |",
        "|---|---|---|---|---|---|---|",
        row("50-message request, max_tokens 1", *whole, "nothing measurable"),
        row("streaming time to first byte", *ttfb, "nothing measurable"),
        row("streaming, time to the end", *ends, "nothing measurable"),
    ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
