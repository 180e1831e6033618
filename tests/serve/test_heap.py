"""The serving process's C heap: few malloc arenas, freed memory handed back."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from offload.serve.heap import ARENA_ENV, cap_arenas, trim_heap

glibc = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="malloc arenas are glibc's",
)

# eight threads whose SQLite work allocates with the interpreter lock released, then the
# number of arenas glibc made (malloc_info's XML has one <heap> per arena)
THREADS_THEN_ARENAS = """
import ctypes, os, sqlite3, sys, threading
from offload.serve.heap import cap_arenas
capped = cap_arenas(os.environ) if sys.argv[1] == "cap" else False
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
print(capped, buf.value.decode().count("<heap nr="))
"""


def arenas_after_threads(mode: str, env: dict[str, str]) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", THREADS_THEN_ARENAS, mode],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=120,
    ).stdout.split()
    return out[0], int(out[1])


def clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != ARENA_ENV}


@glibc
def test_capped_process_keeps_two_arenas_however_many_threads_allocate() -> None:
    capped, arenas = arenas_after_threads("cap", clean_env())
    assert capped == "True"
    assert arenas <= 2
    # without the cap the same threads spread over more (what the cap is for)
    _, uncapped = arenas_after_threads("none", clean_env())
    assert uncapped > arenas


@glibc
def test_users_own_malloc_arena_max_is_left_to_glibc() -> None:
    assert cap_arenas({ARENA_ENV: "4"}) is False
    capped, _ = arenas_after_threads("cap", {**clean_env(), ARENA_ENV: "4"})
    assert capped == "False"


def test_no_arenas_asked_sets_no_limit() -> None:
    assert cap_arenas({}, arenas=0) is False


def test_trimming_the_heap_is_safe_to_call_any_time() -> None:
    trim_heap()
    trim_heap()
