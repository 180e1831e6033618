"""An inverted index of chunks in numpy arrays, scored exactly as FTS5's bm25() scores.

Built from the chunks' cached term counts (index.term_counts: a JSON object leading with
the chunk's length under ``""``), one :class:`Segment` per batch of rows: the chunk ids
(ascending), their lengths, and per term its postings (positions into those ids, ascending,
with the term's count in each). A :class:`View` is a tuple of segments and the index-wide
totals; everything here is immutable once built, so a view is shared by threads freely.

Scores are FTS5's own (fts5_aux.c, ``fts5Bm25Function``), with its constants and the same
floating-point operations in the same order, so a row scores bit for bit as ``bm25()``
scores it (negated: higher is better here):

    idf(t)  = log((N - n(t) + 0.5) / (n(t) + 0.5)), 1e-6 if not above 0
    score   = sum over the query's phrases, in their order, of
              idf(t) * ((f * (k1 + 1)) / (f + k1 * (1 - b + b * D / avgdl)))

with N and avgdl the index's row count and tokens per row, n(t) the rows holding t, f
its count in the row and D the row's length. Pure: no I/O (store/search/memory/resident.py feeds it).
"""

from __future__ import annotations

import array
import bisect
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from offload.store.search import selective
from offload.store.write import index

# FTS5's bm25() constants (fts5_aux.c)
K1 = 1.2
B = 0.75
# a query's terms are told apart by one bit each of an int64 mask
MAX_TERMS = 62


def plain_term(term: str) -> bool:
    """Whether FTS5's tokenizer reads ``term`` as itself, one whole token: printable, no
    space, nothing its case folding would change. Analysed terms are (core.text.analysis folds
    case and splits at spaces); the index holds and looks up only such terms, so its
    document frequencies are FTS5's."""
    return term.isprintable() and " " not in term and term.lower() == term


class Unindexable(ValueError):
    """Rows the index cannot hold exactly (no cached counts, or an old-format object)."""


# a segment of at least this many terms keeps them as :class:`Terms`, not a dict
COMPACT_TERMS = 4096
# the lookups a :class:`Terms` remembers (a search asks for its few terms many times)
_MEMO_MAX = 4096


class Terms:
    """A segment's vocabulary, term -> slot, in ~20 bytes a term plus its UTF-8 bytes (a
    dict of str held ~95 bytes a term: most of the index of a store whose outputs each
    bring new terms, such as numbered log lines).

    The terms are one UTF-8 string joined by spaces (a plain term holds none), in slot
    order, with where each starts; a lookup finds the term's hash (this process's own
    ``hash``: the index never leaves the process) among the sorted hashes by bisection and
    compares the bytes there, so a hash shared by two terms still finds the right one.
    Immutable, so shared by threads; the memo of recent lookups is a dict, safe to
    share."""

    def __init__(self, terms: list[str]) -> None:
        n = len(terms)
        hashes = np.fromiter(map(hash, terms), dtype=np.int64, count=n)
        order = np.argsort(hashes, kind="stable")
        self._hashes = array.array("q", hashes[order].tobytes())
        self._slots = array.array("q", order.tobytes())
        encoded = [t.encode() for t in terms]
        starts = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=n) + 1, out=starts[1:])
        self._starts = array.array("q", starts.tobytes())
        self._blob = b" ".join(encoded)
        self._memo: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._slots)

    def __iter__(self) -> Iterator[str]:
        """The terms in slot order."""
        return iter(self._blob.decode().split(" ") if len(self._slots) else ())

    def get(self, term: str) -> int | None:
        """``term``'s slot, or None."""
        memo = self._memo
        slot = memo.get(term, -2)  # -1: known to be absent
        if slot == -2:
            slot = self._find(term)
            if len(memo) >= _MEMO_MAX:
                memo.clear()
            memo[term] = slot
        return None if slot < 0 else slot

    def _find(self, term: str) -> int:
        h, hashes, starts = hash(term), self._hashes, self._starts
        at = bisect.bisect_left(hashes, h)
        raw = term.encode()
        while at < len(hashes) and hashes[at] == h:
            slot = self._slots[at]
            if self._blob[starts[slot] : starts[slot + 1] - 1] == raw:
                return slot
            at += 1
        return -1

    @property
    def nbytes(self) -> int:
        """Bytes held (the memo aside)."""
        arrays = (self._hashes, self._slots, self._starts)
        return sum(a.itemsize * len(a) for a in arrays) + len(self._blob)


