"""Additive counters: processes adding to the same counters at once lose nothing."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from offload.core.tokens import EstimateCounter
from offload.store.backend import Sql
from offload.store.life.archive import export_archive, import_archive
from offload.store.sqlite import db
from offload.store.store import Store
from realparts import run_together

PROCESSES = 3
ADDS = 60

# One counting process: opens the store, says "ready", waits for "go", then adds one to
# three counters of two keys ADDS times, each add its own transaction (what a gateway's or
# a proxy's flush does), and prints the sums it was answered.
ADDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from offload.core.tokens import EstimateCounter
    from offload.store.store import Store

    where, n = sys.argv[1], int(sys.argv[2])
    store = Store(where if "://" in where else Path(where), counter=EstimateCounter())
    store.tallies("team")
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(n):
        store.add_tally("team", "calls", {"git": 1, "filesystem": 2})
        store.add_tally("team", f"session:{i % 2}", {"requests": 1})
    print(store.tallies("team")["calls"]["git"], flush=True)
    store.close()
    """
)


def _open(where: Path | str) -> Store:
    return Store(where, counter=EstimateCounter())


def test_adding_to_a_counter_returns_every_counter_of_its_key(store: Store) -> None:
    assert store.add_tally("ns", "k", {"a": 2, "b": 0}) == {"a": 2}
    assert store.add_tally("ns", "k", {"a": 1, "c": 5}) == {"a": 3, "c": 5}
    assert store.add_tally("ns", "other", {"a": 1}) == {"a": 1}
    assert store.tallies("ns") == {"k": {"a": 3, "c": 5}, "other": {"a": 1}}
    assert store.tallies("elsewhere") == {}
    assert store.delete_tallies("ns", "k") and not store.delete_tallies("ns", "k")
    assert store.tallies("ns") == {"other": {"a": 1}}


def test_two_stores_that_read_the_same_counts_and_then_add_keep_both_amounts(
    store_location: Path | str,
) -> None:
    # the lost update that totals written back made: both read 10, both write what they hold
    with _open(store_location) as a, _open(store_location) as b:
        a.add_tally("gateway-usage", "calls", {"git": 10})
        assert b.tallies("gateway-usage")["calls"] == {"git": 10}
        a.add_tally("gateway-usage", "calls", {"git": 3})
        assert b.add_tally("gateway-usage", "calls", {"git": 4}) == {"git": 17}
        assert a.tallies("gateway-usage")["calls"] == {"git": 17}


@pytest.mark.slow
def test_processes_adding_to_the_same_counters_at_once_lose_nothing(
    store_location: Path | str, tmp_path: Path
) -> None:
    _open(store_location).close()  # migrated before they start
    outs = run_together(
        [[sys.executable, "-c", ADDER, str(store_location), str(ADDS)]] * PROCESSES,
        [tmp_path / f"home-{w}" for w in range(PROCESSES)],
        timeout=300,
    )
    with _open(store_location) as store:
        sums = store.tallies("team")
    assert sums["calls"] == {"git": PROCESSES * ADDS, "filesystem": 2 * PROCESSES * ADDS}
    assert sums["session:0"] == sums["session:1"] == {"requests": PROCESSES * ADDS // 2}
    # each saw at least its own adds, none more than all of them
    assert all(ADDS <= int(out) <= PROCESSES * ADDS for out in outs)


def _as_before_tallies(store: Store) -> None:
    """Put ``store`` back where the release before tallies left it: the totals in state."""
    name = "pg_additive_tallies" if store.backend == "postgresql" else "m_additive_tallies"
    with db.write_tx(store.conn):
        store.conn.execute(Sql("DROP TABLE tallies"))
        store.conn.execute(Sql("DELETE FROM _migrations WHERE name = ?"), (name,))
    _legacy_state(store)


def _legacy_state(store: Store) -> None:
    """The totals as the release before tallies saved them (JSON in state)."""
    store.put_state("gateway-usage", "calls", {"git": 41, "filesystem": 3})
    store.put_state(
        "proxy.metrics",
        "totals",
        {"counters": {"requests": 7, "errors": 0}, "breaks": {"windowing": 2}},
    )
    store.put_state(
        "proxy.metrics",
        "session:s1",
        {"counters": {"requests": 5}, "breaks": {}, "title": "fix the build", "turns": []},
    )
    store.put_state("proxy.sessions", "s1", {"untouched": True})


def test_opening_a_store_moves_the_totals_it_saved_into_tallies(
    store_location: Path | str,
) -> None:
    with _open(store_location) as old:
        _as_before_tallies(old)
    with _open(store_location) as store:
        assert store.tallies("gateway-usage") == {"calls": {"git": 41, "filesystem": 3}}
        assert store.tallies("proxy.metrics") == {
            "totals": {"requests": 7, "break:windowing": 2},
            "session:s1": {"requests": 5},
        }
        state = dict(store.state_items("proxy.metrics"))
        assert state == {"session:s1": {"title": "fix the build", "turns": []}}
        assert store.get_state("gateway-usage", "calls") is None
        assert store.get_state("proxy.sessions", "s1") == {"untouched": True}


def test_an_archive_carries_tallies_and_importing_it_twice_counts_once(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "a.offload-archive"
    with _open(tmp_path / "src.db") as src:
        src.add_tally("gateway-usage", "calls", {"git": 9})
        export_archive(src, archive)
    with _open(tmp_path / "dst.db") as dst:
        dst.add_tally("gateway-usage", "calls", {"git": 2, "fetch": 1})
        import_archive(dst, archive)
        import_archive(dst, archive)
        assert dst.tallies("gateway-usage") == {"calls": {"git": 9, "fetch": 1}}


def test_an_archive_written_before_tallies_imports_its_saved_totals_as_tallies(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "old.offload-archive"
    with _open(tmp_path / "src.db") as src:
        _legacy_state(src)
        export_archive(src, archive)  # no tally records: state records as before
    with _open(tmp_path / "dst.db") as dst:
        import_archive(dst, archive)
        assert dst.tallies("gateway-usage") == {"calls": {"git": 41, "filesystem": 3}}
        assert dst.tallies("proxy.metrics")["session:s1"] == {"requests": 5}
        assert dst.get_state("proxy.metrics", "session:s1") == {
            "title": "fix the build",
            "turns": [],
        }
        assert dst.get_state("proxy.metrics", "totals") is None
        assert dst.get_state("proxy.sessions", "s1") == {"untouched": True}
