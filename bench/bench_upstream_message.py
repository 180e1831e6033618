"""What one oversized message from an upstream MCP server costs ``offload gateway``.

``offload gateway`` (stdio) runs in its own process with its own OFFLOAD_HOME and two
upstreams: ``big``, a hostile one that answers its tool's call with one message of
``--mib`` MiB, and ``ok``, a well-behaved one. The SDK's stdio client calls ``big__probe``
(timed, the answer's first line shown), then ``ok__probe``; the summary gives the
gateway's peak RSS (VmHWM) before and after the call, and whether it still served ``ok``.

Upstreams (``tests/gateway``'s hand-written peers, no SDK on their side):

- ``stdio``: a child writing the answer as one line on stdout (``raw_server.py``);
- ``json``: a Streamable HTTP server on loopback answering with one JSON body
  (``raw_http_server.py``);
- ``sse``: the same answering with one server-sent event.

Usage (this tree beside another, alternating, in one run):

    python bench/bench_upstream_message.py --mib 300 --baseline-src OTHER/src

``--limit-mb N`` sets ``[gateway] max_upstream_message_mb`` (a tree without the setting
ignores it); ``--timeout-s`` the call timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp.client.stdio import StdioServerParameters, stdio_client

from mcp import Client

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "tests" / "gateway"


def peak_kb(pid: int) -> int:
    """The process's peak resident set (VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmHWM for {pid}")


def gateway_pid(parent: int) -> int:
    """The ``offload gateway`` child of this process (the SDK spawned it)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmd = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"offload.cli.main" in cmd:
                return int(entry.name)
    raise RuntimeError("the gateway process was not found")


def upstream_config(kind: str, mib: int, work: Path) -> tuple[str, subprocess.Popen[bytes] | None]:
    """The ``[servers.big]`` table for ``kind``, and the HTTP server process if any."""
    if kind == "stdio":
        args = [str(PEERS / "raw_server.py"), "huge-result", str(mib)]
        return f"command = {sys.executable!r}\nargs = {json.dumps(args)}\n", None
    port_file = work / f"port-{kind}"
    port_file.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, str(PEERS / "raw_http_server.py"), kind, str(mib), str(port_file)]
    )
    deadline = time.monotonic() + 30
    while not port_file.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("the HTTP upstream did not start")
        time.sleep(0.05)
    return f'url = "http://127.0.0.1:{port_file.read_text()}/mcp"\n', proc


async def one_run(src: Path, kind: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    table, http = upstream_config(kind, args.mib, work)
    config = work / "gateway.toml"
    # a tree without the setting refuses it as unknown: it gets none
    knows = "max_upstream_message_mb" in (src / "offload" / "config.py").read_text()
    limit = f"max_upstream_message_mb = {args.limit_mb}\n" if knows else ""
    config.write_text(
        f"[gateway]\ncall_timeout_s = {args.timeout_s}\n{limit}\n[servers.big]\n{table}\n"
        f"[servers.ok]\ncommand = {sys.executable!r}\n"
        f"args = {json.dumps([str(PEERS / 'raw_server.py'), 'plain'])}\n"
    )
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(work),
        "OFFLOAD_HOME": str(work / "home"),
        "PYTHONPATH": str(src),
    }
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "offload.cli.main", "gateway", "--config", str(config)],
        env=env,
    )
    out: dict[str, Any] = {"kind": kind}
    try:
        async with Client(stdio_client(params), mode="legacy") as client:
            pid = gateway_pid(os.getpid())
            out["peak_before_mb"] = peak_kb(pid) / 1024
            start = time.monotonic()
            result = await client.call_tool("big__probe", {})
            out["seconds"] = round(time.monotonic() - start, 1)
            text = getattr(result.content[0], "text", "") if result.content else ""
            out["answer"] = ("error: " if result.is_error else "ok: ") + text[:160]
            out["peak_after_mb"] = peak_kb(pid) / 1024
            ok = await client.call_tool("ok__probe", {})
            out["ok_served"] = not ok.is_error
            if ok.is_error:
                out["ok_answer"] = getattr(ok.content[0], "text", "")[:160]
    except Exception as exc:  # noqa: BLE001 - a crashed gateway is a result here
        inner = exc.exceptions[0] if isinstance(exc, BaseExceptionGroup) else exc
        out["answer"] = f"gateway failed: {type(inner).__name__}: {inner}"[:200]
    finally:
        if http is not None:
            http.kill()
            http.wait()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=300)
    parser.add_argument("--limit-mb", type=int, default=64)
    parser.add_argument("--timeout-s", type=float, default=120)
    parser.add_argument("--kinds", default="stdio,json,sse")
    parser.add_argument("--baseline-src", type=Path, help="another tree's src/, run beside")
    args = parser.parse_args()
    trees = [("this", ROOT / "src")]
    if args.baseline_src is not None:
        trees.append(("baseline", args.baseline_src.resolve()))
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds.split(","):
            for name, src in trees:  # alternating: each kind on each tree in turn
                work = Path(tmp) / f"{name}-{kind}"
                work.mkdir()
                got = await one_run(src, kind, args, work)
                print(json.dumps({"tree": name, **got}), flush=True)


if __name__ == "__main__":
    anyio.run(main)
