"""Gateway start: how often it plans its catalog, and how long until tool search is ready.

    python bench/bench_gateway_start.py --catalogs DATA/catalogs [--tool-model] [--runs 3]

Every catalog in ``--catalogs`` becomes an in-process upstream (tests/gateway's catalog
server, no subprocess start-up), and a gateway starts over a fresh store in a temp dir.
Per run: the catalog plans made by the start (``Gateway.refresh_catalog`` calls), the
seconds ``start`` took (search ranks from then on), and with ``--tool-model`` the seconds
until the MiniLM tool index was swapped in (every text embedded: a fresh store saves none).
Prints the medians and the load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from mcp import Client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "gateway"))

from catalog_server import build  # noqa: E402

from offload.config import GatewaySettings  # noqa: E402
from offload.gateway.config import GatewayConfig, ServerConfig  # noqa: E402
from offload.gateway.server import Gateway  # noqa: E402
from offload.llm.minilm import load_tool_encoder  # noqa: E402
from offload.store.store import Store  # noqa: E402


def connector(path: Path) -> Any:
    server = build(path, path.stem, "", False, 0, 0)
    return lambda handler: Client(server, mode="legacy", message_handler=handler)


async def one_start(catalogs: list[Path], tool_model: bool) -> tuple[int, float, float]:
    """(plans, seconds to start, seconds until the strong index is in: 0 without it)."""
    plans = 0
    real = Gateway.refresh_catalog

    async def counted(self: Gateway, *, notify: bool = True) -> None:
        nonlocal plans
        plans += 1
        await real(self, notify=notify)

    Gateway.refresh_catalog = counted  # type: ignore[method-assign]
    encoder = load_tool_encoder() if tool_model else None
    if tool_model and encoder is None:
        raise SystemExit("--tool-model needs pip install '.[tools]'")
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "offload.db") as store:
        configs = tuple(ServerConfig(name=p.stem, command="(in-process)") for p in catalogs)
        gw = Gateway(
            GatewaySettings(catalog_threshold=1),
            GatewayConfig(configs, {}),
            store,
            {p.stem: connector(p) for p in catalogs},
            encoder,
        )
        t = time.perf_counter()
        async with anyio.create_task_group() as tg:
            await gw.start(tg)
            started = time.perf_counter() - t
            strong = 0.0
            if encoder is not None:
                while gw.tool_index is None or gw.tool_index.strong is None:
                    await anyio.sleep(0.05)  # polling the swap: a benchmark, not a test
                strong = time.perf_counter() - t
            gw.stop()
    Gateway.refresh_catalog = real  # type: ignore[method-assign]
    return plans, started, strong


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--catalogs", type=Path, required=True, help="a directory of *.json catalogs")
    ap.add_argument("--tool-model", action="store_true", help="with the MiniLM tool index")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    catalogs = sorted(args.catalogs.glob("*.json"))
    results = [anyio.run(one_start, catalogs, args.tool_model) for _ in range(args.runs)]
    plans = [r[0] for r in results]
    print(
        f"{len(catalogs)} upstreams: plans per start {plans}, start median "
        f"{statistics.median(r[1] for r in results):.2f} s "
        f"({', '.join(f'{r[1]:.2f}' for r in results)}), MiniLM index in median "
        f"{statistics.median(r[2] for r in results):.1f} s "
        f"({', '.join(f'{r[2]:.1f}' for r in results)}); load {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
