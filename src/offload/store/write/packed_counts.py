"""A chunk's cached term counts as SQLite keeps them: its JSON, zstd-compressed.

``index.term_counts`` writes each chunk's counts as a JSON object (its length first). Kept
as text they took 0.80x the raw bytes of bulky tool outputs, more than the body's own
compressed block (0.28x) and its full-text index (0.46x) together
(docs/benchmarks/store.md). SQLite stores them compressed, in their own column
(``chunks.packed_counts``, migration ``m_chunk_term_counts_packed``), with
``chunks.term_counts`` NULL: an older offload still running against the same file (during
an upgrade) reads no cache there and scores the chunk from its text, as it scores a chunk
stored before the cache, instead of failing on bytes where it expects text. PostgreSQL
keeps the JSON as text (its TOAST compresses it with lz4 on the server). Every reader
passes the value it finds through :func:`unpack`, so both forms read alike.

Only objects of :data:`MIN_PACKED` bytes or more are compressed: below that the frame's
header and checksum outweigh what compression saves. Decompressing costs ~3 us however
small the object: a search through its in-memory index (the default) reads none, the index
decompresses each once when it is built; a search without it (the SQL path) reads ~900
(its p50 at 20k turns 71 -> 82 ms under load, docs/benchmarks/search.md). Chat turns'
objects (~500 bytes of JSON, ~270 compressed) were kept as text before, and were then the
largest part of a store of turns on disk (2.1x its raw text).

What is compressed is a shorter text than the JSON when it reads back as exactly the same
JSON (:func:`compact`): the length, then each term, followed by ``:count`` when it occurs
more than once (``61,tim said:2,the:1``), 0.82x the compressed JSON of a chat turn's
counts. Objects it cannot say (a term holding a space, comma or colon) are compressed as
JSON; a reader tells them apart by the first
character, ``{`` or a digit.

Once a store holds enough chunks, their counts are compressed with a zstd dictionary
trained on its own (store/write/count_dictionary.py): a pair of chat turns' ~210 bytes
take ~140.
Each frame names the dictionary it needs (0: none), so a reader passes the connection of
the store it read the value from, where the dictionary is.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable

import zstandard

from offload.store.write import blocks, count_dictionary

# zstd level 3: 0.42x of the JSON at ~12 us a chunk; level 19 reaches 0.39x at 17x the time
LEVEL = 3
# below this many bytes an object is kept as text (see the module docstring)
MIN_PACKED = 128
# what a stored frame may say it holds (a chunk's counts are a few KB): a damaged header
# must not make the reader allocate whatever it claims
MAX_UNPACKED = 64 * 1024 * 1024
# with its checksum (4 bytes): a damaged value reads as no cache, not as other counts
_compressor = blocks.per_thread(lambda: zstandard.ZstdCompressor(level=LEVEL, write_checksum=True))
# with a store's dictionary: one of each a thread and dictionary id
_packers = blocks.per_thread(dict[int, zstandard.ZstdCompressor])
_unpackers = blocks.per_thread(dict[int, zstandard.ZstdDecompressor])
Dictionary = zstandard.ZstdCompressionDict


def pack(counts_json: str, dictionary: Dictionary | None = None) -> str | bytes:
    """The stored form of a chunk's cached counts (``index.term_counts``' JSON): compressed
    bytes (of :func:`compact` text when it reads back as the same JSON; with the store's
    ``dictionary`` when it has one, store/write/count_dictionary.py), or the JSON itself
    below :data:`MIN_PACKED` bytes."""
    data = counts_json.encode()
    if len(data) < MIN_PACKED:
        return counts_json
    short = compact(counts_json)
    packer = _compressor() if dictionary is None else _with_dictionary(dictionary)
    packed: bytes = packer.compress(data if short is None else short.encode())
    return packed


def _with_dictionary(dictionary: Dictionary) -> zstandard.ZstdCompressor:
    made = _packers()
    key = dictionary.dict_id()
    packer = made.get(key)
    if packer is None:
        packer = made[key] = zstandard.ZstdCompressor(
            level=LEVEL, dict_data=dictionary, write_checksum=True
        )
    return packer


def _unpacker(dictionary: Dictionary) -> zstandard.ZstdDecompressor:
    made = _unpackers()
    key = dictionary.dict_id()
    unpacker = made.get(key)
    if unpacker is None:
        unpacker = made[key] = zstandard.ZstdDecompressor(dict_data=dictionary)
    return unpacker


def compact(counts_json: str) -> str | None:
    """The compact text of counts JSON (``{"":61,"tim":1,"said":2,"the":1}`` ->
    ``61,tim said:2,the:1``: a count of 1 is a space after the term), or None when
    :func:`expand` would not give back exactly ``counts_json`` (a term holding a space,
    comma or colon; what JSON escapes stays escaped). Both ways are a few ``str.replace`` calls."""
    if not counts_json.startswith('{"":') or not counts_json.endswith("}"):
        return None
    head, sep, rest = counts_json[4:-1].partition(',"')
    short = head
    if sep:
        short += "," + rest.replace('":1,"', " ").replace('":', ":").replace(',"', ",")
    return short if short[:1].isdigit() and expand(short) == counts_json else None


def expand(short: str) -> str:
    """The counts JSON a :func:`compact` text stands for."""
    head, sep, rest = short.partition(",")
    if not sep:
        return '{"":' + head + "}"
    body = rest.replace(",", ',"').replace(":", '":').replace(" ", '":1,"')
    return '{"":' + head + ',"' + body + "}"


def columns(
    counts_json: str, dictionary: Dictionary | None = None
) -> tuple[str | None, bytes | None]:
    """A chunk's (``term_counts``, ``packed_counts``) on SQLite: one of them NULL."""
    stored = pack(counts_json, dictionary)
    return (stored, None) if isinstance(stored, str) else (None, stored)


