"""Impact-ordered postings (store/pgimpact.py) on a real PostgreSQL server: kept exact by
every write path, backfilled for an older store, and read best first to exactly the top
that scoring every match gives."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from offload.core.tokens import EstimateCounter
from offload.store import pgimpact
from offload.store.pgconn import PgConn
from offload.store.store import Store

WORDS = [f"w{i}" for i in range(40)]


def _conn(store: Store) -> PgConn:
    conn = store.conn
    assert isinstance(conn, PgConn)
    return conn


@pytest.fixture
def pg_store(pg_database: str) -> Iterator[Store]:
    with Store(pg_database, counter=EstimateCounter()) as store:
        yield store


def _texts(n: int, seed: int) -> list[str]:
    # a skewed vocabulary (word i about 1/(i+1) as often) and uneven lengths, so the
    # impacts differ and the common words have long lists
    rng = random.Random(seed)
    weights = [1 / (i + 1) for i in range(len(WORDS))]
    return [
        " ".join(rng.choices(WORDS, weights, k=rng.randint(3, 60))) + f" doc{i}\n" for i in range(n)
    ]


def test_every_write_path_keeps_the_postings_exactly_what_the_chunks_hold(
    pg_store: Store,
) -> None:
    conn = _conn(pg_store)
    refs = [pg_store.put(t).entry.ref for t in _texts(20, 1)]  # one by one
    pg_store.put_many(_texts(300, 2))  # COPY
    pg_store.put("\n".join(f"line {i}: " + " ".join(WORDS[:8]) for i in range(3000)))
    assert pgimpact.stale_postings(conn) == 0
    held = int(conn.native("SELECT count(*) FROM impacts", None).fetchone()[0])
    for ref in refs[:10]:
        pg_store.forget(ref)
    assert pgimpact.stale_postings(conn) == 0
    assert int(conn.native("SELECT count(*) FROM impacts", None).fetchone()[0]) < held
    conn.native("DELETE FROM search_body", None)
    assert int(conn.native("SELECT count(*) FROM impacts", None).fetchone()[0]) == 0


def test_an_impact_is_bm25s_term_weight_against_the_stores_reference_length(
    pg_store: Store,
) -> None:
    conn = _conn(pg_store)
    pg_store.put_many(["alpha beta beta gamma\n", "alpha " * 9 + "delta\n"])
    reference = float(conn.native("SELECT length FROM impact_reference", None).fetchone()[0])
    # the second text: alpha 9 times in a chunk of 10 terms
    rows = conn.native(
        "SELECT term, impact FROM impacts WHERE chunk = "
        "(SELECT chunk FROM impacts WHERE term = 'delta')",
        None,
    ).fetchall()
    got = {str(t): float(v) for t, v in rows}
    assert set(got) == {"alpha", "delta"}
    assert got["alpha"] == pytest.approx(pgimpact.impact(9, 10, reference), rel=1e-5)
    assert got["delta"] == pytest.approx(pgimpact.impact(1, 10, reference), rel=1e-5)
    # the reference follows the average each time the chunks have doubled, no sooner
    pg_store.put("alpha " * 200 + "\n")
    again = float(conn.native("SELECT length FROM impact_reference", None).fetchone()[0])
    assert again == reference
    pg_store.put("epsilon zeta\n")
    again = float(conn.native("SELECT length FROM impact_reference", None).fetchone()[0])
    assert again == pytest.approx((4 + 10 + 200 + 2) / 4)
    assert pgimpact.stale_postings(conn) == 0


def test_a_store_from_before_the_postings_is_backfilled_when_opened(pg_database: str) -> None:
    with Store(pg_database, counter=EstimateCounter()) as store:
        store.put_many(_texts(200, 3))
        conn = _conn(store)
        expected = conn.native("SELECT chunk, term FROM impacts ORDER BY 1, 2", None).fetchall()
        conn.native(
            "DROP TABLE impacts; DROP TABLE impact_reference; "
            "DROP FUNCTION offload_impacts_add, offload_impacts_drop, offload_impacts_change, "
            "offload_impacts_truncate CASCADE; "
            "DELETE FROM _migrations WHERE name = 'pg_impact_postings'",
            None,
        )
    with Store(pg_database, counter=EstimateCounter()) as store:
        conn = _conn(store)
        got = conn.native("SELECT chunk, term FROM impacts ORDER BY 1, 2", None).fetchall()
        assert got == expected and len(got) > 200
        assert pgimpact.stale_postings(conn) == 0
        store.put("after the backfill w1 w2\n")
        assert pgimpact.stale_postings(conn) == 0


def _exhaustive(conn: PgConn, idfs: dict[str, float], k: int) -> list[tuple[int, float]]:
    rows = conn.native(
        "SELECT i.chunk, sum(q.idf * i.impact) AS s FROM impacts i "
        "JOIN unnest(%s::text[], %s::float8[]) AS q(term, idf) ON q.term = i.term "
        "GROUP BY i.chunk ORDER BY s DESC, i.chunk LIMIT %s",
        (list(idfs), list(idfs.values()), k),
    ).fetchall()
    return [(int(c), float(s)) for c, s in rows]


@pytest.mark.parametrize("first_depth", [1, 4, 64])
def test_reading_best_first_stops_with_the_top_that_scoring_every_match_gives(
    pg_store: Store, monkeypatch: pytest.MonkeyPatch, first_depth: int
) -> None:
    conn = _conn(pg_store)
    pg_store.put_many(_texts(400, 4))
    monkeypatch.setattr(pgimpact, "FIRST_DEPTH", first_depth)
    rng = random.Random(5)
    for _ in range(8):
        terms = rng.sample(WORDS, rng.randint(1, 5))
        idfs = {t: rng.uniform(0.1, 3.0) for t in terms}
        for k in (1, 10):
            got = pgimpact.top_chunks(conn, idfs, k)
            want = _exhaustive(conn, idfs, k)
            # the same scores in the same order (a tie at the k-th may pick either chunk)
            assert sorted(got.values(), reverse=True) == pytest.approx([s for _c, s in want])
            assert all(got[c] == pytest.approx(s) for c, s in want if c in got)


def test_a_search_on_postgresql_ranks_by_the_postings(pg_store: Store) -> None:
    pg_store.put_many([*_texts(100, 6), "the quokka w39 found the answer\n"])
    hits = pg_store.search("quokka answer", limit=3)
    assert hits and "quokka" in hits[0].snippet
