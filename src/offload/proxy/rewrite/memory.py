"""This conversation's paged-out messages, indexed in memory for auto-recall.

Auto-recall runs on every turn, so it cannot afford a store-wide search: it ranks the
messages of this session's own parts (the range stub's chain) one by one, by BM25 over the
same terms the store indexes (:mod:`offload.core.text.analysis`). A part is content-addressed and
never changes, so its messages are read and analysed once (from the stored exact JSON,
re-rendered as the transcript the store holds: the same lines) and kept in a bounded cache;
a session's index is put together from its parts' own postings when a page-out adds a
part (each part's are built once), so a page-out costs what it adds, not the whole
history. A message's terms are counted once per content, so a part that takes in the
parts before it re-counts only what they did not hold. A query then costs the postings of
its terms: well under a millisecond for hundreds of messages.

Deterministic: the same parts and query give the same ranking (ties by message order).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import json
import math
import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from offload.core.hashing import CTX_PREFIX, short_ref, text_hash
from offload.core.lru import Lru
from offload.core.text import analysis
from offload.errors import OffloadError
from offload.proxy.rewrite import transcript
from offload.store.models import Filters
from offload.store.store import Store

#: BM25's term-frequency saturation and length normalisation (the usual values).
K1 = 1.2
B = 0.75
#: The share of each neighbour's own score a message gets (the messages right before and
#: after it in the conversation): a reply is about what it answers, and a message that
#: says "look at this" is found through the words of the one that names it.
NEIGHBOUR_SHARE = 0.5
#: The longest chain of parts followed (a guard against a damaged chain).
MAX_PARTS = 10_000
#: Document frequencies one index keeps (a query's terms are looked up once per index).
_DF_CACHED = 65_536


class Doc(NamedTuple):
    """One paged-out message as its part's transcript shows it (a named tuple, made in a
    tenth of a frozen dataclass's time: a merged part makes one for every message it takes
    in, at every page-out)."""

    ref: str  # short reference of its part
    # its index in the conversation (the field hides tuple.index, which nothing here calls)
    index: int  # type: ignore[assignment]
    first_line: int  # its header line in the part's transcript
    last_line: int
    header: str
    text: str  # its lines after the header
    terms: tuple[tuple[str, int], ...]  # distinct terms with their counts
    length: int  # how many terms it has


#: Term counts of message texts kept by one :class:`Memory` (a merged part re-reads the
#: messages of the parts it takes in: their counts are looked up, not made again).
TERM_COUNTS = 16384

#: A message text's distinct terms with their counts, and how many terms it has.
TermCounts = tuple[tuple[tuple[str, int], ...], int]


def count_terms(text: str) -> TermCounts:
    """The distinct terms of ``text`` with their counts (sorted), and how many it has."""
    counts = Counter(analysis.terms(text))
    return tuple(sorted(counts.items())), sum(counts.values())


#: Each term's (position, count) in a run of messages, in order of position.
Postings = dict[str, tuple[tuple[int, int], ...]]


@dataclass(frozen=True)
class Part:
    """The messages of one stored part and the part before it (``given``: the postings
    of its messages in runs, when they were put together from parts it took in)."""

    docs: tuple[Doc, ...]
    earlier: str | None
    given: tuple[tuple[int, Postings], ...] | None = field(default=None, compare=False)

    @functools.cached_property
    def segments(self) -> tuple[tuple[int, Postings], ...]:
        """The postings of its messages in runs: (position of the run's first, postings
        by position in the run)."""
        return self.given if self.given is not None else ((0, _postings(self.docs)),)

    @functools.cached_property
    def ordered(self) -> bool:
        """Whether its messages are in conversation order, each once."""
        return all(a.index < b.index for a, b in itertools.pairwise(self.docs))

    @functools.cached_property
    def length(self) -> int:
        """How many terms its messages have."""
        return sum(d.length for d in self.docs)


def _postings(docs: Sequence[Doc]) -> Postings:
    """Each term's (position, count) in ``docs``; kept as tuples, which the cyclic GC
    stops tracking (a session's cached postings are most of the proxy's live objects, and
    every full collection would walk them)."""
    building: dict[str, list[tuple[int, int]]] = {}
    for i, doc in enumerate(docs):
        for term, n in doc.terms:
            building.setdefault(term, []).append((i, n))
    return {term: tuple(found) for term, found in building.items()}


def read_part(
    store: Store, ref: str, scope: str, terms_of: Callable[[str], TermCounts] = count_terms
) -> Part:
    """The messages of the part ``ref`` names, from its stored exact JSON (``terms_of``
    counts a message's terms: a cache of :func:`count_terms` may stand in for it)."""
    entry = store.resolve(ref, scope)
    doc = json.loads(store.body(entry, original=True))
    first = int(doc["first"])
    # the stored transcript starts with a one-line title: the same lines as this render
    rendered = transcript.render(doc["messages"], first, "title")
    earlier = doc.get("earlier")
    return part_of(
        entry.ref,
        first,
        rendered.text,
        rendered.lines,
        earlier if isinstance(earlier, str) else None,
        terms_of,
    )


def part_of(
    ref: str,
    first: int,
    text: str,
    lines: Sequence[int],
    earlier: str | None,
    terms_of: Callable[[str], TermCounts] = count_terms,
) -> Part:
    """The part whose transcript is ``text`` (``lines``: each message's header line;
    ``ref``: its short reference), its first message the conversation's ``first``."""
    rows = text.split("\n")
    ends = [*(s - 1 for s in lines[1:]), len(rows)]
    messages = []
    for start, end in zip(lines, ends, strict=True):
        body = "\n".join(rows[start:end])
        messages.append((rows[start - 1], body, terms_of(body)))
    return part_of_messages(ref, first, messages, lines, len(rows), earlier)


def part_of_messages(
    ref: str,
    first: int,
    messages: Sequence[tuple[str, str, TermCounts]],
    lines: Sequence[int],
    rows: int,
    earlier: str | None,
) -> Part:
    """:func:`part_of` from each message's (header, text, terms) in a transcript of
    ``rows`` lines, without splitting the transcript again nor counting terms again (a
    part that takes in the parts before it has their messages' already)."""
    ends = [*(s - 1 for s in lines[1:]), rows]
    docs = []
    for offset, ((header, body, counted), start, end) in enumerate(
        zip(messages, lines, ends, strict=True)
    ):
        terms, length = counted
        # ref, index, first_line, last_line, header, text, terms, length
        docs.append(Doc(ref, first + offset, start, end, header, body, terms, length))
    return Part(tuple(docs), earlier)


def count_rows(text: str) -> int:
    """How many rows ``text.split("\\n")`` gives."""
    return text.count("\n") + 1


class SessionIndex:
    """BM25 over the messages of one session's parts.

    Built from the parts' own postings when they are in conversation order one after the
    other (:meth:`of_parts`): nothing is re-indexed, and each posting is found at its
    part's offset. The scores are those of one index built over all the messages.
    """

    def __init__(self, docs: Sequence[Doc]) -> None:
        ordered = tuple(sorted(docs, key=lambda d: d.index))
        self._setup(ordered, [(0, _postings(ordered))], sum(d.length for d in ordered))

    @classmethod
    def of_parts(cls, parts: Sequence[Part]) -> SessionIndex:
        """The index of ``parts`` (newest first, as their chain runs)."""
        oldest = [p for p in reversed(parts) if p.docs]
        if not all(p.ordered for p in oldest) or any(
            a.docs[-1].index >= b.docs[0].index for a, b in itertools.pairwise(oldest)
        ):
            return cls([d for p in parts for d in p.docs])  # overlapping: sort them all
        index = cls.__new__(cls)
        docs = tuple(itertools.chain.from_iterable(p.docs for p in oldest))
        offsets = itertools.accumulate((len(p.docs) for p in oldest), initial=0)
        segments = [
            (o + at, postings)
            for o, p in zip(offsets, oldest, strict=False)
            for at, postings in p.segments
        ]
        index._setup(docs, segments, sum(p.length for p in oldest))
        return index

    def _setup(
        self,
        docs: tuple[Doc, ...],
        segments: list[tuple[int, Postings]],
        length: int,
    ) -> None:
        self.docs = docs
        self._segments = segments  # (offset of the first doc, postings by local position)
        self._at = [d.index for d in docs]
        self._lengths = [d.length for d in docs]
        self._norms: list[float] | None = None
        self.average = length / max(1, len(docs))
        self._df: dict[str, int] = {}

    def _normalisations(self) -> list[float]:
        """BM25's length normalisation of each message, worked out once per distinct
        length when the index is first searched."""
        if self._norms is None:
            average = max(1.0, self.average)
            table = {n: K1 * (1.0 - B + B * n / average) for n in set(self._lengths)}
            self._norms = list(map(table.__getitem__, self._lengths))
        return self._norms

    def weight(self, term: str) -> float:
        """The term's inverse document frequency (0 for a term no message holds)."""
        df = self._df.get(term)
        if df is None:
            df = sum(len(postings.get(term, ())) for _, postings in self._segments)
            if len(self._df) < _DF_CACHED:
                self._df[term] = df
        if not df:
            return 0.0
        n = len(self.docs)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def rank(self, terms: Sequence[str], limit: int) -> list[tuple[float, Doc]]:
        """The best ``limit`` messages for ``terms`` (distinct, in query order), best first:
        each scored by BM25 plus ``NEIGHBOUR_SHARE`` of the BM25 of the messages right
        before and after it; messages that neither match nor neighbour a match are left
        out."""
        if limit <= 0:
            return []
        own: dict[int, float] = {}
        get = own.get
        norms = self._normalisations()
        for term in dict.fromkeys(terms):
            lift = self.weight(term) * (K1 + 1.0)
            if not lift:
                continue
            for offset, postings in self._segments:
                for local, n in postings.get(term, ()):
                    i = offset + local
                    own[i] = get(i, 0.0) + lift * n / (n + norms[i])
        scores = dict(own)
        at = self._at
        last = len(at) - 1
        for i, score in own.items():  # docs are in conversation order
            share = NEIGHBOUR_SHARE * score
            if i > 0 and at[i] - at[i - 1] == 1:
                scores[i - 1] = scores.get(i - 1, 0.0) + share
            if i < last and at[i + 1] - at[i] == 1:
                scores[i + 1] = scores.get(i + 1, 0.0) + share
        if len(scores) > limit:  # only those scoring at least the limit-th best can rank
            least = heapq.nlargest(limit, scores.values())[-1]
            items = [kv for kv in scores.items() if kv[1] >= least]
        else:
            items = list(scores.items())
        items.sort(key=lambda kv: (-kv[1], kv[0]))
        return [(s, self.docs[i]) for i, s in items[:limit]]


class Memory:
    """Session indexes built from stored parts, cached (thread-safe)."""

    def __init__(self, store: Store, scope: str, *, parts: int = 128, sessions: int = 64) -> None:
        self.store = store
        self.scope = scope
        # an ordered dict, not an Lru: a part dropped takes its entry in _starts with it
        self._parts: OrderedDict[str, Part] = OrderedDict()
        self._max_parts = parts
        self._sessions: Lru[str, SessionIndex] = Lru(sessions)
        self._terms: Lru[str, TermCounts] = Lru(TERM_COUNTS)  # by the text's hash
        # the cached parts by their first message (index, text), with their references: a
        # part that takes in the parts before it starts with them, and their postings are
        # its first runs
        self._starts: dict[tuple[int, str], tuple[str, Part]] = {}
        self._lock = threading.Lock()

    def terms_of(self, text: str) -> TermCounts:
        """:func:`count_terms` of ``text``, once per text."""
        key = text_hash(text)
        known = self._terms.get(key)
        if known is not None:
            return known
        counted = count_terms(text)
        self._terms.put(key, counted)
        return counted

    def index(self, newest: str) -> SessionIndex:
        """The index of the parts along the chain that starts at part ``newest``; a part
        that cannot be read (forgotten, damaged) ends the chain there."""
        known = self._sessions.get(newest)
        if known is not None:
            return known
        parts: list[Part] = []
        cursor: str | None = newest
        seen: set[str] = set()
        while cursor is not None and cursor not in seen and len(seen) < MAX_PARTS:
            seen.add(cursor)
            part = self._part(cursor)
            if part is None:
                break
            parts.append(part)
            cursor = part.earlier
        built = SessionIndex.of_parts(parts)
        self._sessions.put(newest, built)
        return built

    def remember(
        self,
        ref: str,
        first: int,
        text: str,
        lines: Sequence[int],
        earlier: str | None,
        messages: Sequence[tuple[str, str, TermCounts]] | None = None,
    ) -> None:
        """A part just stored under ``ref`` (its transcript ``text``, as :func:`part_of`
        takes it; ``messages``: each message's header, text and terms in it, when known,
        so the transcript is not split and counted again): kept, so the index that meets
        it next does not read it back."""
        with self._lock:
            if ref in self._parts:
                return
        short = short_ref(ref.removeprefix(CTX_PREFIX))
        if messages is not None and lines:
            rows = count_rows(text)
            part = part_of_messages(short, first, messages, lines, rows, earlier)
        else:
            part = part_of(short, first, text, lines, earlier, self.terms_of)
        taken, superseded = self._taken_in(part)
        self._keep(ref, taken)
        self._forget_superseded(superseded, earlier)

    def _forget_superseded(self, taken: Sequence[str], earlier: str | None) -> None:
        """Drop what a part just remembered supersedes: the cached parts it took in (its
        own messages and postings hold theirs) and the indexes of the chains that ended
        at one of them or at the part before it (the session's chain now ends at the new
        part). Each is read back or put together again if an older chain is ever asked
        for; until then it is memory the cyclic GC would walk at every full collection
        (a part's messages stay tracked), growing with every page-out."""
        with self._lock:
            for ref in taken:
                dropped = self._parts.pop(ref, None)
                if dropped is not None and dropped.docs:
                    key = _start_key(dropped)
                    if self._starts.get(key, ("", None))[1] is dropped:
                        del self._starts[key]
        for ref in (*taken, *((earlier,) if earlier is not None else ())):
            self._sessions.pop(ref)

    def _part(self, ref: str) -> Part | None:
        with self._lock:
            known = self._parts.get(ref)
            if known is not None:
                self._parts.move_to_end(ref)
                return known
        try:
            part, _ = self._taken_in(read_part(self.store, ref, self.scope, self.terms_of))
        except (OffloadError, ValueError, KeyError, TypeError):
            return None  # unreadable: recall goes without it, never fails the request
        return self._keep(ref, part)

    def _keep(self, ref: str, part: Part) -> Part:
        with self._lock:
            self._parts[ref] = part
            if part.docs:
                self._starts[_start_key(part)] = (ref, part)
            while len(self._parts) > self._max_parts:
                _, dropped = self._parts.popitem(last=False)
                key = _start_key(dropped) if dropped.docs else None
                if key is not None and self._starts.get(key, ("", None))[1] is dropped:
                    del self._starts[key]
        return part

    def _taken_in(self, part: Part) -> tuple[Part, list[str]]:
        """``part`` with the postings of the cached parts it starts with (those it took
        in: the same messages, the same terms) as its first runs, so only the messages it
        adds are indexed; and the references of those parts."""
        docs = part.docs
        runs: list[tuple[int, Postings]] = []
        taken: list[str] = []
        at = 0
        while at < len(docs):
            with self._lock:
                ref, before = self._starts.get(_start_key(part, at), ("", None))
            size = len(before.docs) if before is not None else 0
            if before is None or not _same_terms(before.docs, docs[at : at + size]):
                break
            runs += [(at + offset, postings) for offset, postings in before.segments]
            taken.append(ref)
            at += size
        if not runs:
            return part, taken
        if at < len(docs):
            runs.append((at, _postings(docs[at:])))
        return Part(docs, part.earlier, tuple(runs)), taken


def _start_key(part: Part, at: int = 0) -> tuple[int, str]:
    return part.docs[at].index, part.docs[at].text


def _same_terms(a: Sequence[Doc], b: Sequence[Doc]) -> bool:
    """Whether two runs of messages index alike (the same messages, the same terms)."""
    return len(a) == len(b) and all(
        x.index == y.index and x.terms == y.terms for x, y in zip(a, b, strict=True)
    )


_MEMORIES: weakref.WeakKeyDictionary[Store, dict[str, Memory]] = weakref.WeakKeyDictionary()
_MEMORIES_LOCK = threading.Lock()
#: The most parts of one session looked at to find its newest.
_PARTS_LISTED = 10_000


def memory_for(store: Store, scope: str) -> Memory:
    """The one :class:`Memory` of ``store`` and ``scope`` in this process (auto-recall and
    the proxy's memory-search tool share its caches)."""
    with _MEMORIES_LOCK:
        per_store = _MEMORIES.setdefault(store, {})
        memory = per_store.get(scope)
        if memory is None:
            memory = per_store[scope] = Memory(store, scope)
        return memory


def newest_part(store: Store, scope: str, session: str) -> str | None:
    """The reference of the part this session paged out last (the head of its chain: a
    client's edit starts a new chain, and the newest one is the conversation's now)."""
    try:
        parts = store.entries(
            Filters(scope=scope, source_prefix=f"proxy:{session}"), limit=_PARTS_LISTED
        )
    except OffloadError:
        return None
    if not parts:
        return None
    return max(parts, key=lambda e: (e.created, e.id)).full_ref
