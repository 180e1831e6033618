"""The serving process's C heap: few malloc arenas, large blocks in pages of their own,
freed memory handed back."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from offload.serve.heap import SERVING, trim_heap, tune_heap

glibc = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="malloc's arenas and thresholds are glibc's",
)
VARIABLES = tuple(name for _, _, name in SERVING)

# eight threads whose SQLite work allocates with the interpreter lock released, then the
# number of arenas glibc made (malloc_info's XML has one <heap> per arena)
THREADS_THEN_ARENAS = """
import ctypes, os, sqlite3, sys, threading
from offload.serve.heap import tune_heap
tuned = tune_heap(os.environ) if sys.argv[1] == "tune" else ()
start = threading.Barrier(8)
def work():
    start.wait()
    db = sqlite3.connect(":memory:")
    db.execute("create table t(b)")
    for _ in range(300):
        db.execute("insert into t values (randomblob(3000))")
    db.execute("select count(*) from t order by b").fetchall()
    db.close()
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL(None)
libc.open_memstream.restype = ctypes.c_void_p
buf, size = ctypes.c_char_p(), ctypes.c_size_t()
fp = ctypes.c_void_p(libc.open_memstream(ctypes.byref(buf), ctypes.byref(size)))
libc.malloc_info(0, fp)
libc.fclose(fp)
print(",".join(tuned) or "-", buf.value.decode().count("<heap nr="))
"""

# a 1 MiB block freed, then another: does the second get pages of its own (mmap)?
# (glibc's sliding threshold moves up to 1 MiB on the first free, so by default it does not)
FREE_THEN_ALLOCATE = """
import ctypes, os, sys
from offload.serve.heap import tune_heap
if sys.argv[1] == "tune":
    tune_heap(os.environ)
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.free(ctypes.c_void_p(libc.malloc(1 << 20)))
before = libc.mallinfo2().hblks
block = libc.malloc(1 << 20)
print(libc.mallinfo2().hblks - before)
"""


def run(script: str, mode: str, env: dict[str, str]) -> list[str]:
    return subprocess.run(
        [sys.executable, "-c", script, mode],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=120,
    ).stdout.split()


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in VARIABLES}


@glibc
def test_a_tuned_process_keeps_two_arenas_however_many_threads_allocate() -> None:
    tuned, arenas = run(THREADS_THEN_ARENAS, "tune", clean_env())
    assert "MALLOC_ARENA_MAX" in tuned.split(",")
    assert int(arenas) <= 2
    # the same threads without it spread over more (what the limit is for)
    _, untuned = run(THREADS_THEN_ARENAS, "none", clean_env())
    assert int(untuned) > int(arenas)


@glibc
def test_a_tuned_process_gives_a_large_block_its_own_pages_after_a_free() -> None:
    assert run(FREE_THEN_ALLOCATE, "tune", clean_env()) == ["1"]
    assert run(FREE_THEN_ALLOCATE, "none", clean_env()) == ["0"]


@glibc
def test_a_variable_the_user_set_is_left_to_glibc() -> None:
    assert tune_heap({"MALLOC_ARENA_MAX": "4", "MALLOC_MMAP_THRESHOLD_": "1"}) == ()
    tuned, _ = run(THREADS_THEN_ARENAS, "tune", {**clean_env(), "MALLOC_ARENA_MAX": "4"})
    assert tuned == "MALLOC_MMAP_THRESHOLD_"


def test_trimming_the_heap_is_safe_to_call_any_time() -> None:
    trim_heap()
    trim_heap()


# a server's modules imported, the startup frozen, then a cycle made and dropped
FROZEN_THEN_CYCLE = """
import gc, weakref
import offload.serve.host
from offload.serve.heap import freeze_startup
moved = freeze_startup()
class Cycle: pass
a = Cycle(); a.me = a
gone = weakref.ref(a)
del a
gc.collect()
print(moved, len(gc.get_objects()), gone() is None)
"""


def test_a_frozen_startup_is_left_out_of_collections_and_later_cycles_are_still_collected() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FROZEN_THEN_CYCLE], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    moved, tracked, collected = done.stdout.split()
    assert int(moved) > 20_000  # modules, classes, functions of the serving stack
    assert int(tracked) < 1_000  # what a full collection walks now
    assert collected == "True"
