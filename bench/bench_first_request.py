"""The first request a fresh proxy sees of a long session, beside another tree.

A client that connects to a proxy with no record of its session (a new proxy, another
process, a store of another machine) sends its whole history at once. This bench builds
such a history: ``--messages`` short messages (default 5,000; user and assistant turns,
every fifth turn a tool call and its output), each of them a little above or below the
stub threshold (``stub_ratio`` of n_ctx: 163 tokens at 8192), so that whether stubbing one
pays is a real question, and times that one request the way ``offload proxy`` serves it:
the texts the counter has not met counted first (``UpstreamCounter.warm``, four at a time),
then ``Pipeline.rewrite`` on a fresh store.

Counts come from a real llama.cpp's ``/tokenize`` (xllamacpp, SmolLM2-135M, in its own
process, as the proxy would ask it), or with ``--offline`` from the offline BPE counter.
Each round runs one fresh process per tree, in alternating order, so the two trees see
the same machine; ``/tokenize`` calls are the exact counts each tree asked for beyond
the warm-up (the stubs it rendered to price them, the range stubs). Both trees must
send the same wire: its sha256 is compared.

Usage: ``python bench/bench_first_request.py --baseline-src OTHER/src [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from offload.config import ProxySettings  # noqa: E402
from offload.core.tokens import default_counter  # noqa: E402
from realparts import LlamaServer, require_llama  # noqa: E402

N_CTX = 8192
# made-up syllables: words no tokenizer has whole
SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "po", "zi", "ve", "sha", "dro", "qua", "fen")


def _text(rng: random.Random, tokens: int, count: Callable[[str], int]) -> str:
    """Made-up prose of about ``tokens`` tokens (by ``count``)."""
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(8)]
    for _ in range(3):  # scaled to the count twice: within a few tokens of it
        have = max(1, count(" ".join(words)))
        want = max(1, round(len(words) * tokens / have))
        while len(words) < want:
            words.append("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))))
        del words[want:]
    return " ".join(words)


def session(messages: int, n_ctx: int = N_CTX, seed: int = 1) -> list[dict[str, Any]]:
    """A chat of about ``messages`` messages after a system prompt, each of 0.7 to 1.6
    times the stub threshold (by the offline BPE count)."""
    rng = random.Random(seed)
    count = default_counter().count
    threshold = max(1, int(ProxySettings().stub_ratio * n_ctx))

    def size() -> int:
        return int(threshold * rng.uniform(0.7, 1.6))

    out: list[dict[str, Any]] = [{"role": "system", "content": "You help with the project."}]
    turn = 0
    while len(out) <= messages:
        out.append({"role": "user", "content": _text(rng, size(), count)})
        if turn % 5 == 4:
            call = f"call_{turn}"
            args = json.dumps({"path": f"src/{_text(rng, 3, count).replace(' ', '_')}.py"})
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call,
                            "type": "function",
                            "function": {"name": "read_file", "arguments": args},
                        }
                    ],
                }
            )
            out.append({"role": "tool", "tool_call_id": call, "content": _text(rng, size(), count)})
        out.append({"role": "assistant", "content": _text(rng, size(), count)})
        turn += 1
    out = out[: messages + 1]
    if out[-1]["role"] != "user":  # a request ends with what the model answers
        out.append({"role": "user", "content": _text(rng, size(), count)})
    return out


def child(upstream: str | None, path: Path) -> dict[str, Any]:
    """The first request of the session in ``path`` on a fresh store, in this process (the
    tree first on its path)."""
    from offload.proxy.rewrite.messages import calls_text, content_text
    from offload.proxy.rewrite.pipeline import Pipeline
    from offload.proxy.transport.counting import UpstreamCounter
    from offload.store.store import Store

    msgs = json.loads(path.read_text(encoding="utf-8"))
    counter: Any = UpstreamCounter(upstream) if upstream else default_counter()
    asking = _Asking(counter)
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "s.db") as store:
        pipeline = Pipeline(store, ProxySettings(), asking)
        w0 = time.perf_counter()
        if upstream:
            counter.warm(t for m in msgs for t in (content_text(m), calls_text(m)))
        warm_s = time.perf_counter() - w0
        before = counter.cache_len() if upstream else 0
        asking.asked = 0
        c0, w0 = time.process_time(), time.perf_counter()
        result = pipeline.rewrite(msgs, N_CTX)
        rewrite_s = time.perf_counter() - w0
        cpu_s = time.process_time() - c0
        asked = counter.cache_len() - before if upstream else 0
        if upstream:
            counter.close()
    wire = json.dumps(result.messages, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return {
        "messages": len(msgs),
        "client_tokens": result.client_tokens,
        "wire_tokens": result.wire_tokens,
        "warm_s": round(warm_s, 3),
        "rewrite_s": round(rewrite_s, 3),
        "rewrite_cpu_s": round(cpu_s, 3),
        "tokenize_calls": asked,
        "counts_asked": asking.asked,
        "wire_sha256": hashlib.sha256(wire).hexdigest(),
    }


class _Asking:
    """A counter that counts how often it is asked (what the rewrite rendered and priced)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.asked = 0

    def count(self, text: str) -> int:
        self.asked += 1
        return int(self.inner.count(text))


