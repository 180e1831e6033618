"""A put between its two halves: the options it was asked with, the prepared work the
write transaction inserts, and the checks and lock keys both halves share.

``Store.put`` prepares (analysis, compression, embedding) and commits; on SQLite the
preparation runs outside any lock, on PostgreSQL a single put without an embedding model
prepares inside its transaction, under its own locks. What passes between them lives here.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from offload.core.hashing import encoded_windows
from offload.core.text import timeexpr
from offload.errors import InvalidInput, WrongType
from offload.store.backend import Conn
from offload.store.write import index, rows


class NeedsStoreLock(Exception):  # a signal between two methods, never raised out
    """A put running beside others met work its own locks do not cover."""


def put_keys(pending: Sequence[PendingPut]) -> list[str]:
    """What prepared puts read and then write, as lock keys: each content in its scope
    (dedup), each block (content-addressed: inserted once, indexed once), each label."""
    keys: list[str] = []
    for p in pending:
        keys.append(f"entry\0{p.content_hash}\0{p.options.scope}")
        keys.extend(f"block\0{d}" for d in p.digests)
        if p.options.label is not None:
            keys.append(f"label\0{p.options.label}")
    return keys


def take_vocabulary(pending: Sequence[PendingPut]) -> list[str]:
    """The new vocabulary words of every prepared block, sorted, leaving the blocks with
    none to insert: the transaction inserts them all at once (:func:`insert_vocabulary`)."""
    words: set[str] = set()
    for p in pending:
        for i, b in enumerate(p.blocks):
            if b.index is not None and b.index.vocabulary:
                words.update(b.index.vocabulary)
                p.blocks[i] = dataclasses.replace(
                    b, index=dataclasses.replace(b.index, vocabulary=())
                )
    return sorted(words)


def insert_vocabulary(conn: Conn, words: list[str]) -> None:
    """Insert vocabulary words in sorted order: two puts inserting overlapping words then
    wait for each other in one order, never in a cycle (one statement on PostgreSQL)."""
    index.insert_vocabulary_words(conn, words)


def check_text(text: Any, what: str) -> None:
    """Refuse what is not text, or text that cannot be stored (lone surrogates)."""
    if not isinstance(text, str):
        raise InvalidInput(f"{what} must be text, got {type(text).__name__}")
    for _ in encoded_windows(text):  # a window at a time: a big text is not copied whole
        pass


# event times a store takes: from 1 January 0001 to 31 December 9999 (what a date says)
EVENT_TIME_RANGE = (timeexpr.EARLIEST, timeexpr.LATEST)


def check_event_time(value: Any) -> float | None:
    """``value`` as an event time (epoch seconds), or None; refused unless it is a finite
    number within :data:`EVENT_TIME_RANGE`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WrongType(f"event_time must be a number of seconds, got {type(value).__name__}")
    low, high = EVENT_TIME_RANGE
    if not low <= float(value) <= high:  # NaN fails both comparisons
        raise InvalidInput(f"event_time {value!r} is not a time between years 1 and 9999")
    return float(value)


def check_label(label: str) -> None:
    """Refuse a label that is empty, too long, spaced, or would read as a hash or an id."""
    if not isinstance(label, str) or not label.strip() or len(label) > 256:
        raise InvalidInput("a label must be 1-256 characters")
    if any(c.isspace() for c in label):
        raise InvalidInput(f"label {label!r} must not contain spaces")
    if label.lower().startswith("ctx:") or label.isdigit():
        raise InvalidInput(f"label {label!r} would be read as a hash or an id")


# A kind is a short token: it is shown on every entry line, in stubs and in counts, so it
# may not carry a line break, a control character or a fence tag of its own making
KIND = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")


