"""An archive is read within bounds: a bomb of a few kilobytes is refused after reading what
the bound allows, not the gigabytes it stands for, and the store is unchanged."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from archive_bombs import line_bomb, record_bomb
from offload.config import StoreSettings
from offload.core.tokens import EstimateCounter
from offload.errors import InvalidInput
from offload.store.backend import Sql
from offload.store.life.archive import import_archive
from offload.store.life.archive_read import MIB, ImportLimits
from offload.store.store import Store

GIB = 1024 * MIB


def _peak(call: Callable[[], object]) -> int:
    """The most Python memory ``call`` held at once, in bytes."""
    tracemalloc.start()
    try:
        call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def _refused(store: Store, path: Path, match: str) -> None:
    with pytest.raises(InvalidInput, match=match) as info:
        import_archive(store, path)
    assert "\n" not in str(info.value)


@pytest.mark.sqlite_only
def test_a_3_gib_line_in_a_98_kb_archive_is_refused_after_reading_the_bound(
    store_location: Path, tmp_path: Path
) -> None:
    bomb = tmp_path / "line.offload"
    assert line_bomb(bomb, 3 * GIB) < 100_000
    settings = StoreSettings(import_max_line_mb=1)
    with Store(store_location, settings, counter=EstimateCounter()) as store:
        peak = _peak(lambda: _refused(store, bomb, r"line 2 .*store\.import_max_line_mb"))
        assert store.count() == 0
    assert peak < 8 * MIB  # the bound and a buffer, not 3 GiB


@pytest.mark.sqlite_only
def test_millions_of_records_are_refused_at_the_record_bound(
    store_location: Path, tmp_path: Path
) -> None:
    bomb = tmp_path / "records.offload"
    record_bomb(bomb, 1_000_000)
    settings = StoreSettings(import_max_records=1000)
    with Store(store_location, settings, counter=EstimateCounter()) as store:
        peak = _peak(lambda: _refused(store, bomb, r"more than 1000 records.*import_max_records"))
        assert store.conn.execute(Sql("SELECT count(*) FROM counters")).fetchone()[0] == 0
    assert peak < 8 * MIB


@pytest.mark.sqlite_only
def test_the_decompressed_total_is_bounded(store_location: Path, tmp_path: Path) -> None:
    bomb = tmp_path / "records.offload"
    record_bomb(bomb, 100_000)  # ~4 MiB of text
    with Store(store_location, StoreSettings(import_max_mb=1), counter=EstimateCounter()) as store:
        _refused(store, bomb, r"more than 1 MiB of text.*OFFLOAD_STORE__IMPORT_MAX_MB")
        assert store.conn.execute(Sql("SELECT count(*) FROM counters")).fetchone()[0] == 0


def test_an_archive_within_the_bounds_imports(store_location: Path | str, tmp_path: Path) -> None:
    archive = tmp_path / "records.offload"
    record_bomb(archive, 5000)
    with Store(store_location, counter=EstimateCounter()) as store:
        import_archive(store, archive)
        assert store.conn.execute(Sql("SELECT value FROM counters")).fetchall()[0][0] == 1


@pytest.mark.sqlite_only
def test_bounds_may_be_lifted_for_an_archive_the_caller_wrote(
    store_location: Path, tmp_path: Path
) -> None:
    archive = tmp_path / "records.offload"
    record_bomb(archive, 2000)
    settings = StoreSettings(import_max_records=1000)
    with Store(store_location, settings, counter=EstimateCounter()) as store:
        _refused(store, archive, "import_max_records")
        import_archive(store, archive, limits=ImportLimits.unbounded())
        assert store.conn.execute(Sql("SELECT count(*) FROM counters")).fetchone()[0] == 1


@pytest.mark.slow
@pytest.mark.sqlite_only
def test_the_default_line_bound_refuses_a_3_gib_line_holding_a_quarter_of_it(
    store_location: Path, tmp_path: Path
) -> None:
    bomb = tmp_path / "line.offload"
    line_bomb(bomb, 3 * GIB)
    with Store(store_location, counter=EstimateCounter()) as store:
        peak = _peak(lambda: _refused(store, bomb, r"longer than 256 MiB"))
    assert peak < 300 * MIB