def compact(vocab: dict[str, int]) -> dict[str, int] | Terms:
    """A built segment's vocabulary (slots in insertion order) as it is kept: a large one
    as :class:`Terms`."""
    return Terms(list(vocab)) if len(vocab) >= COMPACT_TERMS else vocab


@dataclass(frozen=True, eq=False)
class Segment:
    """One batch of chunks: ids ascending, lengths, and each term's postings."""

    ids: Any  # NDArray[np.int64]
    lengths: Any  # NDArray: uint8, uint16 or int64 (the narrowest that holds them)
    terms: dict[str, int] | Terms  # term -> its slot in offsets
    offsets: Any  # NDArray[np.int64], len(terms) + 1
    docs: Any  # positions into ids, ascending within a term: NDArray[np.uint16] or int32
    freqs: Any  # NDArray[np.uint8] or np.uint16, or np.int32 when a count passes 65,535
    tokens: int

    @classmethod
    def build(cls, rows: Sequence[tuple[int, str | None]]) -> Segment:
        """A segment of ``rows`` ((chunk id, cached counts JSON), ids ascending)."""
        return cls.build_batches([rows])

    @classmethod
    def build_batches(
        cls,
        batches: Iterable[Sequence[tuple[int, str | None]]],
        between: Callable[[], None] | None = None,
    ) -> Segment:
        """One segment of every row of ``batches`` (ids ascending across them), parsed a
        batch at a time; ``between`` is called after each (a build's cancellation check).

        The objects of a batch are parsed in one call and flattened by C-level iteration
        (one Python step per chunk, not per posting): ~4 s of CPU for 100k chunks, 5.6M
        postings. The postings are gathered as 32-bit arrays and sorted once, so a full
        build holds ~20 bytes a posting at its peak (merging per-batch segments held
        more than three times that: 4.6 GB for 1M PostgreSQL chunks)."""
        vocab: dict[str, int] = {"": 0}  # the length key leads every object: slot 0
        ids_parts, per_parts, slot_parts, freq_parts = [], [], [], []
        for rows in batches:
            ids, per, slots, freqs = _parsed(rows, vocab)
            ids_parts.append(ids)
            per_parts.append(per)
            slot_parts.append(slots)
            freq_parts.append(freqs)
            if between is not None:
                between()
        ids = _joined(ids_parts, np.int64)
        if len(ids) > 1 and not bool(np.all(np.diff(ids) > 0)):
            raise Unindexable("chunk ids not ascending across the batches")
        per = _joined(per_parts, np.int64)
        slots = _joined(slot_parts, np.int32)
        freqs = _joined(freq_parts, np.int32)
        del slot_parts, freq_parts
        docs = np.repeat(np.arange(len(ids), dtype=_position_type(len(ids))), per)
        offsets = np.zeros(len(vocab) + 1, dtype=np.int64)
        np.cumsum(np.bincount(slots, minlength=len(vocab)), out=offsets[1:])
        order = np.argsort(slots, kind="stable")  # stable: docs stay ascending per term
        del slots
        docs, freqs = docs[order], freqs[order]
        del order
        lengths = np.zeros(len(ids), dtype=np.int64)
        lo, hi = offsets[0], offsets[1]
        lengths[docs[lo:hi]] = freqs[lo:hi]
        # the lengths' own postings (slot 0, never looked up) are held as ``lengths`` alone
        docs, freqs = docs[hi:], freqs[hi:]
        offsets -= hi
        offsets[0] = 0
        lengths, freqs = _narrowed(lengths), _narrowed(freqs)
        if len(ids) == 0:
            vocab = {}
            offsets = np.zeros(1, dtype=np.int64)
        return cls(ids, lengths, compact(vocab), offsets, docs, freqs, int(lengths.sum()))

    @property
    def rows(self) -> int:
        """How many chunks the segment holds."""
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        """The arrays' bytes plus the vocabulary's (a dict's estimated, ~100 bytes a term)."""
        arrays = (self.ids, self.lengths, self.offsets, self.docs, self.freqs)
        terms = self.terms
        held = terms.nbytes if isinstance(terms, Terms) else 100 * len(terms)
        return sum(int(a.nbytes) for a in arrays) + held

    def postings(self, term: str) -> tuple[Any, Any]:
        """(positions, counts) of ``term``'s rows; empty arrays if it holds none."""
        slot = self.terms.get(term) if term != index.LENGTH_KEY else None
        if slot is None:
            return _EMPTY_I32, _EMPTY_I32
        lo, hi = self.offsets[slot], self.offsets[slot + 1]
        return self.docs[lo:hi], self.freqs[lo:hi]


