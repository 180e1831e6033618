"""Several processes on one store; a writer killed mid-write loses nothing acknowledged."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from offload.core.tokens import EstimateCounter
from offload.store.life.maintenance import doctor
from offload.store.models import Filters
from offload.store.store import Store

# real writer processes, seconds each: the whole suite runs them
pytestmark = pytest.mark.slow

WRITER = Path(__file__).with_name("writer_proc.py")


def _writer(db: Path | str, worker: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(db), worker, str(count)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_four_processes_writing_at_once_lose_nothing(store_location: Path | str) -> None:
    db = store_location
    Store(db, counter=EstimateCounter()).close()  # migrate once up front
    procs = [_writer(db, str(w), 500) for w in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        assert out.count("ack") == 500
    with Store(db, counter=EstimateCounter()) as store:
        assert store.count(Filters(scope="concurrency")) == 2000
        topics = {e.topic for e in store.entries(Filters(scope="concurrency"), limit=5000)}
        assert topics == {f"w{w}-{i}" for w in range(4) for i in range(500)}
        assert doctor(store).clean
        assert len(store.search("payload", limit=20)) == 20


def test_a_writer_killed_mid_write_loses_nothing_it_acknowledged(
    store_location: Path | str,
) -> None:
    db = store_location
    Store(db, counter=EstimateCounter()).close()
    proc = _writer(db, "k", 100_000)
    acked: list[int] = []
    assert proc.stdout is not None
    for line in proc.stdout:  # bounded: the writer prints one line per commit
        acked.append(int(line.split()[2]))
        if len(acked) >= 150:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    with Store(db, counter=EstimateCounter()) as store:
        topics = {e.topic for e in store.entries(Filters(scope="concurrency"), limit=100_000)}
        assert {f"wk-{i}" for i in acked} <= topics
        report = doctor(store)
        assert report.clean, report
