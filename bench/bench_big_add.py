"""``offload add --path`` of one big generated file: wall time, CPU and the child's peak RSS.

    python bench/bench_big_add.py --mb 50 [--text words] [--src /old/checkout/src]
    python bench/bench_big_add.py --mb 50 --text words --against /old/checkout/src --rounds 2

The file is ``--mb`` MB of generated text (seeded: the same bytes every run), written under
a temporary directory: ``--text log`` (the default), log lines drawing on 20,000 words;
``--text words``, lines of random letters, 2-9 to a word (nearly every word distinct: the
most terms, tokens and cache entries per byte); ``offload add --path`` runs in
its own process with a fresh store (``--src``: another tree's source first on
``PYTHONPATH``, to compare). The peak RSS is the child's own (``os.wait4``), in MiB.
``--against`` runs this tree (or ``--src``) and another in turns on the same file, the
order flipped every round, and prints each run with the machine's load beside it.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
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


def run_add(work: Path, src: str, mb: int) -> tuple[float, float, float, float]:
    """``offload add --path big.log`` of ``src``'s tree in its own process with a fresh
    store: (wall s, user CPU s, system CPU s, peak RSS MiB)."""
    home = work / "home"
    shutil.rmtree(home, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_")}
    env["OFFLOAD_HOME"] = str(home)
    env["OFFLOAD_STORE__MAX_FILE_BYTES"] = str(2 * mb * 10**6)
    env["PYTHONPATH"] = src
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
        raise SystemExit(f"offload add failed ({src})")
    return wall, usage.ru_utime, usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=50, help="the file's size in MB (10^6 bytes)")
    parser.add_argument(
        "--text", choices=("log", "words"), default="log", help="what the file holds"
    )
    parser.add_argument("--src", help="another tree's src/ to run instead of this one's")
    parser.add_argument("--against", help="another tree's src/ to run in turns with this one")
    parser.add_argument("--rounds", type=int, default=1, help="rounds with --against (1-20)")
    args = parser.parse_args()
    mine = args.src or str(Path(__file__).resolve().parent.parent / "src")
    trees = [("this", mine)] + ([("against", args.against)] if args.against else [])
    rounds = max(1, min(20, args.rounds)) if args.against else 1
    with tempfile.TemporaryDirectory(prefix="bench-big-add-") as tmp:
        work = Path(tmp)
        (write_log if args.text == "log" else write_words)(work / "big.log", args.mb * 10**6)
        for r in range(rounds):
            for name, src in trees if r % 2 == 0 else trees[::-1]:
                load = os.getloadavg()[0]
                wall, user, system, rss = run_add(work, src, args.mb)
                shown = f"{name} ({src}) " if args.against else ""
                print(
                    f"{shown}{args.mb} MB of {args.text}: wall {wall:.1f} s, "
                    f"CPU {user + system:.1f} s (user {user:.1f} + system {system:.1f}), "
                    f"peak RSS {rss:.0f} MiB, load {load:.1f} at its start",
                    flush=True,
                )


if __name__ == "__main__":
    main()
