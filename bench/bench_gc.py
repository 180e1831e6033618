"""What a full collection of Python's cyclic garbage collector costs in a serving process,
before and after its startup objects are frozen (``offload.serve.heap.freeze_startup``).

    python bench/bench_gc.py [--rounds 7]

Builds what ``offload serve`` builds (every surface, over a store in a temporary home),
then times ``gc.collect()``: the best and the median of ``--rounds``, with the objects the
collector tracks, first as they are and then frozen. A full collection runs whenever the
old generation has grown enough; each one holds the interpreter lock, so every request
in flight waits for it.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def timed(rounds: int) -> tuple[float, float]:
    """(best, median) milliseconds of a full collection."""
    took = []
    for _ in range(rounds):
        start = time.perf_counter()
        gc.collect()
        took.append((time.perf_counter() - start) * 1000)
    return min(took), statistics.median(took)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ["OFFLOAD_HOME"] = home
        from offload.cli.common import open_store
        from offload.config import load_settings
        from offload.serve.heap import freeze_startup
        from offload.serve.host import build

        settings = load_settings()
        store = open_store(settings, serving=True)
        try:
            served = build(settings, store, cwd=Path(home))
            assert served.app is not None
            tracked = len(gc.get_objects())
            best, median = timed(args.rounds)
            print(
                f"as started: {tracked:7,} objects tracked, full collection {best:6.2f} ms best, {median:6.2f} median"
            )
            moved = freeze_startup()
            best, median = timed(args.rounds)
            tracked = len(gc.get_objects())
            print(
                f"frozen:     {tracked:7,} objects tracked ({moved:,} frozen), full collection {best:6.2f} ms best, {median:6.2f} median"
            )
        finally:
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
