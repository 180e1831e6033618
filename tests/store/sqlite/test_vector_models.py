"""SQLite keeps each vector's model as the id of its name (migration m_vector_model_ids)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from offload.core.tokens import EstimateCounter
from offload.llm.embedding import StaticEmbedder
from offload.store.life.maintenance import doctor
from offload.store.store import Store
from offload.store.write import vectors

pytestmark = pytest.mark.sqlite_only

_TEXTS = [
    "Caroline said, the adoption agency called back about the interview",
    "Melanie said, I painted a sunrise over the lake last weekend",
    "the build broke on the main branch after the config change",
    "we adopted a puppy from the shelter near the beach",
]
_QUERIES = ["adoption interview", "a new dog at home", "painting by the water", "ci failure"]


def _raw(store: Store) -> sqlite3.Connection:
    assert isinstance(store.conn, sqlite3.Connection)
    return store.conn


def _ranked(store: Store) -> list[list[tuple[int, float]]]:
    return [[(h.entry.id, h.score) for h in store.search(q, limit=10)] for q in _QUERIES]


def _models(store: Store) -> list[tuple[int, str]]:
    return [
        (int(r[0]), str(r[1])) for r in _raw(store).execute("SELECT id, model FROM entry_vectors")
    ]


def test_a_vector_keeps_its_models_id_and_the_name_is_stored_once(
    tmp_path: Path, model: StaticEmbedder
) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter(), embedder=model) as store:
        store.put_many(_TEXTS)
        store.put("one more, replacing nothing")
        conn = _raw(store)
        names = conn.execute("SELECT id, name FROM vector_models").fetchall()
        assert [tuple(r) for r in names] == [(1, model.model_id)]
        assert {m for _, m in _models(store)} == {"1"}
        # a vector written again (INSERT OR REPLACE) keeps the name's id: the outer
        # statement's conflict clause must not replace the name's row
        entry = store.resolve("id:1")
        vectors.insert(conn, entry.id, model.model_id, vectors.encode_one(model, "again"))
        assert [tuple(r) for r in conn.execute("SELECT id, name FROM vector_models")] == [
            (1, model.model_id)
        ]
        assert {m for _, m in _models(store)} == {"1"}
        assert vectors.missing(conn, model.model_id) == 0
        assert vectors.missing(conn, "all-MiniLM-L6-v2-int8") == len(_TEXTS) + 1


def test_opening_a_store_of_model_names_keeps_their_ids_and_ranks_the_same(
    tmp_path: Path, model: StaticEmbedder
) -> None:
    path = tmp_path / "s.db"
    with Store(path, counter=EstimateCounter(), embedder=model) as store:
        store.put_many(_TEXTS)
        want = _ranked(store)
        ids = [i for i, _ in _models(store)]
        # as the release before stored them: the name on every row
        conn = _raw(store)
        conn.execute("DROP TRIGGER entry_vectors_model_named")
        conn.execute("DROP TRIGGER entry_vectors_model_renamed")
        conn.execute("UPDATE entry_vectors SET model = ?", (model.model_id,))
        conn.execute("DROP TABLE vector_models")
        conn.execute("DELETE FROM _migrations WHERE name = 'm_vector_model_ids'")
        assert {m for _, m in _models(store)} == {model.model_id}
    with Store(path, counter=EstimateCounter(), embedder=model) as store:
        assert _models(store) == [(i, "1") for i in ids]  # the rows' ids stay
        assert _ranked(store) == want
        assert vectors.missing(_raw(store), model.model_id) == 0
        assert doctor(store).clean


def test_a_name_an_older_offload_writes_after_the_conversion_becomes_its_id(
    tmp_path: Path, model: StaticEmbedder
) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter(), embedder=model) as store:
        first, second = (r.entry.id for r in store.put_many(_TEXTS[:2]))
        want = _ranked(store)
        conn = _raw(store)
        data = conn.execute(
            "SELECT CAST(data AS BLOB) FROM entry_vectors WHERE entry_id = ?", (second,)
        ).fetchone()[0]
        # the statement of the release before, the name as it is
        conn.execute("DELETE FROM entry_vectors WHERE entry_id = ?", (second,))
        conn.execute(
            "INSERT INTO entry_vectors (entry_id, model, data) VALUES (?, ?, ?)",
            (second, model.model_id, data),
        )
        assert [tuple(r) for r in conn.execute("SELECT id, name FROM vector_models")] == [
            (1, model.model_id)
        ]
        assert {m for _, m in _models(store)} == {"1"}
        assert _ranked(store) == want
        # another model's name, written by an update, gets an id of its own
        conn.execute(
            "UPDATE entry_vectors SET model = ? WHERE entry_id = ?",
            ("all-MiniLM-L6-v2-int8", first),
        )
        names = [tuple(r) for r in conn.execute("SELECT id, name FROM vector_models")]
        assert names == [(1, model.model_id), (2, "all-MiniLM-L6-v2-int8")]
        assert sorted(m for _, m in _models(store)) == ["1", "2"]
        assert vectors.missing(conn, model.model_id) == 1
