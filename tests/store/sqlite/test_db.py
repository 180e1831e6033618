"""Opening, migrating and writing the SQLite file: a fresh store opened by several processes
at once, a lock held too long, a full disk. Every failure is a one-line offload error."""

from __future__ import annotations

import base64
import os
import random
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from offload.config import StoreSettings
from offload.core.tokens import EstimateCounter
from offload.errors import StoreBusy, StoreError
from offload.store.life.maintenance import doctor
from offload.store.store import Store
from realparts import child_env, release_together, require

# A child that imports everything first, says "ready", waits for "go" on stdin, then runs
# ``offload add`` through the real entry point: all children start their first open together.
ADD_AT_GO = """
import sys
from offload.cli.main import main
print("ready", flush=True)
sys.stdin.readline()
sys.exit(main(["add", "--topic", sys.argv[1], "text from " + sys.argv[1]]))
"""


@pytest.mark.slow  # 18 real CLI processes: seconds of start-up each on a loaded machine
def test_several_processes_adding_at_once_to_a_fresh_home_all_succeed(tmp_path: Path) -> None:
    for attempt in range(3):  # a fresh home each time: the race is in the first migration
        home = tmp_path / f"home{attempt}"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", ADD_AT_GO, f"p{i}"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=child_env(home),
                cwd=tmp_path,
            )
            for i in range(6)
        ]
        release_together(procs, timeout=120)
        with Store(home / "offload.db", counter=EstimateCounter()) as store:
            assert store.count() == 6


def test_a_fresh_file_locked_past_the_busy_timeout_is_store_busy(tmp_path: Path) -> None:
    path = tmp_path / "offload.db"
    holder = sqlite3.connect(str(path), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # still in rollback mode: as during another's creation
    try:
        with pytest.raises(StoreBusy, match="store is busy"):
            Store(path, StoreSettings(busy_timeout_s=0.2))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with Store(path, counter=EstimateCounter()) as store:  # and it opens once the lock goes
        assert store.put("after the lock").created


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MB tmpfs (mounting needs root, as CI has): a disk that really fills up.

    Small on purpose: an empty store takes ~300 KB of it, so a write of 1.5 MB that zstd
    cannot shrink overflows it as surely as a bigger one overflows a bigger disk, and
    analysing the body for the index (the cost of these tests) stays a quarter of it."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    require(done.returncode == 0, f"a 1 MB tmpfs ({done.stderr.strip() or 'mount failed'})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def incompressible(nbytes: int) -> str:
    """Text that zstd cannot shrink much (base64 of random bytes), fixed by the seed."""
    rng = random.Random(5)
    return base64.b64encode(rng.randbytes(nbytes * 3 // 4)).decode()


@pytest.mark.slow
def test_a_large_write_to_a_full_disk_fails_cleanly_and_loses_nothing(small_disk: Path) -> None:
    with Store(small_disk / "offload.db", counter=EstimateCounter()) as store:
        kept = store.put("acknowledged before the disk filled").entry
        with pytest.raises(StoreError, match=r"full.*nothing was saved") as caught:
            store.put(incompressible(1_500_000))
        assert not isinstance(caught.value, StoreBusy)
        assert store.count() == 1
        assert store.body(store.resolve(kept.ref)) == "acknowledged before the disk filled"
        assert store.put("small, after the failure").created  # the store still works
        assert doctor(store).clean


@pytest.mark.slow
def test_a_large_add_on_a_full_disk_exits_5_with_one_line(small_disk: Path) -> None:
    big = small_disk.parent / "big.txt"
    big.write_text(incompressible(1_500_000))
    done = subprocess.run(
        [sys.executable, "-m", "offload.cli.main", "add", "--path", str(big)],
        capture_output=True,
        text=True,
        env=child_env(small_disk / "home", {"OFFLOAD_STORE__MAX_FILE_BYTES": "20000000"}),
        cwd=small_disk.parent,
        timeout=120,
        check=False,
    )
    assert done.returncode == 5, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "nothing was saved" in done.stderr
    assert os.path.exists(small_disk / "home" / "offload.db")


def test_opening_a_file_that_is_not_a_database_is_a_store_error_saying_what_to_do(
    tmp_path: Path,
) -> None:
    path = tmp_path / "offload.db"
    path.write_bytes(b"notes, not a database\n" * 1000)
    with pytest.raises(StoreError) as err:
        Store(path)
    assert f"the store file {path} is damaged (file is not a database)" in str(err.value)
    assert "offload import" in str(err.value)
    assert path.read_bytes() == b"notes, not a database\n" * 1000
