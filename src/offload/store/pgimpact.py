"""Impact-ordered postings on PostgreSQL: a search's best chunks without scoring every match.

GIN finds the rows holding a term but in no useful order and with no bound on their score,
so ranking a question meant scoring every chunk that holds any of its words: ~25 us a row,
~290k rows (7.7 s) for a typical question at 1M entries (docs/benchmarks.md, "1M"). Here
each (term, chunk) pair is also kept in ``impacts`` with the term's BM25 weight in the chunk
(its *impact*), and a btree on (term, impact DESC) reads any term's postings best first.

The impact is BM25's term-frequency part, FTS5's constants (k1 = 1.2, b = 0.75)::

    impact = tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / reference))

``tf`` is the term's count in the chunk (its tsvector positions, at most 256 as PostgreSQL
keeps), ``length`` the chunk's terms. ``reference`` stands for BM25's average length. An
impact written earlier cannot follow a moving average without being rewritten, so the
reference (``impact_reference``) is the average of the store's chunks while the store is
young, re-taken (and every posting rewritten) each time the chunks have doubled, and fixed
once it was taken over :data:`REFERENCE_SAMPLE` chunks (the migration's backfill of an
older store takes all of its chunks). So ``sum(idf(t) * impact(t, c))`` over a question's
terms is exactly BM25 with the average length frozen at that sample; the IDF is computed
when the question is asked (the counts move; the impacts need not). As a store's chunks
drift from the sample's average, lengths are normalised against the old average: BM25 with
a wrong ``avgdl``, i.e. the balance between a term's count and the chunk's length shifts
(b stays 0.75, but acts as if a little stronger or weaker), the order of equal-length
chunks does not.

:func:`top_chunks` reads each term's postings best first with a threshold-algorithm stop
(Fagin's TA, with NRA's bounds to choose what is scored): after reading ``depth`` postings
of each term, a chunk not seen yet scores at most the sum of each term's last impact read
times its IDF; a seen chunk at most what its seen postings give plus that bound of the
terms it was not seen in. Every seen chunk whose bound passes the k-th best seen lower
bound is scored exactly (its postings looked up by primary key); when the k-th exact score
reaches the unseen chunks' bound, the top ``k`` is exact. Otherwise the terms that could
still lift an unseen chunk into the top (MaxScore's essential terms: all but the smallest
frontiers that together stay below the k-th score) read twice as deep. One statement a
round.

Every write path is covered by triggers on ``search_body`` (the chunks' tsvectors): a
statement's inserted rows (a put's chunks, put_many's COPY, migrate and import, a rebuild)
add their postings in one ``INSERT ... SELECT`` from the transition table; deleted rows
(forget, tombstoning, compaction, ``delete-all``) take theirs with them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# FTS5's bm25() constants (fts5_aux.c): the SQLite backend's ranking uses the same
K1 = 1.2
B = 0.75
# the first round reads this many postings of each term, at least the k asked for
FIRST_DEPTH = 64
# BM25's most per term is (k1 + 1) x IDF; ts_rank gave an unlabelled lexeme at most its
# weight (pgsql.BODY_TERM_WEIGHT) x IDF: the factor that keeps the body's scores on the
# scale of the metadata's (search_meta is still ranked by ts_rank)
TS_RANK_SCALE = 0.1 / (K1 + 1)
# the reference length is the average of the store's chunks until this many have been
# written, then stays: the mean of 1,024 lengths is within ~3 % of the whole's (standard
# error sigma / 32, lengths spreading about as much as their mean), and a later change
# would rewrite every posting
REFERENCE_SAMPLE = 1024
# the advisory lock of a reference's rewrite ("impacts" in ASCII)
REFERENCE_LOCK = 0x696D7061637473

# the postings' expression of a chunk's terms: tf and length from the tsvector (a stripped
# vector has no positions: a count of 1 each)
_TF = "coalesce(array_length(u.positions, 1), 1)"
_LENGTH = f"(SELECT sum({_TF}) FROM unnest(n.terms) AS u)"
_IMPACT = f"{_TF} * {K1 + 1} / ({_TF} + {K1} * ({1 - B} + {B} * n.len / greatest(r.length, 1)))"

# the postings of some search_body rows (``{rows}``: the added ones, or all): each chunk's
# length taken once (inlined, the planner re-counted it for every posting) and the
# reference read once
_POSTINGS = f"""
WITH n AS MATERIALIZED (
    SELECT n.rowid, n.terms, (SELECT sum({_TF}) FROM unnest(n.terms) AS u) AS len
    FROM {{rows}} n
), r AS MATERIALIZED (SELECT length FROM impact_reference)
INSERT INTO impacts (chunk, term, impact)
SELECT n.rowid, u.lexeme, {_IMPACT}
FROM n CROSS JOIN r CROSS JOIN LATERAL unnest(n.terms) AS u
"""
SCHEMA = f"""
CREATE TABLE impact_reference (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    length double precision NOT NULL DEFAULT 1,
    chunks bigint NOT NULL DEFAULT 0  -- how many chunks the length was averaged over
);
INSERT INTO impact_reference DEFAULT VALUES;
CREATE TABLE impacts (
    chunk bigint NOT NULL,
    term text COLLATE "C" NOT NULL,
    impact real NOT NULL,
    PRIMARY KEY (chunk, term)
);
CREATE FUNCTION offload_impacts_add() RETURNS trigger LANGUAGE plpgsql SET jit = off AS $$
DECLARE
    held bigint;
    have bigint;
