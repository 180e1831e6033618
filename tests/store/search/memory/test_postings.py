"""The in-memory index scores every row exactly as FTS5's own bm25() does."""

from __future__ import annotations

import itertools
import json
import random
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from offload.core.text import analysis
from offload.core.tokens import EstimateCounter
from offload.store.search import selective
from offload.store.search.memory import chunkrows, postings
from offload.store.search.query import match_expression
from offload.store.store import Store
from offload.store.write import index
from wordcorpus import WORDS


def _corpus(path: Path, n: int = 120, seed: int = 3) -> Store:
    rnd = random.Random(seed)
    store = Store(path, counter=EstimateCounter())
    for i in range(n):
        words = rnd.choices(WORDS, k=rnd.randint(1, 30))
        store.put(" ".join(words) + f" item{i}", scope=f"s{i % 3}")
    return store


def _view(conn: sqlite3.Connection) -> postings.View:
    batch = chunkrows.SqliteChunks().read_all(conn)
    return postings.View((postings.Segment.build(batch.rows),))


@contextmanager
def _indexed(path: Path, n: int = 120) -> Iterator[tuple[sqlite3.Connection, postings.View]]:
    """A corpus store's connection and an in-memory view of all its chunks."""
    with _corpus(path, n) as store:
        conn = store.conn
        assert isinstance(conn, sqlite3.Connection)
        yield conn, _view(conn)


def _fts(conn: sqlite3.Connection, expression: str) -> dict[int, float]:
    rows = conn.execute(
        "SELECT rowid, bm25(search_body) FROM search_body WHERE search_body MATCH ?",
        (expression,),
    ).fetchall()
    return {int(r[0]): -float(r[1]) for r in rows}


def _terms(text: str) -> list[str]:
    return list(dict.fromkeys(analysis.index_text(text).split()))


def test_every_matching_row_scores_bit_for_bit_as_fts5_scores_it(tmp_path: Path) -> None:
    with _indexed(tmp_path / "s.db") as (conn, view):
        for text in ("lake", "Caroline painting beach", "dog cat horse book river", "item7 lake"):
            terms = _terms(text)
            got = view.score(terms)
            mine = dict(zip(got.ids.tolist(), got.scores.tolist(), strict=True))
            assert mine == _fts(conn, match_expression(terms))  # == on floats: exact


def test_a_partition_scores_as_fts5_scores_its_and_and_not_expressions(tmp_path: Path) -> None:
    with _indexed(tmp_path / "s.db") as (conn, view):
        rare, common = _terms("violin museum"), _terms("lake garden")
        scored = view.score([*rare, *common])
        r, c = match_expression(rare), match_expression(common)
        both = scored.top(0b11, 10_000, also=0b1100)
        only = scored.top(0b11, 10_000, none_of=0b1100)
        assert dict(both) == _fts(conn, f"({r}) AND ({c})")
        assert dict(only) == _fts(conn, f"({r}) NOT ({c})")


def test_the_top_of_a_pool_is_ordered_by_score_then_id() -> None:
    rows = [(i, f'{{"":{2 + i % 3},"a":{1 + i % 2},"b":1}}') for i in range(1, 40)]
    view = postings.View((postings.Segment.build(rows),))
    top = view.score(["a"]).top(1, 7)
    assert len(top) == 7
    assert top == sorted(top, key=lambda p: (-p[1], p[0]))
    every = view.score(["a"]).top(1, 100)
    assert top == every[:7]