_EMPTY_I32 = np.zeros(0, dtype=np.int32)


@dataclass(frozen=True)
class Scored:
    """Every row matching any of the terms: chunk ids, scores, and which terms matched
    (bit ``i`` for the ``i``-th term)."""

    ids: Any  # NDArray[np.int64]
    scores: Any  # NDArray[np.float64]
    masks: Any  # NDArray[np.int64]

    def top(
        self, any_of: int, pool: int, *, also: int = 0, none_of: int = 0
    ) -> list[tuple[int, float]]:
        """The best ``pool`` (chunk id, score) pairs of the rows holding a term of mask
        ``any_of``, and one of ``also`` (if given) and none of ``none_of``: FTS5's
        ``ORDER BY bm25 LIMIT pool`` over ``(rare) AND (common)`` or ``(rare) NOT
        (common)``. Equal scores: the smaller id first."""
        keep = (self.masks & any_of) != 0
        if also:
            keep &= (self.masks & also) != 0
        if none_of:
            keep &= (self.masks & none_of) == 0
        at = np.flatnonzero(keep)
        if len(at) > pool:
            # the pool's cut-off score, then every row at or above it, ordered exactly
            cut = np.partition(-self.scores[at], pool - 1)[pool - 1]
            at = at[-self.scores[at] <= cut]
        order = np.lexsort((self.ids[at], -self.scores[at]))[:pool]
        chosen = at[order]
        return list(zip(self.ids[chosen].tolist(), self.scores[chosen].tolist(), strict=True))


def _parsed(
    rows: Sequence[tuple[int, str | None]], vocab: dict[str, int]
) -> tuple[Any, Any, Any, Any]:
    """A batch's chunk ids, postings per chunk, and its postings' term slots (in ``vocab``,
    which gains the batch's new terms) and counts, in row order."""
    texts = [r[1] for r in rows]
    if any(t is None or not t.startswith(index.LENGTH_FIRST) for t in texts):
        raise Unindexable("a chunk without cached term counts leading with its length")
    try:
        objects: list[dict[str, int]] = json.loads("[" + ",".join(texts) + "]")  # type: ignore[arg-type]
    except ValueError as exc:
        raise Unindexable(f"unreadable cached term counts: {exc}") from exc
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    local = list(dict.fromkeys(chain.from_iterable(objects)))
    fresh = [t for t in local if t not in vocab]
    if not all(map(plain_term, fresh)):
        raise Unindexable("a term FTS5 would read as other tokens than itself")
    for t in fresh:
        vocab[t] = len(vocab)
    per = np.fromiter(map(len, objects), dtype=np.int64, count=len(objects))
    total = int(per.sum())
    slots = np.fromiter(
        map(vocab.__getitem__, chain.from_iterable(objects)), dtype=np.int32, count=total
    )
    freqs = np.fromiter(chain.from_iterable(map(dict.values, objects)), dtype=np.int32, count=total)
    return ids, per, slots, freqs


def _joined(parts: list[Any], dtype: Any) -> Any:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def _narrowed(freqs: Any) -> Any:
    """``freqs`` in 8 or 16 bits when every one fits (a chunk's term counts nearly always
    fit 8, its length in terms 16), else as they are: a quarter or half the bytes of the
    postings' counts, which a serving process holds for every chunk it indexed. Scores are
    computed in float64 from any of them, so they are the same."""
    if not len(freqs) or int(freqs.min()) < 0:
        return freqs
    top = int(freqs.max())
    if top <= 0xFF:
        return freqs.astype(np.uint8)
    return freqs.astype(np.uint16) if top <= 0xFFFF else freqs


def _position_type(rows: int) -> Any:
    """The type of a segment's postings' positions: 16 bits while its rows fit (a third of
    a posting's bytes with 16-bit counts, every segment of a store under 65,536 chunks and
    the small ones written since a build), else 32."""
    return np.uint16 if rows <= 0x10000 else np.int32


