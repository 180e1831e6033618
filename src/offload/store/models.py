"""Records the store hands out: entries, hits, tombstones, filters, reports."""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass, field
from typing import Literal

from offload.core.hashing import ctx_ref, short_ref
from offload.store.schema import hexed

Status = Literal["cold", "hot"]


def access_score(accessed: float, access_count: int, now: float) -> float:
    """Recency x frequency in [0, 1): a week-scale decay times log access count."""
    age_days = max(0.0, now - accessed) / 86400.0
    raw = math.log1p(access_count) * math.exp(-age_days / 7.0)
    return raw / (1.0 + raw)


def _event_time(row: sqlite3.Row) -> float | None:
    """A row's ``event_time`` (absent from a row of a store not yet migrated, or a dict
    built before the column existed)."""
    try:
        value = row["event_time"]
    except (IndexError, KeyError):
        return None
    return None if value is None else float(value)


#: The kind (and source prefix) the proxy stores its page-outs under: their body is a
#: transcript of the exact messages their content holds (:attr:`Entry.body_form`).
TRANSCRIPT_KIND = "proxy"


@dataclass(frozen=True)
class Entry:
    """One row of the matrix: metadata about a stored body."""

    id: int
    kind: str
    topic: str
    tags: tuple[str, ...]
    summary: str
    salience: float
    status: Status
    pinned: bool
    tokens: int
    content_hash: str
    block_hash: str
    source: str
    scope: str
    created: float
    accessed: float
    access_count: int
    expires: float | None
    regenerate: str
    size: int
    lines: int
    labels: tuple[str, ...] = ()
    # when what the entry tells happened (a message's timestamp, a conversation's date),
    # epoch seconds; None: the writer did not say (``created`` stands for it)
    event_time: float | None = None

    @property
    def ref(self) -> str:
        """The short reference shown to people and models."""
        return short_ref(self.content_hash)

    @property
    def full_ref(self) -> str:
        """The full ``ctx:sha256:`` reference."""
        return ctx_ref(self.content_hash)

    @property
    def compressed(self) -> bool:
        """True when the stored body differs from what the caller sent (a compression, or
        a transcript of it: :attr:`body_form`)."""
        return self.block_hash != self.content_hash

    @property
    def body_form(self) -> str:
        """What the stored body (what ``read`` shows) is beside the content: ``""`` the
        content itself; ``"transcript"`` a readable rendering of content that is kept
        exactly (the proxy's paged-out messages: kind ``proxy``, source ``proxy:…``, the
        content their exact JSON); ``"lossy"`` a compression (the local model's), the
        original kept beside it unless it was stored with ``keep_original=False``."""
        if not self.compressed:
            return ""
        if self.kind == TRANSCRIPT_KIND and self.source.startswith(TRANSCRIPT_KIND + ":"):
            return "transcript"
        return "lossy"

    def access_score(self, now: float) -> float:
        """Recency x frequency in [0, 1): a week-scale decay times log access count."""
        return access_score(self.accessed, self.access_count, now)

    @classmethod
    def from_row(cls, row: sqlite3.Row, labels: tuple[str, ...] = ()) -> Entry:
        """Build from an ``entries`` row joined with its block's size and lines."""
        tags = tuple(t for t in row["tags"].split(" ") if t)
        return cls(
            id=row["id"],
            kind=row["kind"],
            topic=row["topic"],
            tags=tags,
            summary=row["summary"],
            salience=row["salience"],
            status=row["status"],
            pinned=bool(row["pinned"]),
            tokens=row["tokens"],
            content_hash=hexed(row["content_hash"]),
            block_hash=hexed(row["block_hash"]),
            source=row["source"],
            scope=row["scope"],
            created=row["created"],
            accessed=row["accessed"],
            access_count=row["access_count"],
            expires=row["expires"],
            regenerate=row["regenerate"],
            size=row["size"],
            lines=row["lines"],
            labels=labels,
            event_time=_event_time(row),
        )

    @property
    def when(self) -> float:
        """When what the entry tells happened: its event time, else when it was stored."""
        return self.created if self.event_time is None else self.event_time


@dataclass(frozen=True)
class PutResult:
    """What :meth:`Store.put` did: the entry, whether it is new or a dedup hit, and the
    entry the put's label moved from (None: it named no other entry)."""

    entry: Entry
    created: bool
    label_moved_from: int | None = None


@dataclass(frozen=True)
class Checkout:
    """A checked-out entry: its body, the nonce checkin needs, and a churn warning."""

    entry: Entry
    body: str
    nonce: str
    churn: str = ""


@dataclass(frozen=True)
class Filters:
    """Which entries a listing or search considers. ``None`` means no constraint."""

    scope: str | None = None
    kinds: tuple[str, ...] = ()
    status: Status | None = None
    pinned: bool | None = None
    min_salience: float | None = None
    source_prefix: str | None = None
    created_after: float | None = None
    created_before: float | None = None


# a search or listing with no filter but the defaults
NO_FILTERS = Filters()


@dataclass(frozen=True)
class Hit:
    """One search result: an entry, the chunk that matched and where."""

    entry: Entry
    chunk_id: int | None  # None for a match on topic/summary/tags only
    start_line: int
    end_line: int
    match_line: int
    score: float
    snippet: str
    text: str  # the matched chunk's text ("" for metadata matches)
    # the best-matching lines of the chunk as (line number, excerpt), in line order
    lines: tuple[tuple[int, str], ...] = ()
    # the chunk is from a lossy entry's kept original (its lines are the original's; the
    # stored body, what read shows, is the compression): read the original to see it
    in_original: bool = False


@dataclass(frozen=True)
class Tombstone:
    """Why an entry is gone."""

    entry_id: int | None
    content_hash: str
    labels: tuple[str, ...]
    topic: str
    source: str
    reason: str
    gone: float
    regenerate: str
    scope: str = ""


@dataclass(frozen=True)
class Reindexed:
    """What a full reindex did: how many blocks it indexed, which it could not read."""

    indexed: int
    skipped: tuple[str, ...] = ()


@dataclass
class DoctorReport:
    """What ``doctor`` found and what it repaired."""

    blocks_checked: int = 0
    corrupt_blocks: list[str] = field(default_factory=list)
    missing_blocks: list[str] = field(default_factory=list)
    orphan_blocks: list[str] = field(default_factory=list)
    unindexed_blocks: list[str] = field(default_factory=list)
    stale_chunks: int = 0
    index_ok: bool = True
    stale_hot: int = 0
    chunk_map_off: int = 0  # entry_chunks rows missing or beyond what entries/chunks say
    unreadable_counts: list[int] = field(default_factory=list)  # chunk ids (index.py)
    # rows of count_dictionaries that are no usable dictionary: (their id, why)
    bad_dictionaries: list[tuple[object, str]] = field(default_factory=list)
    # entry ids whose content hash names content the store does not hold (a lossy entry
    # without its original): nothing here can show the body stands for that content
    unverified_content: list[int] = field(default_factory=list)
    # entry ids whose tags are all single letters: `offload add --tags a,b` of 2026-12-01 to
    # 2026-12-05 stored one tag per letter. A note, not a problem: the words are lost, so
    # nothing can repair them, and a user may have meant such tags
    letter_tags: list[int] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """True when nothing is wrong (repairs count as problems found)."""
        return not (
            self.corrupt_blocks
            or self.missing_blocks
            or self.orphan_blocks
            or self.unindexed_blocks
            or self.stale_chunks
            or self.stale_hot
            or self.chunk_map_off
            or self.unreadable_counts
            or self.bad_dictionaries
            or self.unverified_content
            or not self.index_ok
        )
