"""A separate process that offloads N texts and acknowledges each commit on stdout.

Used by the concurrency and crash tests: ``python writer_proc.py DB WORKER COUNT`` (DB is a
SQLite file or a ``postgresql://`` URL).
"""

from __future__ import annotations

import sys
from pathlib import Path

from offload.core.tokens import EstimateCounter
from offload.store.store import Store


def main() -> None:
    where, worker, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    db = where if where.startswith("postgresql://") else Path(where)
    store = Store(db, counter=EstimateCounter())
    for i in range(count):
        text = f"worker {worker} item {i}\n" + ("payload line for search\n" * (i % 7 + 1))
        store.put(text, kind="test", topic=f"w{worker}-{i}", scope="concurrency")
        print(f"ack {worker} {i}", flush=True)  # only after the commit returned
    store.close()


if __name__ == "__main__":
    main()