def run_tree(src: Path | None, upstream: str | None, path: Path) -> dict[str, Any]:
    """:func:`child` in a fresh process with ``src`` (None: this tree) first on the path."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src.resolve())
    argv = [sys.executable, __file__, "--child", str(path)]
    if upstream:
        argv += ["--upstream", upstream]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def render(rows: list[dict[str, Any]], command: str, described: str, load: str) -> str:
    """The markdown table: medians over the rounds, per tree."""
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        "```",
        command,
        "```",
        "",
        f"{when}, load {load} -> {_load()}, {platform.python_implementation()} "
        f"{platform.python_version()}; counts from {described}.",
        "",
        "| tree | rounds | messages (tokens) | warm-up s | rewrite s | rewrite CPU s | "
        "counts asked in the rewrite (/tokenize calls) | wire tokens |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for tree in dict.fromkeys(r["tree"] for r in rows):
        mine = [r for r in rows if r["tree"] == tree]

        def med(key: str, rows: list[dict[str, Any]] = mine) -> float:
            return round(float(statistics.median(r[key] for r in rows)), 3)

        first = mine[0]
        out.append(
            f"| {tree} | {len(mine)} | {first['messages']:,} ({first['client_tokens']:,}) | "
            f"{med('warm_s')} | {med('rewrite_s')} | {med('rewrite_cpu_s')} | "
            f"{int(med('counts_asked')):,} ({int(med('tokenize_calls')):,}) | "
            f"{first['wire_tokens']:,} |"
        )
    same = len({r["wire_sha256"] for r in rows}) == 1
    out += ["", f"The wire of every run: {'the same bytes' if same else 'DIFFERS between runs'}."]
    return "\n".join(out)


def _load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-src", type=Path, help="another tree's src/, timed beside")
    parser.add_argument("--offline", action="store_true", help="the offline BPE counter")
    parser.add_argument("--upstream", help=argparse.SUPPRESS)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.upstream, args.child)))
        return 0
    load = _load()
    llama = None
    upstream = None
    described = "the offline BPE counter (cl100k)"
    if not args.offline:
        llama = LlamaServer(require_llama(), N_CTX).start()
        upstream = llama.base_url
        described = "a real llama.cpp's /tokenize (xllamacpp, SmolLM2-135M Q4_1, one thread)"
    trees: list[tuple[str, Path | None]] = [("this tree", None)]
    if args.baseline_src is not None:
        trees.append(("baseline", args.baseline_src))
    rows: list[dict[str, Any]] = []
    folder = tempfile.TemporaryDirectory(prefix="offload-first-")
    path = Path(folder.name) / "session.json"
    path.write_text(json.dumps(session(args.messages)), encoding="utf-8")
    try:
        for r in range(args.rounds):
            order = trees if r % 2 == 0 else trees[::-1]
            for name, src in order:
                row = {**run_tree(src, upstream, path), "tree": name}
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
    finally:
        folder.cleanup()
        if llama is not None:
            llama.stop()
    command = " ".join(["python bench/bench_first_request.py", *sys.argv[1:]])
    print(render(rows, command, described, load))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
