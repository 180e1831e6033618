"""The shared cache type (``offload.core.lru.Lru``) against what it replaced and against a
well-kept library: is hand-writing it justified?

    python bench/bench_lru.py [--rounds 5]
    pip install cachetools && python bench/bench_lru.py   # adds cachetools.LRUCache

Times, in nanoseconds an operation, a cache hit (``get`` of a key kept) and a put that
evicts (a new key into a full cache), at 16,384 items (the proxy's token counts):

- ``Lru``: this project's type (its own lock, a weight bound, ``shrink``);
- ``OrderedDict + lock``: the pattern it replaced, written out at each call site;
- ``cachetools.LRUCache + lock`` when cachetools is installed (it is not thread-safe by
  itself, so a lock is taken around each operation as the proxy needs).

The three are timed in alternating rounds in one process; the median of the rounds is
printed.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from offload.core.lru import Lru

SIZE = 16384


class Ordered:
    """The hand-rolled pattern: an OrderedDict under a lock."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.items: OrderedDict[bytes, int] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: bytes) -> int | None:
        with self.lock:
            hit = self.items.get(key)
            if hit is not None:
                self.items.move_to_end(key)
            return hit

    def put(self, key: bytes, value: int) -> None:
        with self.lock:
            self.items[key] = value
            while len(self.items) > self.bound:
                self.items.popitem(last=False)


class Library:
    """cachetools.LRUCache under a lock."""

    def __init__(self, bound: int) -> None:
        import cachetools

        self.items: Any = cachetools.LRUCache(bound)
        self.lock = threading.Lock()

    def get(self, key: bytes) -> int | None:
        with self.lock:
            hit: int | None = self.items.get(key)
            return hit

    def put(self, key: bytes, value: int) -> None:
        with self.lock:
            self.items[key] = value


def timed(make: Callable[[int], Any], keys: list[bytes]) -> tuple[float, float]:
    """(ns a hit, ns an evicting put) for one cache made by ``make``."""
    cache = make(SIZE)
    for key in keys[:SIZE]:
        cache.put(key, 1)
    kept = keys[:SIZE]
    start = time.perf_counter()
    for _ in range(4):
        for key in kept:
            cache.get(key)
    hit = (time.perf_counter() - start) / (4 * len(kept))
    fresh = keys[SIZE:]
    start = time.perf_counter()
    for key in fresh:
        cache.put(key, 2)
    put = (time.perf_counter() - start) / len(fresh)
    return hit * 1e9, put * 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    caches: dict[str, Callable[[int], Any]] = {"Lru": Lru, "OrderedDict + lock": Ordered}
    try:
        import cachetools

        caches[f"cachetools {cachetools.__version__} LRUCache + lock"] = Library
    except ImportError:
        print("(cachetools not installed: `pip install cachetools` to compare with it)")
    keys = [f"key {n}".encode() for n in range(3 * SIZE)]
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in caches}
    for _ in range(args.rounds):
        for name, make in caches.items():
            results[name].append(timed(make, keys))
    print(f"{'cache':40} {'hit ns':>8} {'put ns':>8}   ({args.rounds} rounds, median)")
    for name, rows in results.items():
        hit = statistics.median(r[0] for r in rows)
        put = statistics.median(r[1] for r in rows)
        print(f"{name:40} {hit:8.0f} {put:8.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
