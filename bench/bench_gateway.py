"""Gateway benchmarks: catalog compression, tool-search hit rate, pass-through overhead,
response indexing time. Figures go to docs/benchmarks/gateway.md.

    python bench/bench_gateway.py [--calls 300]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types

from mcp import Client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "gateway"))

from catalog_server import build  # noqa: E402
from github_tasks import TASKS  # noqa: E402

from offload.config import GatewaySettings  # noqa: E402
from offload.gateway import index_tools  # noqa: E402
from offload.gateway.catalog import Budget, ServerCatalog, plan_catalog, wire_size  # noqa: E402
from offload.gateway.config import GatewayConfig, ServerConfig  # noqa: E402
from offload.gateway.responses import index_response  # noqa: E402
from offload.gateway.server import Gateway  # noqa: E402
from offload.gateway.toolsearch import ToolIndex, doc_for  # noqa: E402
from offload.store.store import Store  # noqa: E402

# the catalogs the repository ships (--catalogs DIR for others)
CATALOGS = Path(__file__).resolve().parents[1] / "tests" / "data" / "catalogs"


def catalog_figures() -> dict[str, Any]:
    """GitHub's catalog before and after compression (what tools/list + instructions carry)."""
    data = json.loads((CATALOGS / "github-mcp-server.json").read_text())
    tools = tuple(types.Tool.model_validate(t) for t in data["tools"])
    settings = GatewaySettings()
    gateway_tools = index_tools.definitions(settings, with_call_tool=True)
    plan = plan_catalog([ServerCatalog("github", tools)], Budget(), gateway_tools=gateway_tools)
    listed = wire_size([*plan.tools, *gateway_tools]) + len(plan.instructions.encode())
    return {
        "tools": len(tools),
        "raw_bytes": wire_size(list(tools)),
        "compressed_bytes": listed,
        "phases": plan.phases,
    }


def hit_rate() -> dict[str, Any]:
    """Share of task descriptions whose intended tool is in the top 3."""
    data = json.loads((CATALOGS / "github-mcp-server.json").read_text())
    index = ToolIndex.build(doc_for(f"github__{t['name']}", t) for t in data["tools"])
    misses = []
    hits = 0
    started = time.perf_counter()
    for task, wanted in TASKS:
        top = [d.name for d, _ in index.search(task, 3)]
        if any(w in top for w in wanted):
            hits += 1
        else:
            misses.append(task)
    per_query_ms = (time.perf_counter() - started) * 1000 / len(TASKS)
    return {
        "tasks": len(TASKS),
        "top3": hits,
        "rate": hits / len(TASKS),
        "misses": misses,
        "ms_per_query": per_query_ms,
    }


async def overhead(calls: int) -> dict[str, float]:
    """p50 of a small tool call straight to the upstream vs. through the gateway (in-process)."""
    upstream = build(CATALOGS / "mcp-server-git.json", "git", "", False)
    direct: list[float] = []
    via: list[float] = []
    async with Client(upstream, mode="legacy") as client:
        for _ in range(calls):
            t = time.perf_counter()
            await client.call_tool("git_status", {"repo_path": "/r"})
            direct.append(time.perf_counter() - t)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "b.db")

        def connect(handler: Any) -> Client:
            return Client(
                build(CATALOGS / "mcp-server-git.json", "git", "", False),
                mode="legacy",
                message_handler=handler,
            )

        gw = Gateway(
            GatewaySettings(),
            GatewayConfig((ServerConfig("git", command="(in-process)"),)),
            store,
            {"git": connect},
        )
        async with anyio.create_task_group() as tg:
            await gw.start(tg)
            async with Client(gw.server, mode="legacy") as client:
                for _ in range(calls):
                    t = time.perf_counter()
                    await client.call_tool("git__git_status", {"repo_path": "/r"})
                    via.append(time.perf_counter() - t)
            gw.stop()
        store.close()
    d, v = statistics.median(direct) * 1000, statistics.median(via) * 1000
    return {"direct_p50_ms": d, "gateway_p50_ms": v, "overhead_p50_ms": v - d}


def indexing(runs: int = 5) -> dict[str, float]:
    """Time to index a 1 MB text response (store write, preview, contents, placeholder)."""
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "b.db")
        settings = GatewaySettings()
        for run in range(runs):
            line = (
                f"run {run} "
                + "log entry: the service handled request with status 200 and latency 12ms\n"
            )
            text = "".join(f"{i:07d} {line}" for i in range(1_000_000 // (len(line) + 8)))
            result = types.CallToolResult(content=[types.TextContent(type="text", text=text)])
            t = time.perf_counter()
            _, info = index_response(
                result, store=store, settings=settings, label_base="bench__big", threshold=16384
            )
            times.append(time.perf_counter() - t)
            assert info is not None
        store.close()
    return {
        "bytes": len(text.encode()),
        "p50_ms": statistics.median(times) * 1000,
        "max_ms": max(times) * 1000,
    }


def main() -> None:
    """Run every benchmark and print JSON."""
    global CATALOGS  # a script's one data root
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--catalogs", type=Path, default=CATALOGS, help="catalog directory")
    args = parser.parse_args()
    CATALOGS = args.catalogs
    out = {
        "catalog": catalog_figures(),
        "tool_search": hit_rate(),
        "pass_through": anyio.run(overhead, args.calls),
        "indexing_1mb": indexing(),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
