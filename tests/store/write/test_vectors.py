"""store.vectors: entry vectors stored with the entry, an in-process matrix, the backfill."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from offload.config import MINILM_MODEL, SearchSettings
from offload.core.tokens import EstimateCounter
from offload.llm.embedding import StaticEmbedder, load_embedder
from offload.llm.packages import Notices
from offload.store.backend import Sql
from offload.store.store import Store
from offload.store.write import vectors
from realparts import require

# a row's model by name: SQLite keeps the id of its name (migration m_vector_model_ids)
_NAMED = (
    "SELECT coalesce(m.name, v.model) AS model, v.data AS data FROM entry_vectors v "
    "LEFT JOIN vector_models m ON m.id = v.model WHERE {where}"
)
_NAMED_PG = "SELECT model, data FROM entry_vectors WHERE {where}"


def _stored(store: Store, entry_id: int) -> sqlite3.Row | None:
    row: sqlite3.Row | None = store.conn.execute(
        Sql(_NAMED.format(where="entry_id = ?"), _NAMED_PG.format(where="entry_id = %s")),
        (entry_id,),
    ).fetchone()
    return row


def test_a_vector_survives_packing_in_four_bits_a_component(model: StaticEmbedder) -> None:
    vec = model.encode(["the deploy failed because the disk was full"])[0]
    data = vectors.pack(vec)
    assert len(data) == 4 + 128
    back = vectors.unpack(data)
    assert back.dtype == np.float32 and back.shape == vec.shape
    assert float(back @ vec) / float(np.linalg.norm(back)) > 0.98
    assert not vectors.unpack(vectors.pack(np.zeros(256, np.float32))).any()


def _int8_form(vector: NDArray[np.float32]) -> bytes:
    """A vector as stores kept it before 4 bits: a positive float32 scale, int8 parts."""
    scale = float(np.max(np.abs(vector))) / 127.0
    q = np.clip(np.rint(vector / scale), -127, 127).astype(np.int8)
    return bytes(np.float32(scale).tobytes()) + bytes(q.tobytes())


def test_vectors_stored_in_the_int8_form_read_back_beside_four_bit_ones(
    model: StaticEmbedder,
) -> None:
    vecs = model.encode(["lake at dawn", "a kernel panic", "Caroline's support group"])
    older = _int8_form(vecs[0])
    rows = vectors.unpack_rows([older, vectors.pack(vecs[1]), vectors.pack(vecs[2])])
    assert rows.shape == (3, 256)
    assert float(rows[0] @ vecs[0]) > 0.999
    assert np.array_equal(rows[1], vectors.unpack(vectors.pack(vecs[1])))
    together = vectors.unpack_rows([vectors.pack(v) for v in vecs])
    assert np.array_equal(together[2], rows[2])


def test_an_odd_number_of_components_keeps_one_byte_each() -> None:
    vec = np.linspace(-1.0, 1.0, 255, dtype=np.float32)
    data = vectors.pack(vec)
    assert len(data) == 4 + 255
    assert float(np.max(np.abs(vectors.unpack(data) - vec))) < 0.01


def test_put_stores_the_entrys_vector_with_the_model_id(
    hybrid: Store, model: StaticEmbedder
) -> None:
    body = "Melanie said, I painted a sunrise by the lake"
    put = hybrid.put(body, topic="painting")
    row = _stored(hybrid, put.entry.id)
    assert row is not None and row["model"] == model.model_id
    expected = model.encode([vectors.entry_text("painting", "", "", body)])[0]
    assert float(vectors.unpack(bytes(row["data"])) @ expected) > 0.98


def test_a_store_without_a_model_stores_no_vectors(store: Store) -> None:
    put = store.put("no model here")
    assert _stored(store, put.entry.id) is None
    assert store.embedder is None and store.vector_matrix is None


def test_forgetting_an_entry_removes_its_vector(hybrid: Store) -> None:
    put = hybrid.put("short lived")
    hybrid.forget(f"id:{put.entry.id}")
    assert _stored(hybrid, put.entry.id) is None


def test_new_metadata_gives_a_new_vector(hybrid: Store) -> None:
    put = hybrid.put("a body about nothing in particular")
    before = bytes(_stored(hybrid, put.entry.id)["data"])  # type: ignore[index]
    hybrid.update(f"id:{put.entry.id}", topic="kubernetes rollout postmortem")
    after = bytes(_stored(hybrid, put.entry.id)["data"])  # type: ignore[index]
    assert before != after


class _LockProbe:
    """The real model, checking while it encodes that another connection can write."""

    def __init__(self, inner: StaticEmbedder, path: Path) -> None:
        self.inner = inner
        self.path = path
        self.writable: list[bool] = []

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        other = sqlite3.connect(str(self.path), timeout=0, isolation_level=None)
        try:
            other.execute(Sql("BEGIN IMMEDIATE"))
            other.execute(Sql("ROLLBACK"))
            self.writable.append(True)
        except sqlite3.OperationalError:
            self.writable.append(False)
        finally:
            other.close()
        return self.inner.encode(texts)


def test_put_embeds_without_holding_the_write_lock(tmp_path: Path, model: StaticEmbedder) -> None:
    path = tmp_path / "offload.db"
    probe = _LockProbe(model, path)
    with Store(path, counter=EstimateCounter(), embedder=probe) as s:
        put = s.put("written while nobody holds the lock")
        s.update(f"id:{put.entry.id}", summary="and updated the same way")
    assert probe.writable == [True, True]


def test_the_matrix_picks_up_new_vectors_and_drops_replaced_ones(
    hybrid: Store, model: StaticEmbedder
) -> None:
    matrix = hybrid.vector_matrix
    assert matrix is not None
    a = hybrid.put("the build broke on the main branch").entry.id
    ids, rows = matrix.refresh(hybrid.conn)
    assert ids.tolist() == [a] and rows.shape == (1, 256)
    b = hybrid.put("we adopted a puppy from the shelter").entry.id
    hybrid.update(f"id:{a}", topic="ci failure")
    ids, rows = matrix.refresh(hybrid.conn)
    assert sorted(i for i in ids.tolist() if i >= 0) == [a, b]
    q = model.encode(["a new dog at home"])[0]
    close, _floor = vectors.nearest(ids, rows, q, 2)
    assert [eid for eid, _ in close] == [b, a]


def test_a_growing_array_appends_in_place_and_leaves_earlier_views_as_they_were() -> None:
    grown = vectors.Growing(np.arange(6, dtype=np.float32).reshape(3, 2))
    first = grown.extend(np.full((1, 2), 9, np.float32))  # full: moved to a larger buffer
    before = first.copy()
    second = grown.extend(np.full((2, 2), 7, np.float32))  # the spare room: no copy
    assert np.shares_memory(first, second)
    assert np.array_equal(first, before)  # a reader's view is untouched by the append
    assert second.tolist() == [[0, 1], [2, 3], [4, 5], [9, 9], [7, 7], [7, 7]]
    assert np.array_equal(grown.rows, second)


def test_the_matrix_refreshed_row_by_row_equals_one_read_of_every_row(
    hybrid: Store, model: StaticEmbedder
) -> None:
    matrix = hybrid.vector_matrix
    assert matrix is not None
    hybrid.put("the first note")
    matrix.refresh(hybrid.conn)
    matrix.prefixes()  # built, so it grows with the rows too
    for i in range(40):
        hybrid.put(f"note {i}: the {['build', 'puppy', 'disk', 'deploy'][i % 4]} again")
        matrix.refresh(hybrid.conn)
    ids, rows = matrix.refresh(hybrid.conn)
    fresh = vectors.VectorMatrix(matrix.model_id)
    all_ids, all_rows = fresh.refresh(hybrid.conn)
    assert ids.tolist() == all_ids.tolist()
    assert np.array_equal(rows.decoded(), all_rows.decoded())
    assert np.allclose(matrix.prefixes(), vectors.unit_prefixes(all_rows))
    assert matrix.sample() is None  # the floor is over every row: no float32 copy of them


def _packed(n: int, seed: int = 5) -> list[bytes]:
    rows = _rows(n, seed=seed)
    rows[3] = 0.0  # a zero vector packs with scale 1
    return [vectors.pack(r) for r in rows]


def test_the_matrix_holds_a_byte_a_component_and_decodes_to_the_float32_rows() -> None:
    stored = _packed(3 * 1024 + 7)
    codes = vectors.unpack_codes(stored)
    floats = vectors.unpack_rows(stored)
    assert codes.nbytes == len(stored) * (256 + 4)  # float32 rows: 1,024 bytes each
    assert codes.nbytes * 3 < floats.nbytes
    assert np.array_equal(codes.decoded(), floats)
    picked = [5, 1, 3070, 3]
    assert np.array_equal(codes[picked].decoded(), floats[picked])
    assert np.array_equal(codes[::7].contiguous().decoded(), floats[::7])
    assert np.array_equal(vectors.unit_prefixes(codes), vectors.unit_prefixes(floats))
    mixed = vectors.unpack_codes([_int8_form(floats[0]), *stored[:2]])
    assert np.array_equal(mixed[1:].decoded(), floats[:2])


def test_rows_held_as_codes_rank_as_their_float32_rows() -> None:
    stored = _packed(2 * vectors.COARSE_ROWS + 11)
    codes, floats = vectors.unpack_codes(stored), vectors.unpack_rows(stored)
    ids = np.arange(1, len(stored) + 1, dtype=np.int64)
    prefixes = vectors.unit_prefixes(floats)
    sample = vectors.floor_rows(codes).contiguous()  # what VectorMatrix.sample() holds
    for query in (floats[17], floats[-1], _rows(1, seed=9)[0]):
        allowed = ids[ids % 3 == 0]
        for held, as_floats in (
            (vectors.nearest(ids, codes, query, 30), vectors.nearest(ids, floats, query, 30)),
            (
                vectors.nearest(ids, codes, query, 30, allowed, prefixes, sample),
                vectors.nearest(ids, floats, query, 30, allowed, prefixes),
            ),
        ):
            (close, floor), (close_f, floor_f) = held, as_floats
            assert [e for e, _ in close] == [e for e, _ in close_f]
            assert np.allclose([s for _, s in close], [s for _, s in close_f], rtol=0, atol=1e-6)
            assert abs(floor - floor_f) < 1e-6


def test_backfill_embeds_the_entries_stored_without_a_model(
    tmp_path: Path, model: StaticEmbedder
) -> None:
    path = tmp_path / "offload.db"
    with Store(path, counter=EstimateCounter()) as plain:
        ids = [plain.put(f"entry number {i} about topic {i % 7}").entry.id for i in range(300)]
        plain.forget(f"id:{ids[5]}")
    seen: list[tuple[int, int]] = []
    with Store(path, counter=EstimateCounter(), embedder=model) as s:
        assert vectors.missing(s.conn, model.model_id) == 299
        assert vectors.backfill(s, progress=lambda done, total: seen.append((done, total))) == 299
        assert vectors.missing(s.conn, model.model_id) == 0
        assert vectors.backfill(s) == 0
        stored = s.conn.execute(Sql("SELECT count(*) FROM entry_vectors")).fetchone()[0]
    assert stored == 299
    assert seen[-1] == (299, 299) and len(seen) == 2


def test_backfill_without_a_model_does_nothing(store: Store) -> None:
    store.put("lexical only")
    assert vectors.backfill(store) == 0


def _rows(n: int, dim: int = 256, seed: int = 3) -> NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    # a prefix that carries most of the signal, as in a Matryoshka-trained model
    rows = rng.standard_normal((n, dim)).astype(np.float32)
    rows[:, vectors.COARSE_DIMS :] *= 0.3
    out: NDArray[np.float32] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return out


def test_the_two_pass_nearest_ranks_by_the_whole_vector_and_keeps_the_filter() -> None:
    n = vectors.COARSE_ROWS + 5000
    rows = _rows(n)
    ids = np.arange(1, n + 1, dtype=np.int64)
    prefixes = vectors.unit_prefixes(rows)  # what VectorMatrix.prefixes() holds
    assert prefixes.shape == (n, vectors.COARSE_DIMS)
    query = rows[123]
    exact, floor = vectors.nearest(ids, rows, query, 20)
    fast, fast_floor = vectors.nearest(ids, rows, query, 20, prefixes=prefixes)
    assert fast[0] == exact[0] and fast[0][0] == 124  # the row itself, similarity 1
    assert [s for _, s in fast] == sorted((s for _, s in fast), reverse=True)
    assert len({e for e, _ in fast} & {e for e, _ in exact}) >= 18
    assert fast_floor == floor
    allowed = ids[ids % 2 == 0]
    kept, _ = vectors.nearest(ids, rows, query, 20, allowed=allowed, prefixes=prefixes)
    assert kept and all(e % 2 == 0 for e, _ in kept)


def test_the_floor_from_a_copied_sample_is_the_floor_from_the_whole_matrix() -> None:
    n = 3 * vectors.COARSE_ROWS
    rows = _rows(n)
    ids = np.arange(1, n + 1, dtype=np.int64)
    sample = np.ascontiguousarray(vectors.floor_rows(rows))  # what VectorMatrix.sample() holds
    assert len(sample) < n
    for query in (rows[7], rows[n - 1]):
        close, floor = vectors.nearest(ids, rows, query, 10)
        again, copied = vectors.nearest(ids, rows, query, 10, sample=sample)
        assert again == close and copied == floor


def test_put_many_stores_the_vectors_single_puts_store(
    tmp_path: Path, model: StaticEmbedder
) -> None:
    texts = [f"Caroline said, the {w} game went well on day {i}" for i, w in enumerate("abcdefg")]
    many = Store(tmp_path / "many.db", counter=EstimateCounter(), embedder=model)
    one = Store(tmp_path / "one.db", counter=EstimateCounter(), embedder=model)
    try:
        batch = many.put_many([*texts, texts[0]], scope="s")
        singles = [one.put(t, scope="s") for t in texts]
        assert [r.created for r in batch] == [True] * len(texts) + [False]
        for b, s in zip(batch, singles, strict=False):
            assert bytes(_stored(many, b.entry.id)["data"]) == bytes(  # type: ignore[index]
                _stored(one, s.entry.id)["data"]  # type: ignore[index]
            )
    finally:
        many.close()
        one.close()


class _Renamed:
    """The real static model under another model id: what a store sees when
    ``search.embedding_model`` changes between two processes."""

    def __init__(self, inner: StaticEmbedder, model_id: str) -> None:
        self.inner = inner
        self.model_id = model_id

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        return self.inner.encode(texts)


def test_an_entry_reembedded_by_another_model_leaves_this_models_matrix(
    path: Path, model: StaticEmbedder
) -> None:
    with (
        Store(path, counter=EstimateCounter(), embedder=model) as mine,
        Store(path, counter=EstimateCounter(), embedder=_Renamed(model, "other")) as theirs,
    ):
        matrix = mine.vector_matrix
        assert matrix is not None
        a = mine.put("the build broke on the main branch").entry.id
        b = mine.put("we adopted a puppy from the shelter").entry.id
        ids, _rows = matrix.refresh(mine.conn)
        assert sorted(ids.tolist()) == [a, b]
        theirs.update(f"id:{a}", topic="ci failure")  # its vector is now the other model's
        assert _stored(mine, a)["model"] == "other"  # type: ignore[index]
        ids, rows = matrix.refresh(mine.conn)
        assert [i for i in ids.tolist() if i >= 0] == [b]
        q = model.encode(["the build broke on the main branch"])[0]
        close, _floor = vectors.nearest(ids, rows, q, 2)
        assert [eid for eid, _ in close] == [b]
        assert matrix.similarity(q, [a, b]).keys() == {b}


@functools.cache
def _minilm() -> vectors.Encoder:
    loaded = load_embedder(SearchSettings(embedding_model=MINILM_MODEL), notices=Notices())
    require(loaded is not None, "offload[tools] is not installed (pip install 'offload[tools]')")
    assert loaded is not None
    return loaded


@pytest.mark.slow
def test_a_store_written_with_one_model_and_searched_with_another_mixes_no_vectors(
    path: Path, model: StaticEmbedder
) -> None:
    minilm = _minilm()
    with Store(path, counter=EstimateCounter(), embedder=model) as s:
        dog = s.put("we adopted a puppy from the shelter", topic="pets").entry.id
        ci = s.put("the build broke on the main branch", topic="ci").entry.id
    with Store(path, counter=EstimateCounter(), embedder=minilm) as s:
        assert s.vector_matrix is not None
        assert not s.vector_matrix.coarse  # MiniLM's prefixes are no embeddings
        # 256-dimension vectors of the static model beside a 384-dimension query: none read,
        # so the search is lexical alone (the semantic side would add the other entry)
        found = s.search("puppy")
        assert [r.entry.id for r in found] == [dog]
        assert s.vector_matrix is not None
        ids, _rows = s.vector_matrix.refresh(s.conn)
        assert ids is None or not len(ids)
        assert vectors.backfill(s) == 2
        ids, rows = s.vector_matrix.refresh(s.conn)
        assert sorted(ids.tolist()) != [] and rows.shape == (2, 384)
        named = Sql(_NAMED.format(where="1 = 1"), _NAMED_PG.format(where="1 = 1"))
        assert {r["model"] for r in s.conn.execute(named)} == {MINILM_MODEL}
        # compared by meaning, through MiniLM's vectors
        close = s.vector_matrix.similarity(minilm.encode(["a new dog at home"])[0], [dog, ci])
        assert close[dog] > close[ci]
        assert s.search("puppy")[0].entry.id == dog
    with Store(path, counter=EstimateCounter(), embedder=model) as s:
        assert s.vector_matrix is not None
        ids, _rows = s.vector_matrix.refresh(s.conn)
        assert ids is None or not len(ids)  # MiniLM's vectors are not this model's
        assert [r.entry.id for r in s.search("puppy")] == [dog]


_FOUR_BITS_MIGRATION = {
    "sqlite": "m_entry_vectors_four_bits",
    "postgresql": "pg_entry_vectors_four_bits",
}


def test_opening_a_store_of_int8_vectors_stores_them_in_four_bits_and_ranks_alike(
    store_location: Path | str, store_backend: str, model: StaticEmbedder
) -> None:
    turns = [
        "Caroline said, I went to a support group yesterday",
        "Melanie said, I painted a sunrise by the lake",
        "the deploy failed because the disk was full",
        "we adopted a puppy named Oscar last spring",
    ]
    queries = ["painting the lake", "a new dog", "disk space outage", "support group"]
    with Store(store_location, counter=EstimateCounter(), embedder=model) as store:
        ids = [r.entry.id for r in store.put_many(turns)]
        # as the release before stored them: int8 parts after a positive scale
        texts = [vectors.entry_text("", "", "", t) for t in turns]
        older = [_int8_form(v) for v in model.encode(texts)]
        store.conn.executemany(
            Sql("UPDATE entry_vectors SET data = ? WHERE entry_id = ?"),
            list(zip(older, ids, strict=True)),
        )
        store.conn.execute(
            Sql("DELETE FROM _migrations WHERE name = ?"), (_FOUR_BITS_MIGRATION[store_backend],)
        )
    with Store(store_location, counter=EstimateCounter(), embedder=model) as store:
        rows = store.conn.execute(
            Sql("SELECT entry_id, data FROM entry_vectors ORDER BY entry_id")
        ).fetchall()
        assert [int(r[0]) for r in rows] == ids
        assert all(len(bytes(r[1])) == 4 + 128 for r in rows)
        for r, text in zip(rows, texts, strict=True):
            back, want = vectors.unpack(bytes(r[1])), model.encode([text])[0]
            assert float(back @ want) / float(np.linalg.norm(back)) > 0.98
        matrix = store.vector_matrix
        assert matrix is not None
        entry_ids, found = matrix.refresh(store.conn)
        before = vectors.unpack_rows(older)
        for query in model.encode(queries):
            ranked, _ = vectors.nearest(entry_ids, found, query, 2)
            was, _ = vectors.nearest(np.array(ids), before, query, 2)
            assert [eid for eid, _ in ranked] == [eid for eid, _ in was]
