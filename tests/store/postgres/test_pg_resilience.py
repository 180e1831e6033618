"""A team store on PostgreSQL loses no acknowledged write: a writer killed with -9
mid-transaction, the server crashing and restarting mid-run; while it is down callers get
a clear error (exit 5 from the CLI) and recover when it is back."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from offload.config import StoreSettings
from offload.core.tokens import EstimateCounter
from offload.errors import StoreError
from offload.store.store import Store
from pgserver import PgServer, kill_hard, private_server
from realparts import child_env, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def own_server() -> Iterator[PgServer]:
    """A private server: these tests crash and restart it."""
    with private_server() as server:
        yield server


# puts numbered texts forever, printing each ref once put() returned (acknowledged); a
# failed put is printed as an error and the same text is tried again
WRITER = textwrap.dedent(
    """
    import json, sys
    from offload.core.tokens import EstimateCounter
    from offload.errors import OffloadError
    from offload.store.store import Store

    store = Store(sys.argv[1], counter=EstimateCounter())
    i = 0
    while True:
        text = f"acknowledged write number {i}\\n" * 20
        try:
            ref = store.put(text, scope="w").entry.ref
        except OffloadError as exc:
            print(json.dumps({"error": type(exc).__name__, "exit": exc.exit_code}), flush=True)
            continue
        print(json.dumps({"i": i, "ref": ref}), flush=True)
        i += 1
    """
)


def _start_writer(url: str, tmp: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, url],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=child_env(tmp / "home"),
    )


def _read_until(
    proc: subprocess.Popen[str], acked: int, seen: dict[int, str]
) -> list[dict[str, object]]:
    """Read the writer's lines until ``acked`` writes were acknowledged; the error lines."""
    assert proc.stdout is not None
    errors: list[dict[str, object]] = []
    while len(seen) < acked:
        line = proc.stdout.readline()
        assert line, "the writer exited"
        record = json.loads(line)
        if "error" in record:
            errors.append(record)
        else:
            seen[int(record["i"])] = str(record["ref"])
    return errors


def test_a_crash_restart_mid_run_loses_no_acknowledged_write(
    own_server: PgServer, tmp_path: Path
) -> None:
    url = own_server.create_database()
    with Store(url, counter=EstimateCounter()):
        pass  # the schema exists before the writer starts
    proc = _start_writer(url, tmp_path)
    seen: dict[int, str] = {}
    try:
        _read_until(proc, 20, seen)
        own_server.stop("immediate")  # a crash: no checkpoint, recovery on the next start
        own_server.start()
        errors = _read_until(proc, len(seen) + 20, seen)
    finally:
        kill_hard(proc)
    assert all(e == {"error": "StoreError", "exit": 5} for e in errors), errors
    with Store(url, counter=EstimateCounter()) as store:
        for i, ref in seen.items():
            assert store.read(ref, "w") == f"acknowledged write number {i}\n" * 20
        # besides them at most the write in flight when the writer was killed (committed,
        # never acknowledged): the next one in sequence, whole
        extra = store.count() - len(seen)
        assert extra in (0, 1)
        if extra:
            text = f"acknowledged write number {len(seen)}\n" * 20
            assert store.put(text, scope="w").created is False