def writer(conn: sqlite3.Connection) -> Callable[[str], tuple[str | None, bytes | None]]:
    """:func:`columns` with the store's dictionary, inside the caller's write transaction
    (which trains it when due: store/write/count_dictionary.py)."""
    dictionary = count_dictionary.for_writing(conn, lambda b: unpack_stored(b, conn))
    return lambda counts_json: columns(counts_json, dictionary)


def unpack(stored: str | bytes | None, conn: sqlite3.Connection | None = None) -> str | None:
    """The JSON of a stored value: text as it is, bytes decompressed (with the dictionary
    of ``conn``'s store its frame names, if any). None for NULL (a chunk stored before the
    cache) and for bytes that do not decompress to UTF-8: a damaged cache is no cache, and
    its chunk is scored from its text as one stored before it."""
    text = unpack_stored(stored, conn)
    return text if text is None or text.startswith("{") else expand(text)


def unpack_stored(stored: str | bytes | None, conn: sqlite3.Connection | None = None) -> str | None:
    """What a stored value holds, JSON or :func:`compact` text (a digit first), without
    expanding the latter; None as :func:`unpack` (and for a frame whose dictionary
    ``conn``'s store lacks)."""
    if stored is None or isinstance(stored, str):
        return stored
    try:
        if not 0 <= zstandard.frame_content_size(stored) <= MAX_UNPACKED:
            return None  # no size written (pack always writes it), or past any chunk's
        dict_id = count_dictionary.frame_dictionary(stored)
        if dict_id == 0:
            text: str = blocks.decompressor().decompress(stored).decode()
            return text
        dictionary = None if conn is None else count_dictionary.known(conn, dict_id)
        if dictionary is None:
            return None
        text = _unpacker(dictionary).decompress(stored).decode()
        return text
    except (zstandard.ZstdError, UnicodeDecodeError):
        return None


def compact_counts(short: str, terms: Iterable[str]) -> tuple[dict[str, int], int]:
    """The counts of ``terms`` held by a :func:`compact` text, and the length, read
    without expanding it: a term starts after a space or comma (neither occurs in a term
    or a count) and ends at a space (once) or a colon (its count follows)."""
    head, _, rest = short.partition(",")
    text = " " + rest + " "
    counts: dict[str, int] = {}
    for term in filter(None, terms):
        for lead in (" ", ","):
            at = text.find(lead + term)
            end = at + 1 + len(term)
            while at >= 0 and text[end] not in " :":
                at = text.find(lead + term, at + 1)
                end = at + 1 + len(term)
            if at < 0:
                continue
            if text[end] == " ":
                counts[term] = 1
            else:
                stop = end + 1
                while text[stop].isdigit():
                    stop += 1
                counts[term] = int(text[end + 1 : stop])
            break
    return counts, int(head)
