"""``offload add --path`` of one big generated file: wall time, CPU and the child's peak RSS.

    python bench/bench_big_add.py --mb 50 [--text words] [--src /old/checkout/src]

The file is ``--mb`` MB of generated text (seeded: the same bytes every run), written under
a temporary directory: ``--text log`` (the default), log lines drawing on 20,000 words;
``--text words``, lines of random letters, 2-9 to a word (nearly every word distinct: the
most terms, tokens and cache entries per byte); ``offload add --path`` runs in
its own process with a fresh store (``--src``: another tree's source first on
``PYTHONPATH``, to compare). The peak RSS is the child's own (``os.wait4``), in MiB.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_log(path: Path, size: int) -> None:
    """``size`` bytes of log lines (deterministic)."""
    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 10))) for _ in range(20000)]
    with path.open("w") as f:
        written = i = 0
        while written < size:
            said = " ".join(rng.choice(words) for _ in range(rng.randint(5, 15)))
            stamp = f"2026-12-06T04:{i % 60:02d}:{i % 59:02d}"
            written += f.write(f"{stamp} INFO worker-{i % 17} {said} id={i}\n")
            i += 1


def write_words(path: Path, size: int) -> None:
    """``size`` bytes of lines of twelve random words of 2-9 letters (deterministic)."""
    rng = random.Random(11)
    letters = "abcdefghijklmnopqrstuvwxyz"
    with path.open("w") as f:
        written = 0
        while written < size:
            words = ("".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(12))
            written += f.write(" ".join(words) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=50, help="the file's size in MB (10^6 bytes)")
    parser.add_argument(
        "--text", choices=("log", "words"), default="log", help="what the file holds"
    )
    parser.add_argument("--src", help="another tree's src/ to run instead of this one's")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-big-add-") as tmp:
        work = Path(tmp)
        (write_log if args.text == "log" else write_words)(work / "big.log", args.mb * 10**6)
        env = {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_")}
        env["OFFLOAD_HOME"] = str(work / "home")
        env["OFFLOAD_STORE__MAX_FILE_BYTES"] = str(2 * args.mb * 10**6)
        env["PYTHONPATH"] = args.src or str(Path(__file__).resolve().parent.parent / "src")
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "offload.cli.main", "add", "--path", "big.log", "--json"],
            cwd=work,
            env=env,
            stdout=subprocess.DEVNULL,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - started
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit("offload add failed")
        cpu = usage.ru_utime + usage.ru_stime
        print(
            f"{args.mb} MB of {args.text}: wall {wall:.1f} s, CPU {cpu:.1f} s "
            f"(user {usage.ru_utime:.1f} + system {usage.ru_stime:.1f}), "
            f"peak RSS {usage.ru_maxrss / 1024:.0f} MiB"
        )


if __name__ == "__main__":
    main()