BEGIN
    SELECT chunks INTO held FROM impact_reference;
    IF held < {REFERENCE_SAMPLE} THEN
        -- a young store: the reference follows the average each time the chunks have
        -- doubled, every posting rewritten (few of them yet) by one writer at a time; a
        -- put committing beside that rewrite keeps the previous reference (the next
        -- doubling rewrites it), and no put waits for another
        SELECT count(*) INTO have FROM search_body;
        IF have >= 2 * held AND pg_try_advisory_xact_lock({REFERENCE_LOCK}) THEN
            UPDATE impact_reference SET chunks = have,
                length = (SELECT coalesce(avg({_LENGTH}), 1) FROM search_body n);
            DELETE FROM impacts;
            -- a put committed since the DELETE's snapshot has postings the DELETE did
            -- not see: they take the new reference too
            {_POSTINGS.format(rows="search_body")}
            ON CONFLICT (chunk, term) DO UPDATE SET impact = excluded.impact;
            RETURN NULL;
        END IF;
    END IF;
    {_POSTINGS.format(rows="added")};
    RETURN NULL;
END $$;
CREATE FUNCTION offload_impacts_drop() RETURNS trigger LANGUAGE plpgsql SET jit = off AS $$
BEGIN
    DELETE FROM impacts i USING removed o WHERE i.chunk = o.rowid;
    RETURN NULL;
END $$;
CREATE FUNCTION offload_impacts_change() RETURNS trigger LANGUAGE plpgsql SET jit = off AS $$
BEGIN
    DELETE FROM impacts i USING removed o WHERE i.chunk = o.rowid;
    {_POSTINGS.format(rows="added")};
    RETURN NULL;
END $$;
CREATE FUNCTION offload_impacts_truncate() RETURNS trigger LANGUAGE plpgsql SET jit = off AS $$
BEGIN
    TRUNCATE impacts;
    RETURN NULL;
END $$;
CREATE TRIGGER search_body_impacts_add AFTER INSERT ON search_body
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION offload_impacts_add();
CREATE TRIGGER search_body_impacts_drop AFTER DELETE ON search_body
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION offload_impacts_drop();
CREATE TRIGGER search_body_impacts_change AFTER UPDATE ON search_body
    REFERENCING OLD TABLE AS removed NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION offload_impacts_change();
CREATE TRIGGER search_body_impacts_truncate AFTER TRUNCATE ON search_body
    FOR EACH STATEMENT EXECUTE FUNCTION offload_impacts_truncate();
