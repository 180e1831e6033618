"""The heaps of a long-running process: glibc's malloc (elsewhere those calls are no-ops)
and Python's cyclic garbage collector.

Two of glibc's defaults keep a serving process's memory up after a burst of load:

- Threads that contend for the heap get arenas of their own, up to eight per core. Worker
  threads come and go with the load and spread allocations over all of them; each arena
  keeps the free pages between its live blocks, which ``malloc_trim`` cannot hand back.
- A block of 128 KiB or more gets pages of its own (``mmap``), returned when freed, but
  each such free raises that threshold to the block's size (up to 32 MiB): from then on
  the large temporary buffers of searches, request bodies and SQLite come from the heap
  and leave holes in it.

A serving process therefore allows two arenas and fixes the threshold at 256 KiB (which
also stops its sliding). In 15-minute soaks (docs/benchmarks.md#soak) glibc's defaults
ended 44 % above the warm-up figure once the load stopped, two arenas 9-24 %, two arenas
and the fixed threshold 17 %, with the same throughput and latency: Python's interpreter
lock serialises most allocation anyway.
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable, Mapping
from typing import Any

# mallopt's parameter numbers (glibc's malloc.h)
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
# what a serving process sets, each unless the environment variable glibc reads itself for
# it is set (then the user's figure stands): parameter, value, variable
SERVING = (
    (M_ARENA_MAX, 2, "MALLOC_ARENA_MAX"),
    (M_MMAP_THRESHOLD, 256 * 1024, "MALLOC_MMAP_THRESHOLD_"),
)


def _libc(name: str) -> Callable[..., Any] | None:
    """A function of the process's own C library, None when it has none by that name."""
    try:
        found: Callable[..., Any] = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    return found


def tune_heap(
    env: Mapping[str, str], settings: tuple[tuple[int, int, str], ...] = SERVING
) -> tuple[str, ...]:
    """Apply ``settings`` (:data:`SERVING`) with ``mallopt``, each unless ``env`` sets its
    variable. Call it first thing in a process that will serve, before worker threads
    start. The variables of the settings applied (none off glibc)."""
    mallopt = _libc("mallopt")
    if mallopt is None:
        return ()
    return tuple(
        name for param, value, name in settings if name not in env and mallopt(param, value)
    )


def trim_heap() -> None:
    """Return the C heap's free memory to the system (glibc ``malloc_trim``): freed pages
    otherwise stay in the resident size until the heap needs them again."""
    trim = _libc("malloc_trim")
    if trim is not None:
        trim(0)


def freeze_startup() -> int:
    """Collect once, then move every object alive now (modules, classes, functions: what
    starting a server made) to the collector's permanent generation; how many moved.

    A full collection walks every tracked object, and a serving process starts with
    ~100,000 of them that live as long as it does: each full collection under load paused
    every request for tens of milliseconds to walk them again (``bench/bench_gc.py``).
    Frozen, they are never walked; what requests create afterwards is collected as before.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
