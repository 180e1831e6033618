"""A store's zstd dictionary for its chunks' cached term counts (SQLite).

A pair of chat turns' counts is ~310 bytes of compact text (store/write/packed_counts.py,
compact) and compresses alone to ~210: too little text for zstd to find what repeats. A
dictionary trained on the store's own counts holds what they share (the common words, the
speakers' names, their counts), and the same counts then take ~140 bytes (turns that do
not recur; ~120 in the search bench, whose texts repeat turns): 0.24x the raw text of a
store of turns less on disk (docs/benchmarks/search.md). Nothing is fitted in advance:
each store trains its own from its first :data:`TRAIN_AT` chunks.

The dictionaries are rows of ``count_dictionaries`` (migration
``m_chunk_term_counts_dictionary``), keyed by the id zstd writes into every frame made
with one, so a stored value says which it needs and values of several forms read alike
(a frame without a dictionary, as before, says 0). Rows are never changed or deleted: a
process keeps each one it has read. Only one is trained a store (when none exists, inside
the write that stores the :data:`TRAIN_AT`-th chunk); an id is derived from its content,
so two stores' dictionaries read by one process would share an id about once in 2**31
pairs, and then each frame's checksum makes the other store's values read as no cache
(scored from their text, as a chunk stored before the cache).

An older offload reading a value compressed with a dictionary finds no cache there and
scores the chunk from its text: slower, the same ranking.

A store file is data: a row that is no dictionary this offload trained (not a blob of at
most :data:`MOST_BYTES`, not a whole zstd dictionary, or one whose content names another
id than its row's) is never used: the values that name it read as no cache, new counts
are compressed without it, and ``offload doctor`` names it (:func:`problems`; ``--repair``
deletes it and counts its chunks again).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable

import zstandard

from offload.core.lru import Lru
from offload.store.backend import Sql
from offload.store.write.blocks import declared_size

# the write that stores this many chunks trains the store's dictionary (and one in each
# further this many, while too few of them had counts worth compressing)
TRAIN_AT = 2000
# a dictionary is trained on the counts of at most this many of the newest chunks
SAMPLES = 4000
# and fewer than this many compressed counts among them train none
MIN_SAMPLES = 200
# zstd's default dictionary size: 116 bytes a chat turn's counts against 123 for 64 KB, 136
# for 16 KB (20,000 turns); stored once a store
SIZE = 112640
# the level the counts are compressed at (packed_counts.LEVEL), which training tunes for
LEVEL = 3
# a sample is one chunk's counts of at most this many bytes, the samples at most the second
MOST_SAMPLE = 1 << 20
MOST_SAMPLES = 64 << 20
# a row larger than this is no dictionary this offload trained (SIZE): never read whole
MOST_BYTES = 1 << 20
# the counter of the chunk id up to which a dictionary was last tried
_TRIED = "count_dictionary_tried"

# what zstd trains on (its stub's type)
Samples = list[bytes | bytearray | memoryview]

_lock = threading.Lock()
_known: dict[int, zstandard.ZstdCompressionDict] = {}
# rows found to be no dictionary, by (id, type, size): why
_unusable: Lru[tuple[int, str, int], str] = Lru(256)


def frame_dictionary(stored: bytes) -> int:
    """The id of the dictionary a stored frame needs (0: none; -1: not a frame)."""
    try:
        return int(zstandard.get_frame_parameters(stored).dict_id)
    except zstandard.ZstdError:
        return -1


def known(conn: sqlite3.Connection, dict_id: int) -> zstandard.ZstdCompressionDict | None:
    """The dictionary of that id, read from the store the first time (None: it has none,
    or its row is no usable dictionary)."""
    found = _known.get(dict_id)
    if found is not None:
        return found
    row = conn.execute(_READ, (MOST_BYTES, dict_id)).fetchone()
    if row is None:
        return None
    made, _why = _loaded(dict_id, row)
    return made


def problems(conn: sqlite3.Connection) -> list[tuple[object, str]]:
    """The rows of ``count_dictionaries`` that are no usable dictionary: (their id, why)."""
    out: list[tuple[object, str]] = []
    for dict_id, kind, size, data in conn.execute(_EVERY, (MOST_BYTES,)):
        if not isinstance(dict_id, int) or isinstance(dict_id, bool):
            out.append((dict_id, f"its id is {str(dict_id)[:40]!r}, not a whole number"))
            continue
        _made, why = _loaded(dict_id, (kind, size, data))
        if why:
            out.append((dict_id, why))
    return out


def _loaded(
    dict_id: int, row: tuple[object, object, object]
) -> tuple[zstandard.ZstdCompressionDict | None, str]:
    """The dictionary a row (its data's type, size and bytes) holds, or why it is none.
    A row found unusable is remembered (rows are never changed), not checked again."""
    kind, size, data = row
    key = (dict_id, str(kind), size if isinstance(size, int) else -1)
    why = _unusable.get(key)
    if why is not None:
        return None, why
    why = _why_not(dict_id, kind, size, data)
    if why:
        _unusable.put(key, why)
        return None, why
    assert isinstance(data, bytes)
    return _keep(dict_id, data), ""


def _why_not(dict_id: int, kind: object, size: object, data: object) -> str:
    if kind != "blob" or not isinstance(data, bytes):
        shown = f"{size} bytes" if kind == "blob" else f"a {kind} value"
        return f"it holds {shown}, not a dictionary of at most {MOST_BYTES} bytes"
    try:
        made = zstandard.ZstdCompressionDict(data, dict_type=zstandard.DICT_TYPE_FULLDICT)
        made.precompute_compress(level=LEVEL)
    except zstandard.ZstdError as exc:
        return f"it is not a zstd dictionary ({exc})"
    if int(made.dict_id()) != dict_id:
        return f"its content is dictionary {made.dict_id()}, not {dict_id}"
    return ""


def _keep(dict_id: int, data: bytes) -> zstandard.ZstdCompressionDict:
    made = zstandard.ZstdCompressionDict(data)
    with _lock:
        return _known.setdefault(dict_id, made)


# the data's type and size first: a row past the bound (or not bytes) is never read whole
_COLUMNS = (
    "typeof(data), length(data), "
    "CASE WHEN typeof(data) = 'blob' AND length(data) <= ? THEN data END "
    "FROM count_dictionaries"
)
_READ = Sql.sqlite_only(f"SELECT {_COLUMNS} WHERE id = ?")
_EVERY = Sql.sqlite_only(f"SELECT id, {_COLUMNS} ORDER BY id")
_DROP = Sql.sqlite_only("DELETE FROM count_dictionaries WHERE id IS ?")
_STATE = Sql.sqlite_only(
    "SELECT (SELECT id FROM count_dictionaries ORDER BY id LIMIT 1), "
    "(SELECT max(id) FROM chunks), "
    f"(SELECT value FROM counters WHERE name = '{_TRIED}')"
)
_MARK_TRIED = Sql.sqlite_only(
    "INSERT INTO counters (name, value) VALUES (?, ?) "
    "ON CONFLICT (name) DO UPDATE SET value = excluded.value"
)
_SAMPLES = Sql.sqlite_only(
    "SELECT CAST(packed_counts AS BLOB) FROM chunks WHERE id > ? "
    "AND packed_counts IS NOT NULL ORDER BY id"
)
_STORE = Sql.sqlite_only("INSERT OR IGNORE INTO count_dictionaries (id, data) VALUES (?, ?)")


def for_writing(
    conn: sqlite3.Connection, unpack: Callable[[bytes], str | None]
) -> zstandard.ZstdCompressionDict | None:
    """The dictionary new counts are compressed with, inside the caller's write
    transaction: the store's, trained now from its newest chunks' counts (``unpack``
    reads one's compressed value) when it has none and :data:`TRAIN_AT` more chunks were
    stored since the last try; None while it has none."""
    dict_id, top, tried = conn.execute(_STATE).fetchone()
    if dict_id is not None:
        # a row that is no dictionary (a damaged or hostile file): compressed without one
        return known(conn, dict_id) if isinstance(dict_id, int) else None
    top, tried = _whole(top), _whole(tried)
    if top - tried < TRAIN_AT:
        return None
    conn.execute(_MARK_TRIED, (_TRIED, top))
    samples: Samples = []
    held = 0
    for (packed,) in conn.execute(_SAMPLES, (top - SAMPLES,)):
        stored = bytes(packed)
        # a frame that says it holds more than a chunk's counts could is not unpacked (a
        # damaged or hostile file: zstd allocates what a frame says)
        text = unpack(stored) if 0 <= declared_size(stored) <= MOST_SAMPLE else None
        if text is not None:
            samples.append(text.encode())
            held += len(samples[-1])
            if held > MOST_SAMPLES:
                break
    return train(conn, samples)


def _whole(value: object) -> int:
    """A counter's value as the whole number it should be (0 when it is none)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def drop(conn: sqlite3.Connection, dict_ids: list[object]) -> None:
    """Delete those rows (ones :func:`problems` named), inside the caller's write
    transaction."""
    for dict_id in dict_ids:
        conn.execute(_DROP, (dict_id,))


def train(conn: sqlite3.Connection, samples: Samples) -> zstandard.ZstdCompressionDict | None:
    """Train a dictionary on ``samples`` and store it (None: too few samples, or zstd could
    not make one of them)."""
    if len(samples) < MIN_SAMPLES:
        return None
    try:
        made = zstandard.train_dictionary(SIZE, samples, level=LEVEL)
    except zstandard.ZstdError:
        return None
    dict_id = int(made.dict_id())
    data = made.as_bytes()
    conn.execute(_STORE, (dict_id, data))
    return _keep(dict_id, data)