"""
# the backfill: the reference from the chunks there are, then every posting in one pass,
# the read index built after it (one sort instead of a btree insert per posting)
BACKFILL = f"""
UPDATE impact_reference SET chunks = (SELECT count(*) FROM search_body),
    length = (SELECT coalesce(avg({_LENGTH}), 1) FROM search_body n);
{_POSTINGS.format(rows="search_body")};
CREATE INDEX impacts_order ON impacts (term, impact DESC, chunk);
ANALYZE impacts;
"""


def create(raw: Any) -> None:
    """The table, its triggers and its postings (inside the migration's transaction)."""
    raw.execute(SCHEMA)
    raw.execute(BACKFILL)


def impact(tf: int, length: float, reference: float) -> float:
    """A term's impact in a chunk, as the triggers compute it (tests and docs)."""
    norm = 1 - B + B * length / max(reference, 1.0)
    return tf * (K1 + 1) / (tf + K1 * norm)


# One round: each term's ``depth`` best postings, the frontier (the last impact read,
# 0 once a term's list is read to its end), each seen chunk's lower bound (what its seen
# postings add up to) and upper bound (plus the frontier of every term it was not seen
# in). Every seen chunk that could still be in the best k (its upper bound above the
# k-th lower bound) is scored exactly from its own postings (primary key lookups): the
# rest cannot be, so only the unseen chunks' bound is left to settle.
ROUND_SQL = """
WITH q AS MATERIALIZED (
    SELECT * FROM unnest(%(terms)s::text[], %(idfs)s::float8[], %(depths)s::int[])
        AS q(term, idf, depth)
), seen AS MATERIALIZED (
    SELECT q.term, q.idf, q.depth, x.chunk, x.impact
    FROM q CROSS JOIN LATERAL (
        SELECT i.chunk, i.impact FROM impacts i WHERE i.term = q.term
        ORDER BY i.impact DESC LIMIT q.depth
    ) AS x
), front AS MATERIALIZED (
    SELECT s.term, s.idf * (CASE WHEN count(*) >= max(s.depth) THEN min(s.impact) ELSE 0 END)
        AS f
    FROM seen s GROUP BY s.term, s.idf
), cand AS MATERIALIZED (
    SELECT s.chunk, sum(s.idf * s.impact) AS lb, sum(f.f) AS seen_f
    FROM seen s JOIN front f ON f.term = s.term GROUP BY s.chunk
), total AS MATERIALIZED (SELECT coalesce(sum(f), 0) AS f FROM front),
ranked AS MATERIALIZED (
    SELECT c.chunk, c.lb, c.lb + t.f - c.seen_f AS ub,
        row_number() OVER (ORDER BY c.lb DESC, c.chunk) AS r
    FROM cand c CROSS JOIN total t
), kth AS MATERIALIZED (
    SELECT CASE WHEN count(*) >= %(k)s THEN min(lb) ELSE 0 END AS v
    FROM ranked WHERE r <= %(k)s
), best AS MATERIALIZED (
    SELECT r.chunk, CASE WHEN r.ub <= r.lb THEN r.lb ELSE (
        SELECT sum(q.idf * i.impact) FROM impacts i JOIN q ON q.term = i.term
        WHERE i.chunk = r.chunk AND i.term = ANY(%(terms)s::text[])
    ) END AS exact
    FROM ranked r CROSS JOIN kth WHERE r.r <= %(k)s OR r.ub > kth.v
)
SELECT 0 AS kind, b.chunk AS chunk, b.exact AS score, NULL::text AS term FROM best b
UNION ALL SELECT 1, NULL, f.f, f.term FROM front f
UNION ALL SELECT 3, NULL, t.f, NULL FROM total t
"""


class NativeConn(Protocol):
    """A connection that runs PostgreSQL's own SQL (store/pgconn.PgConn.native)."""

    def native(self, sql: str, params: Any) -> Any: ...


@dataclass
class Round:
    """What one round read: the exact scores of every seen chunk that may be in the best
    k, and the bound of the chunks not seen yet."""

    scores: dict[int, float]
    frontier: dict[str, float]  # each term's IDF times the last impact read (0: read whole)
    unseen: float  # the best any chunk not seen yet could score

    def kth(self, k: int) -> float:
        """The k-th best exact score (0 with fewer than k)."""
        ranked = sorted(self.scores.values(), reverse=True)
        return ranked[k - 1] if len(ranked) >= k else 0.0

    def settled(self, k: int) -> bool:
        """Whether the best ``k`` seen are the best ``k`` of all (ties aside)."""
        return self.unseen <= 0.0 or (len(self.scores) >= k and self.kth(k) >= self.unseen)

    def best(self, k: int) -> dict[int, float]:
        """The best ``k`` scored chunks (ties by the smaller id)."""
        order = sorted(self.scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        return dict(order)


def read_round(conn: NativeConn, idfs: dict[str, float], depths: dict[str, int], k: int) -> Round:
    """One round of :data:`ROUND_SQL` at these depths."""
    terms = list(idfs)
    params = {
        "terms": terms,
        "idfs": [idfs[t] for t in terms],
        "depths": [depths[t] for t in terms],
        "k": k,
    }
    scores: dict[int, float] = {}
    frontier = {t: 0.0 for t in terms}
    unseen = 0.0
    for kind, chunk, score, term in conn.native(ROUND_SQL, params).fetchall():
        if kind == 0:
            scores[int(chunk)] = float(score or 0.0)
        elif kind == 1:
            frontier[str(term)] = float(score or 0.0)
        else:
            unseen = float(score or 0.0)
    return Round(scores, frontier, unseen)


def top_chunks(conn: NativeConn, idfs: dict[str, float], k: int) -> dict[int, float]:
    """The ``k`` best chunks for terms of these IDFs by BM25 over the impacts
    (``sum(idf * impact)``), exact, each with its score; fewer when fewer match."""
    idfs = {t: w for t, w in idfs.items() if w > 0}
    if not idfs or k <= 0:
        return {}
    depths = dict.fromkeys(idfs, max(FIRST_DEPTH, k))
    while True:  # ends: a list read to its end has frontier 0, and the bound falls to 0
        got = read_round(conn, idfs, depths, k)
        if got.settled(k):
            return got.best(k)
        deeper = _essential(got, k) or {t for t, f in got.frontier.items() if f > 0}
        depths = {t: d * 2 if t in deeper else d for t, d in depths.items()}


def _essential(got: Round, k: int) -> set[str]:
    """The terms to read deeper (MaxScore's split): the smallest frontiers that together
    stay below the k-th score could not lift an unseen chunk into the top alone; the rest
    can."""
    kth = got.kth(k)
    spent, out = 0.0, set()
    for f, t in sorted((f, t) for t, f in got.frontier.items() if f > 0):
        spent += f
        if spent > kth:
            out.add(t)
    return out


def idf(rows: int, df: int) -> float:
    """FTS5's idf, as selective.idf: log((N - n + 0.5) / (n + 0.5)), at least 1e-6."""
    n = max(rows, df)
    value = math.log((n - df + 0.5) / (df + 0.5)) if n else 0.0
    return value if value > 0 else 1e-6


def term_idfs(rows: int, dfs: dict[str, int], terms: Sequence[str]) -> dict[str, float]:
    """Each of ``terms``' IDF (a term no chunk holds is left out)."""
    return {t: idf(rows, dfs[t]) for t in dict.fromkeys(terms) if dfs.get(t, 0) > 0}


# the postings search_body's rows imply, beside those held (tests, a store's check)
_EXPECTED = (
    _POSTINGS.format(rows="search_body")
    .replace("INSERT INTO impacts (chunk, term, impact)\n", "")
    .replace(f"SELECT n.rowid, u.lexeme, {_IMPACT}", f"SELECT n.rowid, u.lexeme, ({_IMPACT})::real")
)
STALE_SQL = f"""
SELECT (SELECT count(*) FROM (({_EXPECTED}) EXCEPT SELECT chunk, term, impact FROM impacts) a)
    + (SELECT count(*) FROM (SELECT chunk, term, impact FROM impacts EXCEPT ({_EXPECTED})) b)
"""


def stale_postings(conn: NativeConn) -> int:
    """How many postings are missing or held beyond what ``search_body`` says (0: exact)."""
    return int(conn.native(STALE_SQL, None).fetchone()[0])
