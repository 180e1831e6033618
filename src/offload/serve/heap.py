"""The C heap of a long-running process (glibc's malloc; elsewhere every call is a no-op).

glibc gives threads that contend for the heap arenas of their own, up to eight per core.
A server whose worker threads come and go with the load spreads its allocations over all of
them; each arena keeps its free pages between live blocks, so after a burst of load the
resident size stays up even once the freed memory is handed back (a soak's RSS after the
quiet kept ~35 % above its warm-up figure with glibc's default, 2 % with two arenas;
docs/benchmarks.md#soak). Python's interpreter lock serialises most allocation anyway, so
a couple of arenas cost no measurable throughput.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping
from typing import Any

# mallopt's parameter number for the arena limit (glibc's malloc.h: M_ARENA_MAX)
M_ARENA_MAX = -8
# the arenas a serving process allows itself: the main one and one for every worker
ARENAS = 2
# the environment variable glibc reads itself: when it is set, it decides
ARENA_ENV = "MALLOC_ARENA_MAX"


def _libc(name: str) -> Callable[..., Any] | None:
    """A function of the process's own C library, None when it has none by that name."""
    try:
        found: Callable[..., Any] = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    return found


def cap_arenas(env: Mapping[str, str], arenas: int = ARENAS) -> bool:
    """Allow glibc at most ``arenas`` malloc arenas from now on, unless ``env`` sets
    ``MALLOC_ARENA_MAX`` (then the user's figure stands). Call it first thing in a process
    that will serve, before worker threads start. Whether the limit was set."""
    if ARENA_ENV in env or arenas < 1:
        return False
    mallopt = _libc("mallopt")
    return mallopt is not None and bool(mallopt(M_ARENA_MAX, arenas))


def trim_heap() -> None:
    """Return the C heap's free memory to the system (glibc ``malloc_trim``): freed pages
    otherwise stay in the resident size until the heap needs them again."""
    trim = _libc("malloc_trim")
    if trim is not None:
        trim(0)