def check_kind(kind: Any) -> str:
    """``kind`` stripped (empty: ``text``); refused unless it is a short token."""
    if not isinstance(kind, str):
        raise WrongType(f"kind must be a string, got {type(kind).__name__}")
    token: str = kind.strip() or "text"
    if not KIND.fullmatch(token):
        shown = token if len(token) <= 40 else token[:40] + "…"
        raise InvalidInput(
            f"kind {shown!r} is not a short token: 1-32 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit (e.g. text, log, tool-output)"
        )
    return token


def check_tags(tags: Any) -> tuple[str, ...]:
    """``tags`` as a tuple of strings; a bare string is refused (iterating it would store
    each of its characters as a tag)."""
    if isinstance(tags, str | bytes):
        raise WrongType(
            f"tags must be a list of strings, got the string {tags[:40]!r}; "
            "split it first (e.g. tags.split(','))"
        )
    try:
        out = tuple(tags)
    except TypeError:
        raise WrongType(f"tags must be a list of strings, got {type(tags).__name__}") from None
    for t in out:
        if not isinstance(t, str):
            raise WrongType(f"each tag must be a string, got {type(t).__name__}")
    return out


# the largest descriptive fields a put takes: room for any real topic (a path is at most
# 4,096 bytes), summary or tag list, while every entry line, stub and listing stays bounded
MAX_TOPIC_CHARS = 4096
MAX_SUMMARY_CHARS = 16384
MAX_TAGS = 256
MAX_TAG_CHARS = 128


def clean_tags(tags: Sequence[str]) -> list[str]:
    """Tags as a list of distinct words, split on commas and white space; refused past
    ``MAX_TAGS`` of them or a tag past ``MAX_TAG_CHARS``."""
    out: dict[str, None] = {}
    for t in tags:
        for part in str(t).replace(",", " ").split():
            if len(part) > MAX_TAG_CHARS:
                raise InvalidInput(
                    f"a tag must be at most {MAX_TAG_CHARS} characters, got one of {len(part):,}"
                )
            out[part] = None
            if len(out) > MAX_TAGS:
                raise InvalidInput(f"at most {MAX_TAGS} tags an entry")
    return list(out)


def check_meta(topic: Any, summary: Any) -> None:
    """Refuse a topic or summary that is not text or is past its bound."""
    check_text(topic, "topic")
    check_text(summary, "summary")
    if len(topic) > MAX_TOPIC_CHARS:
        raise InvalidInput(
            f"a topic must be at most {MAX_TOPIC_CHARS:,} characters, got {len(topic):,}"
        )
    if len(summary) > MAX_SUMMARY_CHARS:
        raise InvalidInput(
            f"a summary must be at most {MAX_SUMMARY_CHARS:,} characters, got {len(summary):,}"
        )


@dataclass(frozen=True)
class PutOptions:
    """What a caller asked of one put, validated."""

    kind: str
    topic: str
    tags: tuple[str, ...]
    summary: str
    salience: float
    pinned: bool
    source: str
    scope: str
    label: str | None
    expires: float | None
    regenerate: str = ""
    body: str | None = None
    keep_original: bool = True
    tokens: int | None = None
    index_original: bool = False
    index_from_line: int = 1
    # when what the content tells happened (epoch seconds), apart from when it is stored
    event_time: float | None = None
    # told how a big body's analysis and write go (index.FREEZE_CHARS)
    progress: index.PutProgress | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_meta(self.topic, self.summary)


@dataclass
class PendingPut:
    """A put whose CPU work is done: what the write transaction inserts."""

    options: PutOptions
    kind: str
    tags: str
    content: str
    data: bytes
    content_hash: str
    blocks: list[rows.PreparedBlock] = field(default_factory=list)
    # the hashes of the blocks it stores (the body's first), known before they are prepared
    digests: tuple[str, ...] = ()
    tokens: int = 0
    meta: tuple[str, str, str, str, str] = ("", "", "", "", "")
    vector: bytes | None = None  # packed (store/write/vectors.py); None without a model
    # what the vector describes, while a batch has not embedded it yet (writes.prepare_many)
    vector_text: str | None = None