def merge(segments: Sequence[Segment]) -> Segment:
    """One segment holding every row of ``segments`` (disjoint chunk ids).

    With ids ascending across the segments (the usual case) each term's merged postings
    are its postings in each segment, in segment order: every block is copied straight to
    its place, with no sort, holding ~20 bytes a posting at the peak (a sort of the joined
    postings held ~50, a transient the size of the index itself under a serving process).
    """
    if len(segments) == 1:
        return segments[0]
    vocab: dict[str, int] = {}
    owns = [
        np.fromiter(
            (vocab.setdefault(t, len(vocab)) for t in s.terms), dtype=np.int64, count=len(s.terms)
        )
        for s in segments
    ]
    ids = np.concatenate([s.ids for s in segments])
    lengths = np.concatenate([s.lengths for s in segments])
    if len(ids) > 1 and not bool(np.all(np.diff(ids) > 0)):
        return _merge_sorted(segments, owns, vocab, ids, lengths)
    counts = [np.diff(s.offsets) for s in segments]
    offsets = np.zeros(len(vocab) + 1, dtype=np.int64)
    for own, count in zip(owns, counts, strict=True):
        offsets[1:][own] += count  # a segment holds each of its terms once
    np.cumsum(offsets, out=offsets)
    free = offsets[:-1].copy()  # where each term's next block goes
    docs = np.empty(int(offsets[-1]), dtype=_position_type(len(ids)))
    freqs = np.empty(len(docs), dtype=np.result_type(*(s.freqs for s in segments)))
    base = 0
    for s, own, count in zip(segments, owns, counts, strict=True):
        at = np.repeat(free[own] - s.offsets[:-1], count) + np.arange(len(s.docs))
        docs[at] = s.docs.astype(np.int32) + base  # 16 bits would wrap past 65,535
        freqs[at] = s.freqs
        free[own] += count
        base += s.rows
    return Segment(
        ids, lengths, compact(vocab), offsets, docs, _narrowed(freqs), int(lengths.sum())
    )


def _merge_sorted(
    segments: Sequence[Segment], owns: list[Any], vocab: dict[str, int], ids: Any, lengths: Any
) -> Segment:
    """:func:`merge` of segments whose ids are out of order (a backend committing them so):
    positions follow the ids, and the joined postings are sorted by term, then position."""
    slots, docs = [], []
    base = 0
    for s, own in zip(segments, owns, strict=True):
        slots.append(np.repeat(own, np.diff(s.offsets)))
        docs.append(s.docs.astype(np.int64) + base)
        base += s.rows
    slot, doc = np.concatenate(slots), np.concatenate(docs)
    freq = np.concatenate([s.freqs for s in segments])
    perm = np.argsort(ids, kind="stable")
    where = np.empty_like(perm)
    where[perm] = np.arange(len(perm))
    ids, lengths, doc = ids[perm], lengths[perm], where[doc]
    order = np.lexsort((doc, slot))
    offsets = np.zeros(len(vocab) + 1, dtype=np.int64)
    np.cumsum(np.bincount(slot, minlength=len(vocab)), out=offsets[1:])
    return Segment(
        ids,
        lengths,
        compact(vocab),
        offsets,
        doc[order].astype(_position_type(len(ids))),
        _narrowed(freq[order]),
        int(lengths.sum()),
    )


@dataclass(frozen=True, eq=False)
class View:
    """Segments (each chunk in exactly one) and the totals bm25() normalises by."""

    segments: tuple[Segment, ...]

    @property
    def rows(self) -> int:
        """Chunks held."""
        return sum(s.rows for s in self.segments)

    @property
    def tokens(self) -> int:
        """Tokens held (the sum of the chunks' lengths)."""
        return sum(s.tokens for s in self.segments)

    @property
    def nbytes(self) -> int:
        """Memory held, roughly."""
        return sum(s.nbytes for s in self.segments)

    def totals(self) -> selective.Totals:
        """Row count and average length, as FTS5 computes them."""
        rows = self.rows
        return selective.Totals(rows, self.tokens / rows if rows else 0.0)

    def df(self, terms: Sequence[str]) -> dict[str, int]:
        """Each term's row count (exact)."""
        return {t: sum(len(s.postings(t)[0]) for s in self.segments) for t in terms}

    def score(self, terms: Sequence[str], rare: int | None = None) -> Scored:
        """Every row holding any of ``terms`` scored by FTS5's bm25() with the phrases in
        this order (at most :data:`MAX_TERMS`); with ``rare``, only the rows holding one
        of the first ``rare`` terms (scored by all of them, the same bits)."""
        return self.widening(terms).upto(len(terms) if rare is None else rare)

    def widening(self, terms: Sequence[str]) -> Widening:
        """The scores of ``terms``' rows, to be taken for a plan that widens
        (:class:`Widening`)."""
        return Widening(self, terms)

    def count_matrix(self, chunk_ids: Sequence[int], terms: Sequence[str]) -> tuple[Any, Any, Any]:
        """(held, counts, lengths) for ``chunk_ids`` in their order: whether the index
        holds each chunk, its count of each of ``terms`` (a column each, in their order)
        and its length; a chunk not held has zero counts and length."""
        want = np.asarray(chunk_ids, dtype=np.int64)
        held = np.zeros(len(want), dtype=bool)
        counts = np.zeros((len(want), len(terms)), dtype=np.int64)
        lengths = np.zeros(len(want), dtype=np.int64)
        for s in self.segments:
            at = np.searchsorted(s.ids, want)
            ok = at < len(s.ids)
            ok[ok] = s.ids[at[ok]] == want[ok]
            rows = np.flatnonzero(ok)
            if not len(rows):
                continue
            pos = at[rows]
            held[rows] = True
            lengths[rows] = s.lengths[pos]
            for col, t in enumerate(terms):
                docs, freqs = s.postings(t)
                if not len(docs):
                    continue
                j = np.searchsorted(docs, pos)
                hit = j < len(docs)
                hit[hit] = docs[j[hit]] == pos[hit]
                counts[rows[hit], col] = freqs[j[hit]]
        return held, counts, lengths


