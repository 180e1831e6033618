"""A store's zstd dictionary for its cached term counts (store/write/count_dictionary.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import zstandard

from offload.core.text import analysis
from offload.core.tokens import EstimateCounter
from offload.store.life.maintenance import doctor
from offload.store.store import Store
from offload.store.write import count_dictionary, index, packed_counts
from wordcorpus import WORDS, built_view

pytestmark = pytest.mark.sqlite_only

_QUERIES = ["Caroline painting lake", "adoption support group", "violin school 1234", "sunset"]


def _turns(n: int) -> list[str]:
    """Chat-like turns, each of its own mix of the corpus' words and a number of its own."""
    w = len(WORDS)
    return [
        f"{WORDS[i % w]} said, on day {i} the {WORDS[(i * 7 + 3) % w]} and the "
        f"{WORDS[(i * 11 + 5) % w]} were by the {WORDS[(i * 13 + 1) % w]}, "
        f"{WORDS[(i * 17 + 2) % w]} {WORDS[(i * 19 + 4) % w]} with friends"
        for i in range(n)
    ]


def _filled(path: Path) -> list[str]:
    texts = _turns(count_dictionary.TRAIN_AT + 300)
    with Store(path, counter=EstimateCounter()) as store:
        for start in range(0, len(texts), 500):
            store.put_many(texts[start : start + 500], kind="turn")
    return texts


def _raw(store: Store) -> sqlite3.Connection:
    assert isinstance(store.conn, sqlite3.Connection)
    return store.conn


def _ranked(store: Store) -> list[list[tuple[int, float]]]:
    return [[(h.entry.id, h.score) for h in store.search(q, limit=10)] for q in _QUERIES]


def _counts(store: Store) -> dict[int, str | None]:
    conn = _raw(store)
    rows = conn.execute("SELECT id, coalesce(term_counts, packed_counts) FROM chunks")
    return {int(r[0]): packed_counts.unpack(r[1], conn) for r in rows}


def _dictionaries_of_frames(store: Store) -> dict[int, int]:
    """How many compressed counts name each dictionary id (0: none)."""
    out: dict[int, int] = {}
    for (packed,) in _raw(store).execute(
        "SELECT CAST(packed_counts AS BLOB) FROM chunks WHERE packed_counts IS NOT NULL"
    ):
        key = count_dictionary.frame_dictionary(bytes(packed))
        out[key] = out.get(key, 0) + 1
    return out


def _compressed_plain(store: Store) -> None:
    """Every compressed count compressed again without a dictionary, as before one."""
    conn = _raw(store)
    packer = zstandard.ZstdCompressor(level=3, write_checksum=True)
    rows = conn.execute(
        "SELECT id, CAST(packed_counts AS BLOB) FROM chunks WHERE packed_counts IS NOT NULL"
    ).fetchall()
    plain = []
    for cid, packed in rows:
        held = packed_counts.unpack_stored(bytes(packed), conn)
        assert held is not None
        plain.append((packer.compress(held.encode()), int(cid)))
    conn.executemany("UPDATE chunks SET packed_counts = ? WHERE id = ?", plain)
    assert set(_dictionaries_of_frames(store)) == {0}


def _without_dictionary(store: Store) -> None:
    """The counts as the release before stored them: compressed without a dictionary, no
    table of dictionaries, its migration not run."""
    _compressed_plain(store)
    conn = _raw(store)
    conn.execute("DROP TABLE count_dictionaries")
    conn.execute("DELETE FROM counters WHERE name = 'count_dictionary_tried'")
    conn.execute("DELETE FROM _migrations WHERE name = 'm_chunk_term_counts_dictionary'")


def test_a_store_trains_its_dictionary_once_enough_chunks_are_stored(tmp_path: Path) -> None:
    texts = _filled(tmp_path / "s.db")
    with Store(tmp_path / "s.db", counter=EstimateCounter(), resident_mb=0) as store:
        conn = _raw(store)
        (dict_id,) = [int(r[0]) for r in conn.execute("SELECT id FROM count_dictionaries")]
        frames = _dictionaries_of_frames(store)
        # the chunks of the writes before it without, every later one with it
        assert set(frames) == {0, dict_id} and frames[dict_id] >= 300
        counts = _counts(store)
        assert len(counts) == len(texts)
        assert set(counts.values()) == {index.term_counts(analysis.index_text(t)) for t in texts}
        before, after = conn.execute(
            "SELECT avg(length(packed_counts)) FROM chunks WHERE id <= 1000 UNION ALL "
            "SELECT avg(length(packed_counts)) FROM chunks WHERE id > ?",
            (count_dictionary.TRAIN_AT,),
        ).fetchall()
        assert after[0] < before[0] * 0.8
        assert doctor(store).clean
        # an offload of the release before reads such a value as no cache (its chunk scored
        # from its text), never as other counts
        (packed,) = conn.execute(
            "SELECT CAST(packed_counts AS BLOB) FROM chunks ORDER BY id DESC LIMIT 1"
        ).fetchone()
        with pytest.raises(zstandard.ZstdError):
            zstandard.ZstdDecompressor().decompress(bytes(packed))
        assert packed_counts.unpack(bytes(packed)) is None  # no store to read it from


@pytest.mark.slow  # two stores of a few thousand chunks, every query ranked in both
def test_counts_with_the_dictionary_rank_every_query_as_without_it(tmp_path: Path) -> None:
    for resident in (0, 64):  # the SQL path, then the in-memory index
        path = tmp_path / f"s{resident}.db"
        _filled(path)
        with Store(path, counter=EstimateCounter(), resident_mb=resident) as store:
            if resident:
                built_view(store)
            with_it = _ranked(store)
            assert all(with_it)
            _compressed_plain(store)
            assert _ranked(store) == with_it
            # and read as no cache at all (each chunk scored from its text)
            _raw(store).execute("UPDATE chunks SET packed_counts = NULL")
            assert _ranked(store) == with_it


@pytest.mark.slow  # two stores of a few thousand chunks, every query ranked in both
def test_opening_a_store_of_counts_without_a_dictionary_trains_one_and_ranks_the_same(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    _filled(path)
    with Store(path, counter=EstimateCounter(), resident_mb=0) as store:
        want, counts = _ranked(store), _counts(store)
        _without_dictionary(store)
    with Store(path, counter=EstimateCounter(), resident_mb=0) as store:
        conn = _raw(store)
        (dict_id,) = [int(r[0]) for r in conn.execute("SELECT id FROM count_dictionaries")]
        assert set(_dictionaries_of_frames(store)) == {dict_id}  # every one compressed again
        assert _counts(store) == counts
        assert _ranked(store) == want
        assert doctor(store).clean


def test_a_small_store_has_no_dictionary_and_its_migration_leaves_it_so(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path, counter=EstimateCounter()) as store:
        store.put_many(_turns(50), kind="turn")
        assert _raw(store).execute("SELECT count(*) FROM count_dictionaries").fetchone()[0] == 0
        _without_dictionary(store)
    with Store(path, counter=EstimateCounter()) as store:
        assert _raw(store).execute("SELECT count(*) FROM count_dictionaries").fetchone()[0] == 0
        assert set(_dictionaries_of_frames(store)) == {0}
