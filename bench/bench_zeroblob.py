"""What SQLite allocates to insert a row made with a zeroed blob, by where the blob sits.

    python bench/bench_zeroblob.py [--mb 30]

A big body's write makes its row with ``zeroblob(n)`` and fills it through incremental blob
I/O (store/write/rows.py). SQLite builds that row without the zeros only when no field
after the blob holds data; ``blocks.data`` is followed by ``created``. Each layout runs in
its own process, on a file database; printed: how much the process's peak RSS grew.
"""

from __future__ import annotations

import argparse
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile

LAYOUTS = {
    "blob before a REAL (blocks' layout)": "id INTEGER PRIMARY KEY, data BLOB, created REAL",
    "blob last": "id INTEGER PRIMARY KEY, created REAL, data BLOB",
}


def insert_once(columns: str, size: int) -> int:
    """The growth of this process's peak RSS (KiB) while one zeroed row is inserted."""
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(os.path.join(tmp, "t.db"))
        conn.execute(f"CREATE TABLE t ({columns})")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        conn.execute("INSERT INTO t (data, created) VALUES (zeroblob(?), ?)", (size, 1.5e9))
        conn.commit()
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        conn.close()
    return grown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=30, help="the blob's size in MB (10^6 bytes)")
    parser.add_argument("--columns", help=argparse.SUPPRESS)  # one layout, in a child
    args = parser.parse_args()
    if args.columns:
        print(insert_once(args.columns, args.mb * 10**6))
        return
    print(f"SQLite {sqlite3.sqlite_version}, a {args.mb} MB zeroblob:")
    for name, columns in LAYOUTS.items():
        out = subprocess.run(
            [sys.executable, __file__, "--mb", str(args.mb), "--columns", columns],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        print(f"  {name}: peak RSS +{int(out) / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