class Widening:
    """One query's scores as its plan widens: :meth:`upto` gives the rows holding one of
    the first ``rare`` terms, each scored by every term. A wider plan adds only the rows
    its new terms bring (those holding none of the earlier terms), so a plan widened term
    by term scores each row once, not once a step; the later terms are looked up only at
    the rows (a common term, in ~30 % of 1M chunks, costs the rows' count, not its own).

    Not shared between threads: one search's, used and dropped."""

    def __init__(self, view: View, terms: Sequence[str]) -> None:
        if len(terms) > MAX_TERMS:
            raise ValueError(f"at most {MAX_TERMS} terms")
        totals = view.totals()
        df = view.df(terms)
        self._view = view
        self._terms = tuple(terms)
        self._idf = [selective.idf(totals.rows, df[t]) for t in terms]
        self._avg = totals.avg_length
        self._rare = 0
        self._parts: list[tuple[Any, Any, Any]] = []
        self._scored = Scored(np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.int64))

    def upto(self, rare: int) -> Scored:
        """The rows holding one of the first ``rare`` terms (all rows if ``rare`` is the
        terms' count), scored by FTS5's bm25() over every term in order, one mask bit
        each; after a wider call, that call's rows (a superset: mask them)."""
        rare = min(rare, len(self._terms))
        if rare <= self._rare:
            return self._scored
        for s in self._view.segments:
            self._parts.append(self._added(s, rare))
        self._rare = rare
        self._scored = Scored(*(np.concatenate([p[i] for p in self._parts]) for i in range(3)))
        return self._scored

    def _added(self, s: Segment, rare: int) -> tuple[Any, Any, Any]:
        """``s``'s rows holding one of the terms from the last call's ``rare`` up to this
        one's and none before: (chunk ids, scores, masks)."""
        lo, terms = self._rare, self._terms
        new = [s.postings(t)[0] for t in terms[lo:rare]]
        if rare == len(terms) and sum(map(len, new)) * _DENSE_SHARE >= s.rows:
            # most of the segment: every row scored in place, then the new ones kept
            ids, scores, masks = _score_segment(s, terms, self._idf, self._avg)
            keep = (masks & ((1 << lo) - 1)) == 0
            return ids[keep], scores[keep], masks[keep]
        rows = _union(new)
        if lo and len(rows):
            rows = _holding_none(s, rows, terms[:lo])
        scores, masks = _score_rows(s, rows, terms, self._idf, self._avg, lo)
        return s.ids[rows], scores, masks


# the postings of a widened plan's last terms at least 1/this of a segment: every row of
# it is scored in place (a pass over flags per row beats sorting that many postings)
_DENSE_SHARE = 4
# rows at least 1/this of a segment are found among a term's postings by a map of the
# segment's positions (filling it, ~0.1 ms a million rows, pays for itself from there)
_MAP_SHARE = 64


