"""A batch of puts (``put_many``; bulk COPY on PostgreSQL) keeps every guarantee of one-by-one
puts: repeats answered with the stored entry, blocks once, ids never reused, same search."""

from __future__ import annotations

from pathlib import Path

import pytest

from offload.core.tokens import EstimateCounter
from offload.errors import InvalidInput, NotFound
from offload.llm.embedding import StaticEmbedder
from offload.store.backend import Sql
from offload.store.store import Store


def _blocks(store: Store) -> int:
    return int(store.conn.execute(Sql("SELECT count(*) FROM blocks")).fetchone()[0])


def test_a_batch_stores_each_new_content_once_and_answers_repeats_with_the_stored_entry(
    store: Store,
) -> None:
    before = store.put("alpha was stored before the batch\n", scope="s").entry
    got = store.put_many(
        [
            "alpha was stored before the batch\n",
            "bravo arrives in the batch\n",
            "bravo arrives in the batch\n",
            "charlie arrives too\n",
        ],
        scope="s",
    )
    assert [r.created for r in got] == [False, True, False, True]
    assert got[0].entry.id == before.id
    assert got[1].entry.id == got[2].entry.id
    assert got[1].entry.ref != got[3].entry.ref
    assert store.count() == 3 and store.peek("s")["entries"] == 3
    assert store.read(got[3].entry.ref, "s") == "charlie arrives too\n"
    assert [h.entry.id for h in store.search("bravo", scope="s")] == [got[1].entry.id]


def test_a_batch_stores_a_block_shared_with_another_scope_once(store: Store) -> None:
    store.put("the same words in two scopes\n", scope="a")
    got = store.put_many(["the same words in two scopes\n", "only in b\n"], scope="b")
    assert [r.created for r in got] == [True, True]
    assert _blocks(store) == 2
    assert {h.entry.scope for h in store.search("same words")} == {"a", "b"}


def test_ids_a_batch_draws_are_never_reused_after_a_forget(store: Store) -> None:
    first = store.put_many([f"first batch text {i}\n" for i in range(3)], scope="s")
    store.forget(first[-1].entry.ref, scope="s")
    second = store.put_many([f"second batch text {i}\n" for i in range(2)], scope="s")
    assert min(r.entry.id for r in second) > max(r.entry.id for r in first)


def test_a_batch_with_a_bad_content_stores_nothing(store: Store) -> None:
    with pytest.raises(InvalidInput):
        store.put_many(["fine text\n", 42], scope="s")  # type: ignore[list-item]
    assert store.count() == 0


def _second_location(
    store_backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Path | str:
    """Another fresh store on the same backend."""
    if store_backend == "postgresql":
        url: str = request.getfixturevalue("pg_server").create_database()
        return url
    return tmp_path / "single.db"


def test_batched_entries_rank_as_entries_put_one_by_one(
    store_location: Path | str, store_backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    texts = [
        f"the {w} parser failed on line {i} with a timeout\n"
        for i, w in enumerate(["config", "request", "socket", "config", "cache", "token"])
    ] + ["an unrelated note about lunch\n", "the config parser works now\n"]
    question = "config parser timeout"
    with Store(store_location, counter=EstimateCounter()) as batched:
        batched.put_many(texts, scope="s")
        got = [(h.entry.content_hash, round(h.score, 6)) for h in batched.search(question, limit=5)]
    with Store(
        _second_location(store_backend, tmp_path, request), counter=EstimateCounter()
    ) as single:
        for t in texts:
            single.put(t, scope="s")
        want = [(h.entry.content_hash, round(h.score, 6)) for h in single.search(question, limit=5)]
    assert len(got) == 5 and got == want


def test_a_batch_embeds_each_new_entry(store_location: Path | str, model: StaticEmbedder) -> None:
    with Store(store_location, counter=EstimateCounter(), embedder=model) as store:
        got = store.put_many(["vectors for one\n", "vectors for two\n", "vectors for one\n"])
        rows = store.conn.execute(
            Sql("SELECT entry_id FROM entry_vectors ORDER BY entry_id")
        ).fetchall()
        assert [int(r[0]) for r in rows] == sorted({r.entry.id for r in got})
        assert store.search("vectors two", limit=1)[0].entry.id == got[1].entry.id


def test_many_blocks_are_read_at_once_verified_and_a_missing_one_is_named(store: Store) -> None:
    digests = [store.put(f"block text {i}\n").entry.block_hash for i in range(4)]
    texts = store.block_texts([*digests, digests[0]])
    assert texts == {d: store.block_text(d) for d in digests}
    with pytest.raises(NotFound, match="f" * 16):
        store.block_texts([digests[1], "f" * 64])


def test_a_searchs_statements_do_not_grow_with_the_hits_it_checks_and_shows(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from offload.store.postgres import pgconn

    ran: list[str] = []
    real = pgconn.PgConn.execute

    def counted(self: pgconn.PgConn, sql: Sql, parameters: object = ()) -> pgconn.PgCursor:
        ran.append(sql)
        return real(self, sql, parameters)

    with Store(pg_database, counter=EstimateCounter()) as store:
        store.put_many([f"the parser failed on input number {i} again\n" for i in range(60)])
        statements = []
        for limit in (3, 30):
            store.search("parser failed", limit=limit)  # warm (the first search reads more)
            monkeypatch.setattr(pgconn.PgConn, "execute", counted)
            shown = store.search("parser failed", limit=limit)
            monkeypatch.setattr(pgconn.PgConn, "execute", real)
            assert len(shown) == limit
            statements.append(len(ran))
            ran.clear()
        assert statements[0] == statements[1]