def test_merged_segments_hold_what_one_segment_of_the_same_rows_holds() -> None:
    rows = [(i, f'{{"":3,"t{i % 5}":2,"u":1}}') for i in range(1, 30)]
    whole = postings.View((postings.Segment.build(rows),))
    parts = postings.View(
        (postings.merge([postings.Segment.build(rows[:10]), postings.Segment.build(rows[10:])]),)
    )
    split = postings.View((postings.Segment.build(rows[:10]), postings.Segment.build(rows[10:])))
    calls: list[int] = []
    batched = postings.View(
        (postings.Segment.build_batches([rows[:7], rows[7:8], rows[8:]], lambda: calls.append(1)),)
    )
    assert len(calls) == 3  # the cancellation check runs between batches
    for view in (parts, split, batched):
        for terms in (["u"], ["t1", "u"], ["t3"]):
            a, b = whole.score(terms), view.score(terms)
            assert dict(zip(a.ids.tolist(), a.scores.tolist(), strict=True)) == dict(
                zip(b.ids.tolist(), b.scores.tolist(), strict=True)
            )
        got = view.count_matrix([3, 12, 99, 3], ["t3", "u"])
        want = whole.count_matrix([3, 12, 99, 3], ["t3", "u"])
        assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    held, counts, lengths = whole.count_matrix([3, 99], ["t3", "u"])
    assert held.tolist() == [True, False]  # chunk 99 is not held: zeros
    assert counts.tolist() == [[2, 1], [0, 0]] and lengths.tolist() == [3, 0]


def test_merging_segments_gives_the_arrays_one_segment_of_their_rows_has() -> None:
    rng = random.Random(7)
    rows = []
    for i in range(1, 200):
        counts = {f"w{rng.randrange(60)}": rng.randrange(1, 9) for _ in range(rng.randrange(1, 12))}
        rows.append((i * 3, json.dumps({"": sum(counts.values()), **counts})))
    whole = postings.Segment.build(rows)
    cuts = [0, 17, 18, 90, 151, len(rows)]
    parts = [postings.Segment.build(rows[a:b]) for a, b in itertools.pairwise(cuts)]
    for merged in (postings.merge(parts), postings.merge([parts[0], postings.merge(parts[1:])])):
        assert list(merged.terms) == list(whole.terms)
        for name in ("ids", "lengths", "offsets", "docs", "freqs"):
            assert np.array_equal(getattr(merged, name), getattr(whole, name)), name
        assert merged.freqs.dtype == whole.freqs.dtype and merged.tokens == whole.tokens
    # ids out of order across the segments (as PostgreSQL may commit them): the same rows
    shuffled = postings.merge([parts[2], parts[0], parts[4], parts[1], parts[3]])
    assert np.array_equal(shuffled.ids, whole.ids) and np.array_equal(
        shuffled.lengths, whole.lengths
    )
    a, b = (
        postings.View((whole,)).score(["w1", "w7"]),
        postings.View((shuffled,)).score(["w1", "w7"]),
    )
    assert dict(zip(a.ids.tolist(), a.scores.tolist(), strict=True)) == dict(
        zip(b.ids.tolist(), b.scores.tolist(), strict=True)
    )


def test_counts_are_kept_in_8_or_16_bits_unless_one_passes_them_and_score_the_same() -> None:
    small = [(i, f'{{"":{i + 3},"w":{i},"x":1}}') for i in range(1, 20)]
    huge = [*small, (20, '{"":70003,"w":70000,"x":1}')]  # one count past 65,535
    narrow, wide = postings.Segment.build(small), postings.Segment.build(huge)
    assert narrow.freqs.dtype == np.uint8 and wide.freqs.dtype == np.int32
    middle = postings.Segment.build([*small, (20, '{"":303,"w":300}')])  # past 255
    assert middle.freqs.dtype == np.uint16 and middle.lengths.dtype == np.uint16
    # the lengths are held once, as lengths: not also as postings
    assert len(narrow.docs) == 2 * len(small) and narrow.lengths.tolist()[:2] == [4, 5]
    assert postings.merge([narrow, postings.Segment.build(huge[19:])]).freqs.dtype == np.int32
    assert postings.Segment.build(huge[19:]).postings("w")[1].tolist() == [70000]
    as_int32 = postings.Segment(
        narrow.ids,
        narrow.lengths,
        narrow.terms,
        narrow.offsets,
        narrow.docs,
        narrow.freqs.astype(np.int32),
        narrow.tokens,
    )
    a = postings.View((narrow,)).score(["w", "x"])
    b = postings.View((as_int32,)).score(["w", "x"])
    assert a.ids.tolist() == b.ids.tolist() and a.scores.tolist() == b.scores.tolist()