def _score_segment(
    s: Segment, terms: Sequence[str], idf: Sequence[float], avg: float
) -> tuple[Any, Any, Any]:
    """One segment's matching rows: (chunk ids, scores, term masks)."""
    scores = np.zeros(s.rows, dtype=np.float64)
    masks = np.zeros(s.rows, dtype=np.int64)
    for i, t in enumerate(terms):
        docs, freqs = s.postings(t)
        if not len(docs):
            continue
        scores[docs] += _term_part(idf[i], freqs, s.lengths[docs], avg)
        masks[docs] |= 1 << i
    hit = np.flatnonzero(masks)
    return s.ids[hit], scores[hit], masks[hit]


def _term_part(idf: float, freqs: Any, lengths: Any, avg: float) -> Any:
    """One term's share of each row's score (``freqs``, ``lengths``: the rows')."""
    f = freqs.astype(np.float64)
    d = lengths.astype(np.float64)
    # fts5_aux.c: idf * ((f * (k1 + 1.0)) / (f + k1 * (1 - b + b * D / avgdl))),
    # operation for operation (numpy's + - * / round as C's doubles do)
    norm = K1 * ((1 - B) + (B * d) / avg)
    return idf * ((f * (K1 + 1.0)) / (f + norm))


def _union(held: Sequence[Any]) -> Any:
    """The sorted distinct rows of several postings lists (each sorted).

    The lists are joined and sorted stably, which for int32 merges their sorted runs (a
    timsort): numpy 2's np.unique hashes instead, ~30x slower on 10^4-10^5 postings."""
    held = [h for h in held if len(h)]
    if not held:
        return _EMPTY_I32
    if len(held) == 1:
        return held[0]
    rows = np.sort(np.concatenate(held), kind="stable")
    first = np.empty(len(rows), dtype=bool)
    first[0] = True
    np.not_equal(rows[1:], rows[:-1], out=first[1:])
    return rows[first]


class _Meeting:
    """Sorted positions into a segment, and where a term's postings meet them, found the
    cheapest way: one gather per posting from a map of the positions (when the rows are
    many), or a binary search of the shorter side in the longer."""

    def __init__(self, rows: Any, size: int) -> None:
        self.rows = rows
        self.where: Any = None
        if len(rows) * _MAP_SHARE >= size:
            self.where = np.full(size, -1, dtype=np.int32)
            self.where[rows] = np.arange(len(rows), dtype=np.int32)

    def meet(self, docs: Any) -> tuple[Any, Any]:
        """(places among the rows, places among ``docs``) of the rows ``docs`` holds."""
        rows = self.rows
        short, long = sorted((len(rows), len(docs)))
        if self.where is not None and len(docs) <= short * max(1, long.bit_length()):
            at = self.where[docs]
            hit = at >= 0
            return at[hit], np.flatnonzero(hit)
        if len(docs) <= len(rows):  # each posting looked up among the rows
            return _found(rows, docs)
        in_docs, at = _found(docs, rows)  # each row looked up among the postings
        return at, in_docs


def _found(sorted_: Any, keys: Any) -> tuple[Any, Any]:
    """(places in ``sorted_``, places in ``keys``) of the ``keys`` it holds: a binary search
    of each key."""
    j = np.searchsorted(sorted_, keys)
    hit = j < len(sorted_)
    hit[hit] = sorted_[j[hit]] == keys[hit]
    return j[hit], np.flatnonzero(hit)


def _holding_none(s: Segment, rows: Any, terms: Sequence[str]) -> Any:
    """The ``rows`` holding none of ``terms``."""
    meeting = _Meeting(rows, s.rows)
    held = np.zeros(len(rows), dtype=bool)
    for t in terms:
        held[meeting.meet(s.postings(t)[0])[0]] = True
    return rows[~held]


def _score_rows(
    s: Segment, rows: Any, terms: Sequence[str], idf: Sequence[float], avg: float, start: int
) -> tuple[Any, Any]:
    """(scores, masks) of ``rows``, which hold none of the first ``start`` terms: the
    additions :func:`_score_segment` makes for them, in the same term order, so the same
    scores bit for bit."""
    scores = np.zeros(len(rows), dtype=np.float64)
    masks = np.zeros(len(rows), dtype=np.int64)
    if not len(rows):
        return scores, masks
    meeting = _Meeting(rows, s.rows)
    for i in range(start, len(terms)):
        docs, freqs = s.postings(terms[i])
        if not len(docs):
            continue
        at, picked = meeting.meet(docs)
        if not len(at):
            continue
        if len(picked) < len(freqs):
            freqs = freqs[picked]
        scores[at] += _term_part(idf[i], freqs, s.lengths[rows[at]], avg)
        masks[at] |= 1 << i
    return scores, masks
