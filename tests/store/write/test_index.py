"""store.index: the analysed search index and the record of what built it."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offload.core.text import analysis
from offload.core.tokens import EstimateCounter
from offload.errors import StoreError
from offload.store import state
from offload.store.backend import Sql
from offload.store.models import Entry, Filters
from offload.store.sqlite.db import write_tx
from offload.store.store import Store
from offload.store.write import index


def test_rebuilding_the_index_raises_the_version_of_its_record(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        store.put("the deploy failed because the disk was full")
        conn = store.conn
        before = state.version(conn, "search.index", "analysis_version")
        with write_tx(conn):
            index.reindex_chunks(conn)
        assert state.version(conn, "search.index", "analysis_version") == before + 1
        assert index.built_with_current_analysis(conn)
        assert [h.entry.id for h in store.search("disk full")] == [1]


_LOG = "\n".join(f"step {i}: fetched shard{i % 9} of runTests in {i * 7} ms" for i in range(400))


def test_a_body_with_its_later_chunks_left_analyses_them_to_the_same_chunks() -> None:
    whole = index.prepare(_LOG, 10, 4000)
    sizes = [c.end - c.start for c in whole.chunks]
    first = sum(sizes[:3])  # the first three chunks' characters
    part = index.prepare(_LOG, 10, 4000, analyse_chars=first)
    assert len(whole.chunks) == 40 and not whole.later
    assert len(part.analysed) == 3 and len(part.later) == 37 and part.has_chunks
    assert len(index.prepare(_LOG, 10, 4000, analyse_chars=first + 1).analysed) == 4
    batches = list(part.batches(sum(sizes[3:19])))  # 16 chunks' worth, then less
    assert [len(b) for b in batches][:2] == [3, 16] and sum(map(len, batches)) == 40
    assert tuple(c for b in batches for c in b) == whole.chunks == part.chunks
    assert part.vocabulary == whole.vocabulary
    # from a later line on, the offsets stay the body's own
    tail = index.prepare(_LOG, 10, 4000, from_line=101, analyse_chars=0)
    assert tail.analysed == () and tail.chunks == index.prepare(_LOG, 10, 4000, 101).chunks
    assert tail.chunks[0].start_line == 101 and tail.chunks[0].start == _LOG.index("step 100:")


def test_chunks_analysed_without_their_joined_terms_count_and_join_them_alike() -> None:
    joined = index.prepare(_LOG, 10, 4000)
    counted = index.prepare(_LOG, 10, 4000, analyse_chars=500, joined=False)
    assert counted.chunks == joined.chunks  # offsets and cached counts
    for a, b in zip(counted.chunks, joined.chunks, strict=True):
        assert a.joined is None and b.joined is not None
        assert list(a.counts.items()) == list(b.counts.items())
        assert a.terms == b.terms  # made on demand, the same string
    # what a PostgreSQL statement takes: a function for the terms, not the string
    (row,) = index.chunk_rows(counted.chunks[:1])
    assert callable(row[4]) and row[4]() == joined.chunks[0].terms
    assert index.chunk_rows(joined.chunks[:1])[0][4] == joined.chunks[0].terms


def test_an_empty_body_has_no_chunks_to_index() -> None:
    empty = index.prepare("", 10, 4000, analyse_chars=2)
    assert not empty.has_chunks and empty.chunks == () and list(empty.batches(8)) == []


def _spans(*sizes: int) -> list[index.Span]:
    return [index.Span(i, i, 0, n, "x" * n) for i, n in enumerate(sizes)]


def test_chunks_are_grouped_by_size_each_group_reaching_it_but_the_last() -> None:
    groups = index.split_by_size(_spans(3, 4, 10, 1, 1, 2), 7)
    assert [[s.end for s in g] for g in groups] == [[3, 4], [10], [1, 1, 2]]
    assert [len(g) for g in index.split_by_size(_spans(5, 5), 1)] == [1, 1]  # one at least
    assert index.split_by_size([], 7) == []


@given(
    st.dictionaries(
        st.text(st.characters(codec="utf-8"), min_size=1, max_size=12),
        st.integers(min_value=1, max_value=10**6),
        max_size=20,
    )
)
def test_cached_term_counts_are_the_json_of_the_length_then_each_count(
    counts: dict[str, int],
) -> None:
    # the interleaving fast path and the escaping fallback both write json.dumps' text
    whole = {index.LENGTH_KEY: sum(counts.values()), **counts}
    written = index.counts_json(counts)
    assert written == json.dumps(whole, ensure_ascii=False, separators=(",", ":"))
    assert json.loads(written) == whole and written.startswith(index.LENGTH_FIRST)


def test_counts_past_the_bound_of_remembered_count_texts_are_still_written_right() -> None:
    # every count a new number: the remembered texts are forgotten and made again
    for start in range(0, 3 * index.COUNT_TEXTS_MAX, 997):
        counts = {f"t{i}": start + i for i in range(1, 1000)}
        written = json.loads(index.counts_json(counts))
        assert written == {index.LENGTH_KEY: sum(counts.values()), **counts}


@given(
    st.text(alphabet='aZé東9_./-\\ \n"nu{}\u0301\x1c\u2028', max_size=400),
    st.integers(min_value=1, max_value=4),
    st.integers(min_value=64, max_value=90),
)
def test_a_vocabulary_left_to_the_chunks_runs_is_the_body_s_own(
    text: str, lines: int, chars: int
) -> None:
    # counts without joined terms (a PostgreSQL put): the vocabulary is made from the
    # chunks' runs when no chunk ends inside a line, else from the body as before
    whole = tuple(sorted(analysis.surface_words(text)))
    prepared = index.prepare(text, lines, chars, analyse_chars=64, joined=False)
    pieces = [c.text for c in prepared.analysed] + [s.text for s in prepared.later]
    at_line_ends = all(p.endswith("\n") for p in pieces[:-1])
    assert (prepared.vocabulary is None) is at_line_ends
    assert prepared.words() == whole
    assert index.prepare(text, lines, chars).vocabulary == whole  # joined: from the body


def test_a_vocabulary_is_left_to_the_chunks_only_when_their_runs_are_the_body_s() -> None:
    lines = "\n".join(f"alpha{i} bravo charlie" for i in range(200)) + "\n"
    long_line = "delta " * 200  # cut into several chunks, maybe inside a word
    big = lines * (index.VOCABULARY_SCAN_CHARS // len(lines) + 1)  # past the scan bound
    for text, left in ((lines, True), (lines + long_line, False), (big, False)):
        prepared = index.prepare(text, 5, 400, analyse_chars=0, joined=False)
        assert (prepared.vocabulary is None) is left
        scanned = text[: index.VOCABULARY_SCAN_CHARS]
        assert prepared.words() == tuple(sorted(analysis.surface_words(scanned)))


def _index_rows(store: Store) -> list[tuple[object, ...]]:
    return [
        tuple(r)
        for r in store.conn.execute(
            Sql(
                "SELECT c.start_line, c.end_line, c.start, c.end, c.term_counts, c.packed_counts, "
                "s.terms FROM chunks c JOIN search_body s ON s.rowid = c.id ORDER BY c.start",
                'SELECT c.start_line, c.end_line, c.start, c."end", c.term_counts, c.packed_counts, s.terms FROM chunks c JOIN search_body s ON s.rowid = c.id ORDER BY c.start',
            )
        )
    ]


def _block_rows(store: Store) -> list[tuple[object, ...]]:
    return [
        tuple(r)
        for r in store.conn.execute(
            Sql("SELECT hash, size, lines, codec, data FROM blocks ORDER BY hash")
        )
    ]


def test_a_big_body_analysed_in_spilled_batches_is_indexed_as_a_small_one_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = "".join(
        f"line {i}: parseConfig reads café {i * 7} from the déjà-vu cache\n" for i in range(900)
    )
    stores: dict[str, tuple[Store, Entry, list[tuple[str, int, int]]]] = {}
    for name, threshold in (("whole", 10**9), ("frozen", 1000)):
        monkeypatch.setattr(index, "FREEZE_CHARS", threshold)
        monkeypatch.setattr(index, "FREEZE_BATCH_CHARS", 5000)
        seen: list[tuple[str, int, int]] = []
        store = Store(tmp_path / f"{name}.db", counter=EstimateCounter())

        def told(
            stage: str, done: int, total: int, seen: list[tuple[str, int, int]] = seen
        ) -> None:
            seen.append((stage, done, total))

        entry = store.put(body, label=name, progress=told).entry
        assert store.read(name) == body
        stores[name] = (store, entry, seen)
    (whole, whole_entry, quiet), (frozen, frozen_entry, reported) = stores.values()
    assert _index_rows(frozen) == _index_rows(whole)
    assert _block_rows(frozen) == _block_rows(whole)  # spooled into its row: the same bytes
    assert frozen_entry.content_hash == whole_entry.content_hash
    assert (frozen_entry.tokens, frozen_entry.lines) == (whole_entry.tokens, whole_entry.lines)
    assert [h.entry.id for h in frozen.search("parseConfig 637")] == [frozen_entry.id]
    # a small body reports nothing; a big one each batch analysed, then each written
    assert quiet == []
    stages = [s for s, _, _ in reported]
    assert stages == sorted(stages)  # every "analysing" before the first "writing"
    total = len(body)
    for stage in ("analysing", "writing"):
        done = [d for s, d, t in reported if s == stage and t == total]
        assert len(done) > 1 and done == sorted(done) and done[-1] == total


def test_a_big_body_that_cannot_be_spilled_is_refused_saying_what_to_set_and_stores_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index, "FREEZE_CHARS", 1000)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    store = Store(tmp_path / "s.db", counter=EstimateCounter())
    with pytest.raises(StoreError, match=r"temporary file .*set TMPDIR"):
        store.put("a line of a big body\n" * 200)
    assert store.count(Filters()) == 0