def test_positions_are_kept_in_16_bits_while_the_rows_fit_and_merge_past_them_exactly() -> None:
    # two segments of 40,000 rows each: each fits 16 bits, their merge does not
    first = [(i, '{"":2,"a":1,"b":1}' if i % 7 else '{"":2,"a":1,"z":1}') for i in range(1, 40_001)]
    second = [(i, '{"":3,"a":2,"b":1}') for i in range(40_001, 80_001)]
    parts = [postings.Segment.build(first), postings.Segment.build(second)]
    assert [p.docs.dtype for p in parts] == [np.uint16, np.uint16]
    whole = postings.Segment.build(first + second)
    for merged in (whole, postings.merge(parts)):
        assert merged.docs.dtype == np.int32
        assert np.array_equal(merged.docs, whole.docs)
        docs, counts = merged.postings("b")
        assert int(docs[-1]) == 79_999 and int(counts[-1]) == 1  # past 65,535: no wrap
    for terms in (["b"], ["a", "z"]):
        a = postings.View((whole,)).score(terms)
        b = postings.View(tuple(parts)).score(terms)
        assert dict(zip(a.ids.tolist(), a.scores.tolist(), strict=True)) == dict(
            zip(b.ids.tolist(), b.scores.tolist(), strict=True)
        )
    held, counts, _ = postings.View(tuple(parts)).count_matrix([7, 70_000], ["z", "a"])
    assert held.tolist() == [True, True] and counts.tolist() == [[1, 1], [0, 2]]


def test_a_row_without_its_length_first_cannot_be_indexed() -> None:
    import pytest

    with pytest.raises(postings.Unindexable):
        postings.Segment.build([(1, '{"a":1}')])
    with pytest.raises(postings.Unindexable):
        postings.Segment.build([(1, None)])
    with pytest.raises(postings.Unindexable):  # positions would point at the wrong chunks
        postings.Segment.build_batches([[(5, '{"":1,"a":1}')], [(2, '{"":1,"b":1}')]])


def test_only_terms_fts5_reads_as_themselves_are_held() -> None:
    assert (
        postings.plain_term("caroline") and postings.plain_term("c++") and postings.plain_term("é")
    )
    for odd in ("Caroline", "a b", "tab\there", "zero\u200bwidth", "nl\n"):
        assert not postings.plain_term(odd)
        with pytest.raises(postings.Unindexable):
            postings.Segment.build([(1, f'{{"":1,{json.dumps(odd)}:1}}')])


def test_the_rows_of_the_rare_terms_score_as_when_every_term_is_scored(tmp_path: Path) -> None:
    with _indexed(tmp_path / "s.db", n=300) as (_conn, view):
        for text in ("violin museum lake garden", "item7 dog cat horse", "lake", "zzz lake"):
            terms = _terms(text)
            every = view.score(terms)
            for rare in range(len(terms) + 1):
                got = view.score(terms, rare)
                mask = (1 << rare) - 1
                keep = (every.masks & mask) != 0 if rare < len(terms) else every.masks != 0
                want = zip(every.ids[keep].tolist(), every.scores[keep].tolist(), strict=True)
                mine = zip(got.ids.tolist(), got.scores.tolist(), strict=True)
                assert dict(mine) == dict(want)  # == on floats: the same bits
                assert sorted(got.masks.tolist()) == sorted(every.masks[keep].tolist())


def _skewed_rows(n: int, words: int, seed: int) -> list[tuple[int, str]]:
    """``n`` chunks where word ``i`` is in about 0.9/(i + 1) of them: a few common words,
    many rare ones."""
    rnd = random.Random(seed)
    rows = []
    for cid in range(1, n + 1):
        counts = {f"w{i}": rnd.randint(1, 3) for i in range(words) if rnd.random() < 0.9 / (i + 1)}
        whole = {"": sum(counts.values()) + rnd.randint(0, 4), **counts}
        rows.append((cid, json.dumps(whole, separators=(",", ":"))))
    return rows


