"""A store file is data: a ``count_dictionaries`` row that is no dictionary (damaged, or
written by someone who handed over the file) is never used, every command still works or
ends in one line, and ``offload doctor`` names the row (``--repair`` deletes it)."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import zstandard

from offload.cli.main import main
from offload.core.tokens import EstimateCounter
from offload.store.life.maintenance import doctor
from offload.store.store import Store
from offload.store.write import count_dictionary
from wordcorpus import WORDS

pytestmark = pytest.mark.sqlite_only

_QUERIES = ["painting lake friends", "day 17 support", "violin school"]
_OTHER = zstandard.train_dictionary(
    4096, [f"other {i} words here {i * 7} and {i % 13}".encode() for i in range(400)]
)
Statement = str | tuple[str, tuple[Any, ...]]

#: Each way a row can be no dictionary; statements run on a copy of a store that has one.
HOSTILE: dict[str, list[Statement]] = {
    "random bytes": ["UPDATE count_dictionaries SET data = randomblob(5000)"],
    "a zstd header and garbage": [
        (
            "UPDATE count_dictionaries SET data = ?",
            (b"\x37\xa4\x30\xec" + bytes(range(256)) * 12,),
        )
    ],
    "empty": ["UPDATE count_dictionaries SET data = zeroblob(0)"],
    "text": ["UPDATE count_dictionaries SET data = 'hello'"],
    "past the bound": ["UPDATE count_dictionaries SET data = zeroblob(3000000)"],
    "another store's": [
        "DELETE FROM count_dictionaries",
        ("INSERT INTO count_dictionaries SELECT ?, ?", (0, _OTHER.as_bytes())),
        "UPDATE count_dictionaries SET id = (SELECT max(id) FROM chunks) + 1",
    ],
    "null, in a table made without NOT NULL": [
        "ALTER TABLE count_dictionaries RENAME TO old_dictionaries",
        "CREATE TABLE count_dictionaries (id INTEGER PRIMARY KEY, data BLOB)",
        "INSERT INTO count_dictionaries SELECT id, NULL FROM old_dictionaries",
        "DROP TABLE old_dictionaries",
    ],
    "an id that is no number": [
        "DROP TABLE count_dictionaries",
        "CREATE TABLE count_dictionaries (id TEXT, data BLOB)",
        "INSERT INTO count_dictionaries VALUES ('abc', x'00')",
    ],
    "a garbage row before the real one": [
        ("INSERT INTO count_dictionaries VALUES (?, ?)", (1, b"\x37\xa4\x30\xec" + b"\x01" * 3000)),
        "INSERT OR REPLACE INTO counters (name, value) VALUES ('count_dictionary_tried', 'x')",
    ],
}


def _turns(n: int) -> list[str]:
    w = len(WORDS)
    return [
        f"{WORDS[i % w]} said, on day {i} the {WORDS[(i * 7 + 3) % w]} and the "
        f"{WORDS[(i * 11 + 5) % w]} were by the {WORDS[(i * 13 + 1) % w]} with friends"
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with its trained dictionary (built once: ~2,300 turns)."""
    path = tmp_path_factory.mktemp("dictionary") / "offload.db"
    texts = _turns(count_dictionary.TRAIN_AT + 300)
    with Store(path, counter=EstimateCounter()) as store:
        for start in range(0, len(texts), 500):
            store.put_many(texts[start : start + 500], kind="turn", scope="proj")
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM count_dictionaries").fetchone()[0] == 1
    return path


def damaged(filled: Path, into: Path, name: str) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    path = into / "offload.db"
    shutil.copy(filled, path)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        for statement in HOSTILE[name]:
            if isinstance(statement, tuple):
                conn.execute(*statement)
            else:
                conn.execute(statement)
        conn.commit()
    return path


def ranked(store: Store) -> list[list[int]]:
    return [[h.entry.id for h in store.search(q, limit=10, scope="proj")] for q in _QUERIES]


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_row_that_is_no_dictionary_is_never_used_and_doctor_names_it(
    filled: Path, tmp_path: Path, name: str
) -> None:
    with Store(filled, counter=EstimateCounter()) as store:
        expected = ranked(store)
    path = damaged(filled, tmp_path, name)
    with Store(path, counter=EstimateCounter()) as store:
        assert ranked(store) == expected  # its counts read as none: scored from the text
        store.put_many(["a new note about painting by the lake"], kind="turn", scope="proj")
        report = doctor(store)
        assert not report.clean
        assert report.bad_dictionaries, report
        doctor(store, repair=True)
        after = doctor(store)
        assert after.clean, after
        assert ranked(store)[1:] == expected[1:]


def run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, err.getvalue() + out.getvalue()


COMMANDS = [
    ["ls", "--scope", "proj"],
    ["search", "--scope", "proj", "painting friends"],
    ["stats", "--all-scopes"],
    ["export", "ARCHIVE"],
    ["add", "--scope", "proj", "a note about the lake"],
    ["import", "ARCHIVE"],
    ["doctor"],
]


