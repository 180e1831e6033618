"""This conversation's paged-out messages, indexed in memory for auto-recall.

Auto-recall runs on every turn, so it cannot afford a store-wide search: it ranks the
messages of this session's own parts (the range stub's chain) one by one, by BM25 over the
same terms the store indexes (:mod:`offload.core.analysis`). A part is content-addressed and
never changes, so its messages are read and analysed once (from the stored exact JSON,
re-rendered as the transcript the store holds: the same lines) and kept in a bounded cache;
a session's index is rebuilt only when a page-out adds a part. A query then costs the
postings of its terms: well under a millisecond for hundreds of messages.

Deterministic: the same parts and query give the same ranking (ties by message order).
"""

from __future__ import annotations

import heapq
import json
import math
import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from offload.core import analysis
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


@dataclass(frozen=True)
class Doc:
    """One paged-out message as its part's transcript shows it."""

    ref: str  # short reference of its part
    index: int  # its index in the conversation
    first_line: int  # its header line in the part's transcript
    last_line: int
    header: str
    text: str  # its lines after the header
    terms: tuple[tuple[str, int], ...]  # distinct terms with their counts
    length: int  # how many terms it has


@dataclass(frozen=True)
class Part:
    """The messages of one stored part and the part before it."""

    docs: tuple[Doc, ...]
    earlier: str | None


def read_part(store: Store, ref: str, scope: str) -> Part:
    """The messages of the part ``ref`` names, from its stored exact JSON."""
    entry = store.resolve(ref, scope)
    doc = json.loads(store.body(entry, original=True))
    first = int(doc["first"])
    messages = doc["messages"]
    # the stored transcript starts with a one-line title: the same lines as this render
    rendered = transcript.render(messages, first, "title")
    rows = rendered.text.split("\n")
    ends = [*(s - 1 for s in rendered.lines[1:]), len(rows)]
    docs = []
    for offset, (start, end) in enumerate(zip(rendered.lines, ends, strict=True)):
        text = "\n".join(rows[start:end])
        counts = Counter(analysis.terms(text))
        docs.append(
            Doc(
                ref=entry.ref,
                index=first + offset,
                first_line=start,
                last_line=end,
                header=rows[start - 1],
                text=text,
                terms=tuple(sorted(counts.items())),
                length=sum(counts.values()),
            )
        )
    earlier = doc.get("earlier")
    return Part(tuple(docs), earlier if isinstance(earlier, str) else None)


class SessionIndex:
    """BM25 over the messages of one session's parts."""

    def __init__(self, docs: Sequence[Doc]) -> None:
        self.docs = tuple(sorted(docs, key=lambda d: d.index))
        self.postings: dict[str, list[tuple[int, int]]] = {}
        for i, doc in enumerate(self.docs):
            for term, n in doc.terms:
                self.postings.setdefault(term, []).append((i, n))
        self.average = sum(d.length for d in self.docs) / max(1, len(self.docs))
        # BM25's length normalisation of each message, computed once
        self._norms = [K1 * (1.0 - B + B * d.length / max(1.0, self.average)) for d in self.docs]

    def weight(self, term: str) -> float:
        """The term's inverse document frequency (0 for a term no message holds)."""
        df = len(self.postings.get(term, ()))
        if not df:
            return 0.0
        n = len(self.docs)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def rank(self, terms: Sequence[str], limit: int) -> list[tuple[float, Doc]]:
        """The best ``limit`` messages for ``terms`` (distinct, in query order), best first:
        each scored by BM25 plus ``NEIGHBOUR_SHARE`` of the BM25 of the messages right
        before and after it; messages that neither match nor neighbour a match are left
        out."""
        own: dict[int, float] = {}
        norms = self._norms
        get = own.get
        for term in dict.fromkeys(terms):
            lift = self.weight(term) * (K1 + 1.0)
            for i, n in self.postings.get(term, ()):
                own[i] = get(i, 0.0) + lift * n / (n + norms[i])
        scores = dict(own)
        docs = self.docs
        for i, score in own.items():
            share = NEIGHBOUR_SHARE * score
            for j in (i - 1, i + 1):
                if 0 <= j < len(docs) and abs(docs[j].index - docs[i].index) == 1:
                    scores[j] = scores.get(j, 0.0) + share
        best = heapq.nsmallest(limit, scores.items(), key=lambda kv: (-kv[1], kv[0]))
        return [(s, docs[i]) for i, s in best]


class Memory:
    """Session indexes built from stored parts, cached (thread-safe)."""

    def __init__(self, store: Store, scope: str, *, parts: int = 128, sessions: int = 64) -> None:
        self.store = store
        self.scope = scope
        self._parts: OrderedDict[str, Part] = OrderedDict()
        self._sessions: OrderedDict[str, SessionIndex] = OrderedDict()
        self._max_parts = parts
        self._max_sessions = sessions
        self._lock = threading.Lock()

    def index(self, newest: str) -> SessionIndex:
        """The index of the parts along the chain that starts at part ``newest``; a part
        that cannot be read (forgotten, damaged) ends the chain there."""
        with self._lock:
            known = self._sessions.get(newest)
            if known is not None:
                self._sessions.move_to_end(newest)
                return known
        docs: list[Doc] = []
        cursor: str | None = newest
        seen: set[str] = set()
        while cursor is not None and cursor not in seen and len(seen) < MAX_PARTS:
            seen.add(cursor)
            part = self._part(cursor)
            if part is None:
                break
            docs.extend(part.docs)
            cursor = part.earlier
        built = SessionIndex(docs)
        with self._lock:
            self._sessions[newest] = built
            while len(self._sessions) > self._max_sessions:
                self._sessions.popitem(last=False)
        return built

    def _part(self, ref: str) -> Part | None:
        with self._lock:
            known = self._parts.get(ref)
            if known is not None:
                self._parts.move_to_end(ref)
                return known
        try:
            part = read_part(self.store, ref, self.scope)
        except (OffloadError, ValueError, KeyError, TypeError):
            return None  # unreadable: recall goes without it, never fails the request
        with self._lock:
            self._parts[ref] = part
            while len(self._parts) > self._max_parts:
                self._parts.popitem(last=False)
        return part


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