def _formula(rows: list[tuple[int, str]], terms: list[str]) -> dict[int, float]:
    """bm25() of every row holding a term, summed term by term in Python floats (the same
    IEEE doubles, the same operations in the same order as fts5_aux.c)."""
    objects = [(cid, json.loads(text)) for cid, text in rows]
    avg = sum(o[""] for _cid, o in objects) / len(objects)
    df = {t: sum(t in o for _cid, o in objects) for t in terms}
    idf = [selective.idf(len(objects), df[t]) for t in terms]
    scores: dict[int, float] = {}
    for cid, o in objects:
        if not any(t in o for t in terms):
            continue
        total, d = 0.0, float(o[""])
        for i, t in enumerate(terms):
            if t in o:
                f = float(o[t])
                norm = postings.K1 * ((1 - postings.B) + (postings.B * d) / avg)
                total += idf[i] * ((f * (postings.K1 + 1.0)) / (f + norm))
        scores[cid] = total
    return scores


def test_a_plan_widened_term_by_term_scores_each_step_as_the_formula_does() -> None:
    # 6,000 rows: the rarest term's rows are too few for a map of positions (each is
    # looked up by binary search), the next steps' rows enough for one, and the last
    # step's postings most of the segment (scored in place)
    rows = _skewed_rows(6000, 100, seed=5)
    view = postings.View((postings.Segment.build(rows[:5000]), postings.Segment.build(rows[5000:])))
    terms = ["w99", "w60", "w20", "w7", "w0"]
    every = _formula(rows, terms)
    widening = view.widening(terms)
    for rare in range(1, len(terms) + 1):
        got = widening.upto(rare)
        keep = (got.masks & ((1 << rare) - 1)) != 0
        mine = dict(zip(got.ids[keep].tolist(), got.scores[keep].tolist(), strict=True))
        want = {
            cid: s
            for cid, s in every.items()
            if any(f'"{t}":' in rows[cid - 1][1] for t in terms[:rare])
        }
        assert mine == want  # == on floats: the same bits
        assert len(got.ids) == len(set(got.ids.tolist()))  # each row once
        fresh = view.score(terms, rare)
        assert dict(zip(fresh.ids.tolist(), fresh.scores.tolist(), strict=True)) == want
    assert len(widening.upto(2).ids) == len(every)  # a narrower call: the wider rows


def test_a_large_vocabulary_kept_compact_finds_every_term_and_no_other() -> None:
    words = [f"w{i}x" for i in range(postings.COMPACT_TERMS + 10)] + ["", "é", "数据"]
    terms = postings.Terms(words)
    assert len(terms) == len(words)
    assert list(terms) == words
    assert all(terms.get(w) == i for i, w in enumerate(words))
    assert terms.get("w1") is None and terms.get("nothere") is None
    assert terms.get("w1") is None  # remembered as absent
    assert terms.nbytes < 40 * len(words)


def test_terms_sharing_a_hash_are_told_apart_by_their_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import builtins

    monkeypatch.setattr(builtins, "hash", lambda t: len(t))  # every term of a length collides
    terms = postings.Terms(["ab", "cd", "ef", "g"])
    assert [terms.get(t) for t in ("ab", "cd", "ef", "g", "zz")] == [0, 1, 2, 3, None]


def test_a_segment_of_many_terms_scores_as_one_of_few() -> None:
    rows = [(i + 1, index.counts_json({f"t{i}": 2, "common": 1})) for i in range(5000)]
    big = postings.Segment.build(rows)
    assert isinstance(big.terms, postings.Terms)
    halves = postings.View(
        (postings.Segment.build(rows[:2500]), postings.Segment.build(rows[2500:]))
    )
    merged = postings.merge(halves.segments)
    assert isinstance(merged.terms, postings.Terms)
    for view in (halves, postings.View((merged,))):
        for q in (["t7", "common"], ["t4999"], ["nope", "t0"]):
            a, b = view.score(q), postings.View((big,)).score(q)
            assert a.ids.tolist() == b.ids.tolist() and a.scores.tolist() == b.scores.tolist()