def _every_command_ends_cleanly(filled: Path, tmp_path: Path, name: str) -> None:
    home = damaged(filled, tmp_path / "home", name).parent
    archive = str(tmp_path / "out.offload")
    said = {}
    for command in COMMANDS:
        argv = ["--home", str(home), *(archive if a == "ARCHIVE" else a for a in command)]
        code, text = run(argv)  # a traceback would be raised out of main
        said[command[0]] = (code, text)
    code, text = said["doctor"]
    assert code == 1 and "count dictionary" in text and "is unusable" in text, text
    assert all(code == 0 for c, (code, _t) in said.items() if c != "doctor"), said


@pytest.mark.parametrize(
    "name", ["random bytes", "null, in a table made without NOT NULL", "an id that is no number"]
)
def test_every_command_on_a_store_with_a_row_that_is_no_dictionary_works_or_says_why(
    filled: Path, tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # null data and an id that is no number were tracebacks from search, add, import and
    # doctor; a zstd header with garbage, from import and doctor --repair
    monkeypatch.setenv("OFFLOAD_SEARCH__SEMANTIC", "false")
    monkeypatch.chdir(tmp_path)
    _every_command_ends_cleanly(filled, tmp_path, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(HOSTILE))
def test_every_command_on_a_store_with_any_hostile_row_works_or_says_why(
    filled: Path, tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OFFLOAD_SEARCH__SEMANTIC", "false")
    monkeypatch.chdir(tmp_path)
    if name != "another store's":
        _every_command_ends_cleanly(filled, tmp_path, name)


def test_the_process_never_reads_a_row_past_the_bound_whole(filled: Path, tmp_path: Path) -> None:
    path = damaged(filled, tmp_path, "past the bound")
    with contextlib.closing(sqlite3.connect(path)) as conn:
        # an id this process has not kept (it keeps each dictionary it read, by its id)
        conn.execute("UPDATE count_dictionaries SET id = 12345")
        assert count_dictionary.known(conn, 12345) is None
        (why,) = [w for _i, w in count_dictionary.problems(conn)]
    assert "3000000 bytes" in why and str(count_dictionary.MOST_BYTES) in why
    assert os.path.getsize(path) > 3_000_000
    # read in a fresh process: a 40 MB row leaves its peak memory as it was
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE count_dictionaries SET data = zeroblob(40000000)")
        conn.commit()
    looked = (
        "import resource, sqlite3, sys\n"
        "from offload.store.write import count_dictionary\n"
        "conn = sqlite3.connect(sys.argv[1])\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "assert count_dictionary.known(conn, 12345) is None\n"
        "assert len(count_dictionary.problems(conn)) == 1\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", looked, str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) < 20_000, done.stdout  # KB: 40 MB read whole before


def test_the_dictionary_migration_never_unpacks_what_a_frame_says_past_a_chunks_counts(
    filled: Path, tmp_path: Path
) -> None:
    # a frame of 9 KB that says it holds 150 MB: the migration unpacked each whole and kept
    # them as training samples (20 such rows: 11.7 GB of peak RSS and 30 s on first open)
    path = tmp_path / "offload.db"
    shutil.copy(filled, path)
    bomb = zstandard.ZstdCompressor(level=3).compress(b"{" + b" " * 150_000_000 + b"}")
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("DROP TABLE count_dictionaries")
        conn.execute("DELETE FROM _migrations WHERE name = 'm_chunk_term_counts_dictionary'")
        conn.execute(
            "UPDATE chunks SET packed_counts = ? WHERE id > (SELECT max(id) - 3 FROM chunks)",
            (bomb,),
        )
        conn.commit()
    opened = (
        "import resource, sys\n"
        "from offload.store.store import Store\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "with Store(sys.argv[1]) as store:\n"
        "    store.stats()\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", opened, str(path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    grown_kb = int(done.stdout.split()[-1])
    assert grown_kb < 100_000, grown_kb  # 3 x 150 MB unpacked before
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM count_dictionaries").fetchone()[0] == 1


def test_training_a_dictionary_never_unpacks_what_a_frame_says_past_a_chunks_counts(
    filled: Path, tmp_path: Path
) -> None:
    # the write that trains took every sample whole up to 64 MiB each (4,000 of them)
    path = tmp_path / "offload.db"
    shutil.copy(filled, path)
    bomb = zstandard.ZstdCompressor(level=3).compress(b"{" + b" " * 60_000_000 + b"}")
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("DELETE FROM count_dictionaries")
        conn.execute("DELETE FROM counters WHERE name = 'count_dictionary_tried'")
        conn.execute(
            "UPDATE chunks SET packed_counts = ? WHERE id > (SELECT max(id) - 3 FROM chunks)",
            (bomb,),
        )
        conn.commit()
    wrote = (
        "import resource, sys\n"
        "from offload.store.store import Store\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "with Store(sys.argv[1]) as store:\n"
        "    store.put_many(['one more note about the lake'], kind='turn', scope='proj')\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", wrote, str(path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) < 100_000, done.stdout
    with contextlib.closing(sqlite3.connect(path)) as conn:  # trained from the rest
        assert conn.execute("SELECT count(*) FROM count_dictionaries").fetchone()[0] == 1