def test_the_cli_exits_5_with_one_line_while_the_server_is_down_and_works_after(
    own_server: PgServer, tmp_path: Path
) -> None:
    url = own_server.create_database()
    settings = {"OFFLOAD_STORE__URL": url, "OFFLOAD_SEARCH__SEMANTIC": "false"}
    # a long busy timeout: the answer while down must not wait for it
    env = child_env(tmp_path / "home", {**settings, "OFFLOAD_STORE__BUSY_TIMEOUT_S": "120"})
    add = [sys.executable, "-m", "offload.cli.main", "add", "--scope", "s", "stored while up"]
    assert subprocess.run(add, env=env, capture_output=True, check=False).returncode == 0
    own_server.stop("fast")
    started = time.monotonic()
    down = subprocess.run(
        [*add[:-1], "stored while down"], env=env, capture_output=True, text=True, check=False
    )
    assert time.monotonic() - started < 60  # the busy timeout is 120 s
    assert down.returncode == 5
    assert down.stderr.count("\n") == 1 and "unavailable" in down.stderr
    assert "Traceback" not in down.stderr
    own_server.start()
    again = subprocess.run([*add[:-1], "stored after"], env=env, capture_output=True, check=False)
    assert again.returncode == 0
    with Store(url, counter=EstimateCounter()) as store:
        assert store.count() == 2


def test_a_store_open_across_a_restart_recovers_without_reopening(own_server: PgServer) -> None:
    url = own_server.create_database()
    # a long busy timeout: a write while the server is down must not wait for it
    settings = StoreSettings(busy_timeout_s=120)
    with Store(url, settings, counter=EstimateCounter()) as store:
        ref = store.put("before the restart\n").entry.ref
        own_server.stop("fast")
        started = time.monotonic()
        with pytest.raises(StoreError, match="unavailable"):
            store.put("while it is down\n")
        with pytest.raises(StoreError, match="unavailable"):
            store.search("restart")
        assert time.monotonic() - started < 60
        own_server.start()
        assert store.read(ref) == "before the restart\n"
        later = store.put("after the restart\n").entry.ref
        assert store.read(later) == "after the restart\n"


# opens a store and holds one write transaction open on a label the test has locked, so it
# is killed mid-transaction with its rows written but uncommitted
BLOCKED_WRITER = textwrap.dedent(
    """
    import sys
    from offload.core.tokens import EstimateCounter
    from offload.store.store import Store

    store = Store(sys.argv[1], counter=EstimateCounter())
    print("open", flush=True)
    store.put("half-written by a killed writer\\n" * 30, scope="w", label="contested")
    print("committed", flush=True)
    """
)


def test_a_writer_killed_mid_transaction_leaves_nothing_and_blocks_no_one(
    own_server: PgServer, tmp_path: Path
) -> None:
    import psycopg

    url = own_server.create_database()
    with Store(url, counter=EstimateCounter()) as store:
        anchor = store.put("an entry the contested label first names\n", scope="w").entry
        acked = store.put("acknowledged before the kill\n", scope="w").entry.ref
    holder = psycopg.connect(url)  # holds the label's row locked, uncommitted
    holder.execute("INSERT INTO labels (label, entry_id) VALUES ('contested', %s)", (anchor.id,))
    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCKED_WRITER, url],
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(tmp_path / "home"),
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "open\n"

        def writer_waits_on_the_label() -> bool:
            rows = own_server.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                f"AND datname = '{url.rsplit('/', 1)[1]}'"
            )
            return int(rows[0][0]) > 0

        wait_until(writer_waits_on_the_label, 60, what="the writer blocked mid-transaction")
        assert kill_hard(proc) == -9
    finally:
        if proc.poll() is None:
            kill_hard(proc)
        holder.rollback()
        holder.close()
    with Store(url, counter=EstimateCounter()) as store:
        assert store.read(acked, "w") == "acknowledged before the kill\n"
        assert store.count() == 2  # the killed writer's entry never became visible
        again = store.put("half-written by a killed writer\n" * 30, scope="w", label="contested")
        assert again.created and store.resolve("contested", "w").id == again.entry.id


def test_a_url_keeps_its_own_connect_timeout_and_gets_a_bounded_one_otherwise() -> None:
    from offload.store.postgres.pgconn import CONNECT_TIMEOUT_S, connect_options

    assert connect_options("postgresql://u@h/db") == {"connect_timeout": CONNECT_TIMEOUT_S}
    assert connect_options("postgresql://u@h/db?sslmode=require&connect_timeout=30") == {}
