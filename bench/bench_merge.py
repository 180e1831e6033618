"""What merging the in-memory index's segments costs: CPU and the memory held at the peak.

    python bench/bench_merge.py [--segments 12] [--rows 2500] [--against OLD/src]

A serving process indexes new chunks in small segments and merges them as they pile up
(``offload.store.search.memory.postings.merge``). This builds ``--segments`` segments of
``--rows`` synthetic chunks each (120 terms a chunk out of 30,000, a fixed seed), merges
them, and prints the postings, the CPU of the merge, the growth of traced memory at its
peak (``tracemalloc``: numpy's arrays and Python's objects) and the merged arrays' bytes.
``--against`` runs the same in another tree's source (a checkout's ``src``), in turns
with this one, twice each.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def rows(segments: int, per: int) -> list[list[tuple[int, str]]]:
    """The chunks of each segment: (id, cached counts as JSON), ids ascending."""
    rng = random.Random(1)
    out, chunk = [], 0
    for _ in range(segments):
        batch = []
        for _ in range(per):
            chunk += 1
            counts = {f"w{rng.randrange(30000)}": rng.randrange(1, 5) for _ in range(120)}
            batch.append((chunk, json.dumps({"": sum(counts.values()), **counts})))
        out.append(batch)
    return out


def measure(src: Path, segments: int, per: int) -> dict[str, float]:
    """One merge with ``src``'s postings module."""
    from offload.store.search.memory import postings

    assert Path(postings.__file__).resolve().is_relative_to(src.resolve()), postings.__file__
    built = [postings.Segment.build(batch) for batch in rows(segments, per)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    start = time.process_time()
    merged = postings.merge(built)
    cpu = time.process_time() - start
    peak = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    return {
        "postings": len(merged.docs),
        "cpu_ms": round(cpu * 1000, 1),
        "peak_mb": round(peak / 2**20, 1),
        "result_mb": round((merged.docs.nbytes + merged.freqs.nbytes) / 2**20, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, default=12)
    parser.add_argument("--rows", type=int, default=2500)
    parser.add_argument("--against", type=Path, help="another tree's src to run in turns")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # a child's own tree
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(measure(args.one, args.segments, args.rows)))
        return 0
    trees = [("this tree", SRC)] + ([("against", args.against)] if args.against else [])
    for _round in range(2):
        for name, src in trees:
            cmd = [sys.executable, __file__, "--one", str(src)]
            cmd += ["--segments", str(args.segments), "--rows", str(args.rows)]
            env = {**os.environ, "PYTHONPATH": str(src)}  # that tree's offload, not the installed
            done = subprocess.run(
                cmd, capture_output=True, text=True, check=True, timeout=600, env=env
            )
            got = json.loads(done.stdout)
            print(
                f"{name:10} {got['postings']:,} postings: merge {got['cpu_ms']:7.1f} ms CPU, "
                f"peak +{got['peak_mb']:6.1f} MB, merged arrays {got['result_mb']:5.1f} MB"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
