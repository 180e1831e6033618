"""A chunk's cached term counts kept compressed on SQLite (store/write/packed_counts.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import zstandard

from offload.core.text import analysis
from offload.core.tokens import EstimateCounter
from offload.store.backend import Sql
from offload.store.store import Store
from offload.store.write import index, packed_counts
from wordcorpus import built_view

# a chat turn, a log whose chunks hold ~200 distinct terms, and a reply of two words (its
# counts too small to compress: kept as text)
_TEXTS = [
    "parseHTTPResponse and snake_case_name in v1.2.3 ünïcödé Straße",
    "".join(f"line {i}: the lake froze at dawn, config_{i} reloaded ünï{i}\n" for i in range(90)),
    "ok, thanks",
]
_QUERIES = ["lake froze", "config reloaded", "parse http response", "Straße"]


def _json_of(text: str) -> str:
    return index.term_counts(analysis.index_text(text))


def test_packed_counts_read_back_as_the_same_json() -> None:
    for text in [*_TEXTS, ""]:
        cached = _json_of(text)
        assert packed_counts.unpack(packed_counts.pack(cached)) == cached


def test_only_counts_of_at_least_the_minimum_size_are_compressed() -> None:
    small, large = _json_of(_TEXTS[2]), _json_of(_TEXTS[0])
    assert len(small.encode()) < packed_counts.MIN_PACKED <= len(large.encode())
    assert packed_counts.pack(small) == small
    packed = packed_counts.pack(large)
    assert isinstance(packed, bytes) and len(packed) < len(large.encode())
    log = packed_counts.pack(_json_of(_TEXTS[1]))
    assert isinstance(log, bytes) and len(log) < len(_json_of(_TEXTS[1]).encode()) / 2
    # the bound is in bytes, not characters
    wide = "ü" * (packed_counts.MIN_PACKED // 2)
    assert isinstance(packed_counts.pack(wide), bytes)


def test_compressed_counts_hold_a_compact_text_that_reads_back_as_the_same_json() -> None:
    for text in _TEXTS[:2]:
        cached = _json_of(text)
        short = packed_counts.compact(cached)
        assert short is not None and len(short) < len(cached) * 0.8
        assert packed_counts.expand(short) == cached
        packed = packed_counts.pack(cached)
        assert isinstance(packed, bytes)
        assert zstandard.ZstdDecompressor().decompress(packed).decode() == short
    assert packed_counts.compact('{"":3,"a":2,"b":1}') == "3,a:2,b:1"
    assert packed_counts.expand("0") == '{"":0}'


def test_a_compact_texts_counts_are_read_without_expanding_it() -> None:
    counts = {"said": 2, "saidx": 1, "1": 1, "12": 3, "21": 1, "x1": 12, "über": 1}
    short = packed_counts.compact(index.counts_json(counts))
    assert short is not None
    # a term that is another's prefix, or a count's digits, is not mistaken for it
    asked = ["said", "sai", "saidx", "1", "2", "12", "21", "x1", "über", "absent"]
    found, length = packed_counts.compact_counts(short, asked)
    assert length == sum(counts.values())
    assert found == {t: n for t, n in counts.items() if t in asked}
    last = packed_counts.compact(index.counts_json({"a": 1, "b": 1}))
    assert last is not None and packed_counts.compact_counts(last, ["a", "b"])[0] == {
        "a": 1,
        "b": 1,
    }


def test_counts_the_compact_text_cannot_say_are_compressed_as_json() -> None:
    for term in ["a b", "a,b", "a:b", 'a"b', "a\\b", "tab\there", "x\u2028y"]:
        cached = index.counts_json({term: 2, "lake": 1, "froze": 3})
        short = packed_counts.compact(cached)
        # a separator in a term cannot be said; what JSON escapes travels escaped
        assert (short is None) == any(c in term for c in " ,:")
        padded = index.counts_json({term: 2, **{f"word{i}": i + 1 for i in range(40)}})
        packed = packed_counts.pack(padded)
        assert isinstance(packed, bytes) and packed_counts.unpack(packed) == padded


def test_counts_compressed_as_json_before_read_back_alike() -> None:
    cached = _json_of(_TEXTS[1])
    as_json = zstandard.ZstdCompressor(level=3, write_checksum=True).compress(cached.encode())
    assert packed_counts.unpack(as_json) == cached


def test_counts_stored_as_text_and_null_read_as_they_are() -> None:
    cached = _json_of(_TEXTS[0])
    assert packed_counts.unpack(cached) == cached
    assert packed_counts.unpack(None) is None


def test_a_damaged_value_reads_as_no_cache_never_as_other_counts() -> None:
    cached = _json_of(_TEXTS[1])
    packed = packed_counts.pack(cached)
    assert isinstance(packed, bytes)
    for at in range(len(packed)):
        for flip in (0x01, 0x80):
            damaged = bytearray(packed)
            damaged[at] ^= flip
            assert packed_counts.unpack(bytes(damaged)) in (None, cached)
    assert packed_counts.unpack(b"") is None
    assert packed_counts.unpack(packed[:-1]) is None


def test_a_value_claiming_more_than_the_bound_is_not_decompressed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cached = _json_of(_TEXTS[1])
    packed = packed_counts.pack(cached)
    assert isinstance(packed, bytes)
    held = len(zstandard.ZstdDecompressor().decompress(packed))  # the frame's own size
    monkeypatch.setattr(packed_counts, "MAX_UNPACKED", held - 1)
    assert packed_counts.unpack(packed) is None


@pytest.mark.sqlite_only
def test_sqlite_keeps_counts_compressed_apart_and_tiny_ones_as_text(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        store.put_many(_TEXTS, kind="tool-output")
        rows = store.conn.execute(Sql("SELECT term_counts, packed_counts FROM chunks")).fetchall()
    texts = [r[0] for r in rows if r[0] is not None]
    packed = [r[1] for r in rows if r[1] is not None]
    # one of the two in each row: the short reply's as text, the turn's and the log's
    # chunks compressed
    assert all((r[0] is None) != (r[1] is None) for r in rows)
    assert len(texts) == 1 and len(packed) >= 3
    assert all(isinstance(t, str) for t in texts) and all(isinstance(p, bytes) for p in packed)
    unpacked = [packed_counts.unpack(p) or "" for p in packed]
    assert sum(map(len, packed)) < sum(len(u.encode()) for u in unpacked) / 2


def _ranked(store: Store) -> list[list[tuple[int, float]]]:
    return [[(h.entry.id, h.score) for h in store.search(q, limit=10)] for q in _QUERIES]


def _counts_as_json(store: Store) -> dict[int, str | None]:
    rows = store.conn.execute(Sql("SELECT id, coalesce(term_counts, packed_counts) FROM chunks"))
    return {int(r[0]): packed_counts.unpack(r[1]) for r in rows}


@pytest.mark.sqlite_only
def test_an_older_offload_reads_the_compressed_chunks_as_uncached_and_ranks_the_same(
    tmp_path: Path,
) -> None:
    # an older release still running during an upgrade reads term_counts only: it must
    # find text or nothing there (nothing: it scores the chunk from its text)
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        store.put_many(_TEXTS, kind="turn")
        want = _ranked(store)
        kinds = store.conn.execute(Sql("SELECT DISTINCT typeof(term_counts) FROM chunks"))
        assert {r[0] for r in kinds} == {"text", "null"}
        store.conn.execute(Sql("UPDATE chunks SET packed_counts = NULL"))  # what it reads
        assert _ranked(store) == want


@pytest.mark.sqlite_only
def test_opening_a_store_of_uncompressed_counts_compresses_them_and_ranks_the_same(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    turns = [f"turn {i}: the lake froze at dawn while config_{i} reloaded" for i in range(60)]
    with Store(path, counter=EstimateCounter()) as store:
        store.put_many([*_TEXTS, *turns], kind="turn")
        want = _ranked(store)
        json_of = _counts_as_json(store)
        # as the previous release wrote them: every object as text, no column of its own
        store.conn.executemany(
            Sql("UPDATE chunks SET term_counts = ? WHERE id = ?"),
            [(j, cid) for cid, j in json_of.items()],
        )
        store.conn.execute(Sql.sqlite_only("ALTER TABLE chunks DROP COLUMN packed_counts"))
        store.conn.execute(
            Sql(
                "DELETE FROM _migrations WHERE name IN "
                "('m_chunk_term_counts_packed', 'm_chunk_term_counts_packed_small')"
            )
        )
    with Store(path, counter=EstimateCounter(), resident_mb=0) as store:
        assert isinstance(store.conn, sqlite3.Connection)
        rows = store.conn.execute(Sql("SELECT id, term_counts, packed_counts FROM chunks"))
        packed = {int(r[0]) for r in rows if r[2] is not None and r[1] is None}
        large = {
            c for c, j in json_of.items() if len((j or "").encode()) >= packed_counts.MIN_PACKED
        }
        assert large and len(large) < len(json_of)
        assert packed == large
        assert _counts_as_json(store) == json_of
        assert _ranked(store) == want
    # the in-memory index reads them too, to the same pages
    with Store(path, counter=EstimateCounter(), resident_mb=64) as store:
        view = built_view(store)
        assert view.rows == len(json_of)
        assert _ranked(store) == want


@pytest.mark.sqlite_only
def test_opening_a_store_of_turns_counts_kept_as_text_compresses_them_and_ranks_the_same(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    turns = [
        f"Caroline said, on day {i} the lake froze at dawn while config_{i} reloaded twice"
        for i in range(60)
    ]
    with Store(path, counter=EstimateCounter()) as store:
        store.put_many([*_TEXTS, *turns], kind="turn")
        want = _ranked(store)
        json_of = _counts_as_json(store)
        # as the release before wrote them: below 1024 bytes as text, larger ones compressed
        store.conn.executemany(
            Sql("UPDATE chunks SET term_counts = ?, packed_counts = NULL WHERE id = ?"),
            [(j, cid) for cid, j in json_of.items() if len((j or "").encode()) < 1024],
        )
        store.conn.execute(
            Sql("DELETE FROM _migrations WHERE name = 'm_chunk_term_counts_packed_small'")
        )
    with Store(path, counter=EstimateCounter(), resident_mb=0) as store:
        rows = store.conn.execute(Sql("SELECT id, term_counts FROM chunks")).fetchall()
        as_text = {int(r[0]) for r in rows if r[1] is not None}
        assert as_text == {
            c for c, j in json_of.items() if len((j or "").encode()) < packed_counts.MIN_PACKED
        }
        assert len(as_text) == 1  # the two-word reply; the turns' are compressed now
        assert _counts_as_json(store) == json_of
        assert _ranked(store) == want


@pytest.mark.sqlite_only
def test_opening_a_store_of_counts_compressed_as_json_compacts_them_and_ranks_the_same(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    turns = [
        f"Caroline said, on day {i} the lake froze at dawn while config_{i} reloaded twice"
        for i in range(60)
    ]
    with Store(path, counter=EstimateCounter()) as store:
        store.put_many([*_TEXTS, *turns], kind="turn")
        want = _ranked(store)
        json_of = _counts_as_json(store)
        # as the release before compressed them: the JSON itself
        packer = zstandard.ZstdCompressor(level=3, write_checksum=True)
        store.conn.executemany(
            Sql("UPDATE chunks SET packed_counts = ? WHERE id = ? AND packed_counts IS NOT NULL"),
            [(packer.compress((j or "").encode()), cid) for cid, j in json_of.items()],
        )
        store.conn.execute(
            Sql("DELETE FROM _migrations WHERE name = 'm_chunk_term_counts_compact'")
        )
    with Store(path, counter=EstimateCounter(), resident_mb=0) as store:
        rows = store.conn.execute(Sql("SELECT packed_counts FROM chunks")).fetchall()
        texts = [
            zstandard.ZstdDecompressor().decompress(bytes(r[0])).decode()
            for r in rows
            if r[0] is not None
        ]
        assert len(texts) == len(json_of) - 1  # the two-word reply's stay as text
        assert all(t[:1].isdigit() for t in texts)
        assert _counts_as_json(store) == json_of
        assert _ranked(store) == want
    with Store(path, counter=EstimateCounter(), resident_mb=64) as store:
        assert built_view(store).rows == len(json_of)
        assert _ranked(store) == want
