"""The search index: analysed terms (``core.text.analysis``) of every chunk and every entry.

Two FTS5 tables hold terms that Python has already analysed, so the index and every query
see exactly the same terms (FTS5 only splits them at spaces):

- ``search_body``: one row per chunk (rowid = ``chunks.id``), contentless: the text lives
  once, compressed, in ``blocks``. Forgetting a row needs the terms it was built from, which
  :func:`remove_block` re-derives from the body (the analysis is deterministic; a change to
  it bumps ``analysis.ANALYSIS_VERSION`` and ships a migration that rebuilds).
- ``search_meta``: one row per entry (rowid = ``entries.id``): topic, summary, tags, labels
  and source, weighted above bodies (``schema.META_WEIGHTS``). It keeps its own content, so a
  row is simply replaced when the entry's metadata or labels change.

The CPU work (chunking, analysis, vocabulary) is done by :func:`prepare`, pure. On SQLite
it runs before a write transaction starts, and inside it only the inserts run; a single put
on PostgreSQL, which holds only its own locks, prepares inside its transaction once the
BEGIN has told it the content is new, and analyses a big body's later chunks batch by
batch while the server writes the one before.
"""

from __future__ import annotations

import json
import re
import sqlite3
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import IO, NamedTuple

from offload.core.text import analysis
from offload.core.text.chunking import Chunk, chunk_text
from offload.errors import OffloadError, StoreError
from offload.store.backend import Conn, Sql
from offload.store.postgres import pgsql
from offload.store.schema import hexed
from offload.store.write import blocks, packed_counts

# FTS5 splits only at whitespace and controls: every analysed term is one token.
TOKENIZER = "unicode61 remove_diacritics 0 categories 'L* N* Co M* P* S*'"
# Only the first 256 KB of a body feeds the vocabulary (partial and misspelt words): the
# index itself still covers every byte.
VOCABULARY_SCAN_CHARS = 256 * 1024

Progress = Callable[[int, int], None]
# what a big put reports as it goes: (stage, characters done, characters in all)
PutProgress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class PreparedChunk:
    """One chunk ready to insert: line range, character offsets, how often each of its
    terms occurs (``counts``; ``term_counts`` as JSON), counted once for both the cached
    counts and PostgreSQL's tsvector, and its terms joined by spaces
    (:attr:`terms`, what an FTS5 row holds)."""

    start_line: int
    end_line: int
    start: int
    end: int
    counts: Mapping[str, int] = field(compare=False, repr=False)
    term_counts: str
    text: str = field(compare=False, repr=False)  # the chunk's own characters
    # the joined terms when they were made with the counts (None: on demand, see terms)
    joined: str | None = field(default=None, compare=False, repr=False)
    # its distinct runs, when analysed without joined terms (PreparedIndex.words)
    runs: frozenset[str] | set[str] = field(default=frozenset(), compare=False, repr=False)

    @classmethod
    def of(
        cls, start_line: int, end_line: int, start: int, end: int, text: str, joined: bool = True
    ) -> PreparedChunk:
        """A chunk of ``text`` (the chunk's own characters) analysed; ``joined`` False: its
        counts only (a PostgreSQL put needs no joined string: ~a fifth of the analysis)."""
        if not joined:
            counts, runs = analysis.counted_runs(text)
            return cls(
                start_line, end_line, start, end, counts, counts_json(counts), text, None, runs
            )
        # the same terms and counts as index_text + count_terms, counted per distinct run
        terms, counts = analysis.index_text_counts(text)
        return cls(start_line, end_line, start, end, counts, counts_json(counts), text, terms)

    @property
    def terms(self) -> str:
        """The chunk's terms joined by spaces (:func:`analysis.index_text`): made now when
        the chunk was analysed without them."""
        return self.joined if self.joined is not None else analysis.index_text(self.text)


class Span(NamedTuple):
    """A chunk not analysed yet: its line range, offsets and own characters."""

    start_line: int
    end_line: int
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class PreparedIndex:
    """Everything the index needs for one body.

    ``analysed`` chunks were analysed by :func:`prepare`, outside any write lock. A big
    body on PostgreSQL leaves the rest ``later`` (``analyse_chars``): its write analyses
    them a batch at a time while the server writes the batch before (:meth:`batches`),
    so the client's analysis and the server's inserts overlap instead of adding up.
    """

    analysed: tuple[PreparedChunk, ...]
    # the body's vocabulary words, sorted; None: made from its chunks' runs once they are
    # analysed (:meth:`words`)
    vocabulary: tuple[str, ...] | None
    later: tuple[Span, ...] = ()
    joined: bool = True  # the later chunks' terms joined too (PreparedChunk.of)
    # a big body's chunks analysed and spilled compressed to a temporary file, a batch to a
    # frame: (codec, length) each, in order (:func:`freeze`)
    frozen: tuple[tuple[str, int], ...] = ()
    spill: IO[bytes] | None = field(default=None, compare=False, repr=False)
    characters: int = 0  # of the frozen chunks, for progress
    progress: PutProgress | None = field(default=None, compare=False, repr=False)

    @property
    def has_chunks(self) -> bool:
        """Whether the body has any chunk to index (without analysing the later ones)."""
        return bool(self.analysed or self.later or self.frozen)

    @cached_property
    def chunks(self) -> tuple[PreparedChunk, ...]:
        """Every chunk, analysed (the later ones now, once)."""
        return self.analysed + tuple(PreparedChunk.of(*s, self.joined) for s in self.later)

    def words(self, chunks: Sequence[PreparedChunk] | None = None) -> tuple[str, ...]:
        """The vocabulary words, sorted: :attr:`vocabulary`, or when that was left to the
        chunks, the surface words of the runs of ``chunks`` (every chunk of the body,
        analysed; by default :attr:`chunks`)."""
        if self.vocabulary is not None:
            return self.vocabulary
        runs = set().union(*(c.runs for c in (self.chunks if chunks is None else chunks)))
        return tuple(sorted(analysis.surface_words_of_runs(runs)))

    def batches(self, chars: int) -> Iterator[tuple[PreparedChunk, ...]]:
        """Every chunk in order: the analysed ones as one batch, then the later ones in
        batches of about ``chars`` characters (:func:`split_by_size`), each analysed only
        when it is asked for."""
        if self.analysed:
            yield self.analysed
        for group in split_by_size(self.later, chars):
            yield tuple(PreparedChunk.of(*s, self.joined) for s in group)


# About this many characters of a big body's chunks go in one statement on PostgreSQL: the
# server writes one batch while the client analyses the next, and a put analyses as much
# before its first statement (store/write/writes.py). By size, not by count: a batch of 24 chunks
# was 16 KB of a log of short lines but 75 KB of one of full ones, whose first statement
# then kept the server busy while the client had little left to analyse (measured side by
# side, bench/bench_put.py: 8 KB batches -2.0 to -2.3 ms a 100 KB put against 24 chunks
# for ~1 ms more of the client's CPU, 4 KB -2.4 ms for 1.4 ms more, 32 KB -1.3 ms).
BATCH_CHARS = 8 * 1024


# A body of more characters than this (a big file) is analysed a batch at a time, each
# batch's rows spilled as one zstd frame to a temporary file until the write inserts them
# (:func:`freeze`): its analysis stays outside the write lock, as a small body's does, and
# memory holds one batch, not every analysed chunk (~13-17 bytes a character of the body
# in memory, ~850 MB for a 50 MB file; ~3 bytes a character once compressed: on disk).
FREEZE_CHARS = 1024 * 1024
FREEZE_BATCH_CHARS = 256 * 1024


def freeze_text(
    text: str,
    chunk_lines: int,
    chunk_chars: int,
    from_line: int = 1,
    progress: PutProgress | None = None,
) -> PreparedIndex:
    """:func:`prepare` for a big body (joined terms: SQLite's rows) in bounded memory: its
    chunks analysed a batch at a time, each batch's rows spilled as a compressed frame to a
    temporary file (deleted when closed or collected; :func:`_sqlite_rows` reads it back),
    each chunk's text sliced only when its batch is analysed. Reports ``("analysing",
    characters done, in all)`` to ``progress``."""
    skip_lines, offset = _line_offset(text, from_line)
    rest = text[offset:]
    vocab = tuple(sorted(analysis.surface_words(rest[:VOCABULARY_SCAN_CHARS])))
    places = chunk_text(rest, chunk_lines, chunk_chars)
    total = sum(c.end - c.start for c in places)
    frames: list[tuple[str, int]] = []
    spill = spill_file()
    done, first = 0, 0
    for i, c in enumerate(places):
        held = c.end - places[first].start
        if held < FREEZE_BATCH_CHARS and i < len(places) - 1:
            continue
        rows = [_frozen_row(p, skip_lines, offset, rest) for p in places[first : i + 1]]
        codec, data = blocks.pack(json.dumps(rows, ensure_ascii=False).encode("utf-8"))
        try:
            spill.write(data)
        except OSError as exc:
            spill.close()
            raise spill_failed(exc) from exc
        frames.append((codec, len(data)))
        done, first = done + held, i + 1
        if progress is not None:
            progress("analysing", done, total)
    return PreparedIndex(
        (), vocab, frozen=tuple(frames), spill=spill, characters=total, progress=progress
    )


_SPILL_FAILED = "cannot write a big body's analysed chunks or bytes to a temporary file"
_SPILL_HINT = "set TMPDIR to a directory with room (about 3.5 bytes a character of the body)"


def spill_file() -> IO[bytes]:
    """An anonymous temporary file (gone once closed) for a big body's analysed rows or
    stored bytes."""
    try:
        return tempfile.TemporaryFile(prefix="offload-put-")
    except OSError as exc:
        raise spill_failed(exc) from exc


def spill_failed(exc: OSError) -> StoreError:
    """The error a big put reports when its temporary file cannot be written."""
    return StoreError(f"{_SPILL_FAILED} ({exc.strerror}); {_SPILL_HINT}")


def _frozen_row(c: Chunk, skip_lines: int, offset: int, rest: str) -> list[object]:
    """One chunk of ``rest`` (which starts ``skip_lines`` lines and ``offset`` characters
    into its body) analysed, as a frozen row: place, term counts, joined terms."""
    chunk = PreparedChunk.of(
        c.start_line + skip_lines,
        c.end_line + skip_lines,
        c.start + offset,
        c.end + offset,
        rest[c.start : c.end],
    )
    return [
        chunk.start_line,
        chunk.end_line,
        chunk.start,
        chunk.end,
        chunk.term_counts,
        chunk.terms,
    ]


def _sqlite_rows(prepared: PreparedIndex) -> Iterator[tuple[int, int, int, int, str, str]]:
    """Every chunk of ``prepared`` as SQLite's insert rows: (start_line, end_line, start,
    end, term_counts, terms), a frozen body's a frame at a time."""
    for c in prepared.chunks:
        yield c.start_line, c.end_line, c.start, c.end, c.term_counts, c.terms
    spill = prepared.spill
    if spill is None:
        return
    # read once, by the write that inserts them (a failed SQLite write is not retried with
    # the same prepared put: it is prepared again), then the file goes
    with spill:
        spill.seek(0)
        done = 0
        for codec, length in prepared.frozen:
            data = spill.read(length)
            raw = data if codec == "raw" else blocks.decompressor().decompress(data)
            for a, b, c_, d, counts, terms in json.loads(raw):
                done += d - c_
                yield a, b, c_, d, counts, terms
            if prepared.progress is not None:
                prepared.progress("writing", done, prepared.characters)


def split_by_size(spans: Sequence[Span], chars: int) -> list[tuple[Span, ...]]:
    """``spans`` in order, in groups of consecutive spans each holding at least ``chars``
    characters (the last one what is left); every group holds one span at least."""
    groups: list[tuple[Span, ...]] = []
    start, held = 0, 0
    for i, s in enumerate(spans):
        held += len(s.text)
        if held >= chars:
            groups.append(tuple(spans[start : i + 1]))
            start, held = i + 1, 0
    if start < len(spans):
        groups.append(tuple(spans[start:]))
    return groups


def prepare(
    text: str,
    chunk_lines: int,
    chunk_chars: int,
    from_line: int = 1,
    analyse_chars: int | None = None,
    joined: bool = True,
) -> PreparedIndex:
    """Chunk and analyse a body (pure CPU work; no connection needed).

    ``from_line`` > 1 indexes only the lines from that one on (their chunks keep the
    body's own line numbers and offsets): the earlier lines are indexed elsewhere, as in a
    proxy part that takes in the parts before it. ``analyse_chars``: analyse now only the
    first chunks holding that many characters (the first of :func:`split_by_size`'s
    groups; 0: none) and leave the rest :attr:`PreparedIndex.later` (None: analyse them
    all). ``joined`` False: the chunks' counts without their joined terms
    (PreparedChunk.of), and the vocabulary left to the chunks' runs when that gives the
    same words (:func:`_runs_of_chunks_cover`): no second pass over the body."""
    skip_lines, offset = _line_offset(text, from_line)
    rest = text[offset:]
    spans = [
        Span(
            c.start_line + skip_lines,
            c.end_line + skip_lines,
            c.start + offset,
            c.end + offset,
            rest[c.start : c.end],
        )
        for c in chunk_text(rest, chunk_lines, chunk_chars)
    ]
    if analyse_chars is None:
        now = len(spans)
    elif analyse_chars <= 0 or not spans:
        now = 0
    else:
        now = len(split_by_size(spans, analyse_chars)[0])
    vocab = None
    if joined or not _runs_of_chunks_cover(spans, len(rest)):
        vocab = tuple(sorted(analysis.surface_words(rest[:VOCABULARY_SCAN_CHARS])))
    analysed = tuple(PreparedChunk.of(*s, joined) for s in spans[:now])
    return PreparedIndex(analysed, vocab, tuple(spans[now:]), joined)


def _line_offset(text: str, from_line: int) -> tuple[int, int]:
    """How many lines come before line ``from_line`` of ``text``, and where it starts."""
    skip_lines, offset = 0, 0
    while skip_lines < from_line - 1:
        at = text.find("\n", offset)
        if at < 0:
            break
        skip_lines, offset = skip_lines + 1, at + 1
    return skip_lines, offset


def _runs_of_chunks_cover(spans: Sequence[Span], chars: int) -> bool:
    """Whether the runs of these chunks of a ``chars``-character text are the runs the
    vocabulary is made of: the whole text is scanned (within VOCABULARY_SCAN_CHARS) and no
    chunk but the last ends inside a line (a line longer than a chunk is cut anywhere, maybe
    inside a word; a run never holds a line end)."""
    return chars <= VOCABULARY_SCAN_CHARS and all(s.text.endswith("\n") for s in spans[:-1])


def term_counts(terms: str) -> str:
    """A chunk's cached term counts (``chunks.term_counts``): a JSON object of each index
    term (of :func:`analysis.index_text`'s string) and how often it occurs, so ranking by a
    chunk's neighbourhood (store/search/context.py) reads them instead of analysing the text again.
    It leads with the length BM25 normalises by (the sum of the counts) under the key
    ``""`` (no term is empty), so a search reads the length and its own few terms' counts
    without parsing the whole object (context.query_counts)."""
    return counts_json(count_terms(terms))


def count_terms(terms: str) -> Counter[str]:
    """How often each term of an :func:`analysis.index_text` string occurs, in the order
    the terms first appear."""
    return Counter(terms.split())


def counts_json(counts: Mapping[str, int]) -> str:
    """Counted terms as :func:`term_counts`' JSON (the length first): what
    ``json.dumps(..., ensure_ascii=False, separators=(",", ":"))`` writes."""
    length = sum(counts.values())
    if not counts or _NEEDS_ESCAPE.search("".join(counts)):
        whole = {LENGTH_KEY: length, **counts}
        return json.dumps(whole, ensure_ascii=False, separators=(",", ":"))
    # no term needs escaping (the usual case): the object is its keys and values
    # interleaved with '":' and ',"', joined in C, with no per-term encoder call (this was
    # a quarter of a 100 KB put's analysis)
    n = len(counts)
    pairs: list[str] = [""] * (2 * n)
    pairs[0::2] = counts
    pairs[1::2] = map(_COUNT_TEXT.__getitem__, counts.values())
    pieces: list[str] = [""] * (4 * n)
    pieces[0::2] = pairs
    pieces[1::2] = ['":', ',"'] * n
    return f'{{"":{length},"' + "".join(pieces[:-1]) + "}"


# what JSON must escape in a string (ensure_ascii=False): a quote, a backslash, a control
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')


class _CountTexts(dict[int, str]):
    """Counts written as decimal text, each made once: a lookup in C where ``str`` of
    every count was ~40 % of :func:`counts_json` (a chunk's counts are few distinct
    numbers). Bounded: forgotten past :data:`COUNT_TEXTS_MAX`."""

    def __missing__(self, count: int) -> str:
        if len(self) >= COUNT_TEXTS_MAX:
            self.clear()
        text = self[count] = str(count)
        return text


COUNT_TEXTS_MAX = 4096
_COUNT_TEXT = _CountTexts()


# the key of a chunk's length in its cached term counts: split() never yields an empty term
LENGTH_KEY = ""
# how a cached object holding its length begins (migration m_chunk_term_counts_length)
LENGTH_FIRST = '{"":'


KNOWN_TERMS = Sql(
    "SELECT term FROM terms WHERE term IN (SELECT value FROM json_each(?))",
    ("SELECT term FROM terms WHERE term IN (SELECT json_array_elements_text(%s::json))"),
)


def without_known_vocabulary(conn: Conn, prepared: PreparedIndex) -> PreparedIndex:
    """``prepared`` keeping only the vocabulary words the store does not hold yet.

    A read, done before the write lock: after a store's first few puts nearly every word of
    a body is known, and inserting them all again was about a quarter of the time a 4 KB put
    held the lock. A word another writer adds meanwhile is inserted twice, harmlessly
    (``INSERT OR IGNORE``).
    """
    if not prepared.vocabulary:
        return prepared
    known = {r[0] for r in conn.execute(KNOWN_TERMS, (json.dumps(prepared.vocabulary),))}
    if not known:
        return prepared
    return replace(prepared, vocabulary=tuple(t for t in prepared.vocabulary if t not in known))


def unknown_words(conn: Conn, words: Sequence[str]) -> list[str]:
    """The words the store's vocabulary does not hold yet, in their order (a batch's, read
    in one statement per thousands of words before the write lock; see
    :func:`without_known_vocabulary`)."""
    new: list[str] = []
    for i in range(0, len(words), VOCABULARY_CHECK):
        part = words[i : i + VOCABULARY_CHECK]
        known = {r[0] for r in conn.execute(KNOWN_TERMS, (json.dumps(part),))}
        new.extend(w for w in part if w not in known)
    return new


# words checked by one statement of unknown_words
VOCABULARY_CHECK = 5000


# PostgreSQL's vocabulary insert: every word in one statement (one round trip), in order
VOCABULARY_FROM_JSON = Sql.postgres_only(
    "INSERT INTO terms (term) SELECT json_array_elements_text(%s::json) ORDER BY 1 "
    "ON CONFLICT DO NOTHING"
)


def vocabulary_insert(words: Sequence[str]) -> tuple[Sql, tuple[str]]:
    """PostgreSQL's statement adding these vocabulary words (known ones are kept), sorted:
    two writers inserting overlapping words then wait for each other in one order, never
    in a cycle."""
    return VOCABULARY_FROM_JSON, (json.dumps(sorted(words), ensure_ascii=False),)


def insert_vocabulary_words(conn: Conn, words: Sequence[str]) -> None:
    """Add vocabulary words (known ones are kept), inside the caller's transaction, in
    sorted order (see :func:`vocabulary_insert`)."""
    if not words:
        return
    if isinstance(conn, sqlite3.Connection):
        conn.executemany(
            Sql(
                "INSERT OR IGNORE INTO terms (term) VALUES (?)",
                "INSERT INTO terms (term) VALUES (%s) ON CONFLICT DO NOTHING",
            ),
            [(t,) for t in sorted(words)],
        )
    else:
        conn.execute(*vocabulary_insert(words))


def insert_block(
    conn: Conn, block_id: int, prepared: PreparedIndex, *, cached_counts: bool = True
) -> None:
    """Index one block's chunks and vocabulary (inside the caller's transaction).
    ``cached_counts`` False: a SQLite schema from before the chunks' cached term counts (a
    migration that runs before ``m_chunk_term_counts``); they stay NULL, scored from the
    text. True on SQLite: the schema has both of their columns (store/write/packed_counts.py)."""
    insert_vocabulary_words(conn, prepared.words())
    insert_chunks = getattr(conn, "insert_chunks", None)
    if insert_chunks is not None:  # PostgreSQL: one round trip for them all
        insert_chunks(block_id, chunk_rows(prepared.chunks))
        return
    pack = (
        packed_counts.writer(conn)
        if cached_counts and isinstance(conn, sqlite3.Connection)
        else None
    )
    for start_line, end_line, start, end, counts, terms in _sqlite_rows(prepared):
        place = (block_id, start_line, end_line, start, end)
        if pack is not None:
            cur = conn.execute(
                Sql(
                    "INSERT INTO chunks (block_id, start_line, end_line, start, end, term_counts, "
                    "packed_counts) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        'INSERT INTO chunks (block_id, start_line, end_line, start, "end", '
                        "term_counts, packed_counts) VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id"
                    ),
                    returns_id=True,
                ),
                (*place, *pack(counts)),
            )
        else:
            cur = conn.execute(
                Sql(
                    "INSERT INTO chunks (block_id, start_line, end_line, start, end) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (
                        'INSERT INTO chunks (block_id, start_line, end_line, start, "end") VALUES '
                        "(%s, %s, %s, %s, %s) RETURNING id"
                    ),
                    returns_id=True,
                ),
                place,
            )
        conn.execute(
            Sql(
                "INSERT INTO search_body (rowid, terms) VALUES (?, ?)",
                "INSERT INTO search_body (rowid, terms) VALUES (%s, %s::tsvector)",
                params=pgsql.body_params,
            ),
            (cur.lastrowid, terms),
        )


def chunk_rows(chunks: Sequence[PreparedChunk]) -> list[tuple[object, ...]]:
    """Chunks as PostgreSQL's chunk statements take them (``PgConn.insert_chunks``):
    (start_line, end_line, start, end, terms, counts, term_counts) each; ``terms`` is the
    joined string, or a function making it for a chunk analysed without (only a chunk of
    more terms than a tsvector has positions needs them in order)."""
    return [
        (
            c.start_line,
            c.end_line,
            c.start,
            c.end,
            c.joined if c.joined is not None else _terms_of(c),
            c.counts,
            c.term_counts,
        )
        for c in chunks
    ]


def _terms_of(chunk: PreparedChunk) -> Callable[[], str]:
    return lambda: chunk.terms


def is_indexed(conn: Conn, block_id: int) -> bool:
    """Whether a block has chunks in the index."""
    row = conn.execute(
        Sql("SELECT 1 FROM chunks WHERE block_id = ? LIMIT 1"), (block_id,)
    ).fetchone()
    return row is not None


def remove_block(conn: Conn, block_id: int, text: str | None) -> None:
    """Forget a block's chunks (``text`` None: a corrupt body; doctor rebuilds the index)."""
    rows = conn.execute(
        Sql(
            "SELECT id, start, end FROM chunks WHERE block_id = ?",
            'SELECT id, start, "end" FROM chunks WHERE block_id = %s',
        ),
        (block_id,),
    ).fetchall()
    if text is not None:
        # a contentless FTS5 table forgets a row only when given the terms it holds
        conn.executemany(
            Sql(
                "INSERT INTO search_body (search_body, rowid, terms) VALUES ('delete', ?, ?)",
                "DELETE FROM search_body WHERE rowid = %s",
                params=pgsql.first_param,
            ),
            [(r["id"], analysis.index_text(text[r["start"] : r["end"]])) for r in rows],
        )
    conn.execute(Sql("DELETE FROM chunks WHERE block_id = ?"), (block_id,))


def _joined(text: str) -> str:
    return analysis.index_text(text)


def rewrite_counts(conn: Conn, counts: Iterable[tuple[int, str]]) -> None:
    """Store chunks' cached term counts again, (chunk id, :func:`term_counts`' JSON) each,
    in a SQLite schema's two columns for them (store/write/packed_counts.py)."""
    pack = packed_counts.writer(conn) if isinstance(conn, sqlite3.Connection) else None
    conn.executemany(
        Sql("UPDATE chunks SET term_counts = ?, packed_counts = ? WHERE id = ?"),
        [
            (*(packed_counts.columns(cached) if pack is None else pack(cached)), cid)
            for cid, cached in counts
        ],
    )


_PACKED_COUNTS = Sql("SELECT id, packed_counts FROM chunks WHERE packed_counts IS NOT NULL")


def unreadable_counts(conn: Conn) -> list[int]:
    """The chunks whose cached term counts are stored compressed and do not decompress (a
    damaged file): each is scored from its text meanwhile, and keeps a search off the
    in-memory index. PostgreSQL keeps them as text: none there."""
    if not isinstance(conn, sqlite3.Connection):
        return []
    return [
        int(r[0]) for r in conn.execute(_PACKED_COUNTS) if packed_counts.unpack(r[1], conn) is None
    ]


def clear(conn: Conn) -> None:
    """Empty the whole index (chunks, terms, both FTS tables), inside the caller's tx."""
    conn.execute(Sql("DELETE FROM chunks"))
    conn.execute(Sql("DELETE FROM terms"))
    conn.execute(
        Sql(
            "INSERT INTO search_body (search_body) VALUES ('delete-all')", "DELETE FROM search_body"
        )
    )
    conn.execute(Sql("DELETE FROM search_meta"))


def integrity_ok(conn: Conn) -> bool:
    """FTS5's own integrity checks of both tables."""
    try:
        conn.execute(
            Sql(
                "INSERT INTO search_body (search_body, rank) VALUES ('integrity-check', 1)",
                "SELECT 1",
                noop=True,
            )
        )
        conn.execute(
            Sql(
                "INSERT INTO search_meta (search_meta) VALUES ('integrity-check')",
                "SELECT 1",
                noop=True,
            )
        )
    except sqlite3.DatabaseError:
        return False
    return True


def optimize(conn: Conn) -> None:
    """Merge each FTS table's segments into one (inside the caller's transaction)."""
    conn.execute(
        Sql("INSERT INTO search_body (search_body) VALUES ('optimize')", "SELECT 1", noop=True)
    )
    conn.execute(
        Sql("INSERT INTO search_meta (search_meta) VALUES ('optimize')", "SELECT 1", noop=True)
    )


_BUILT_WITH = ("search.index", "analysis_version")  # state row: what built the index


def built_with_current_analysis(conn: Conn) -> bool:
    """Whether search_body was last rebuilt by this ``analysis.ANALYSIS_VERSION`` (so a
    later migration that rebuilds for an older version has nothing left to do)."""
    row = conn.execute(
        Sql("SELECT value FROM state WHERE namespace = ? AND key = ?"), _BUILT_WITH
    ).fetchone()
    return row is not None and row[0] == str(analysis.ANALYSIS_VERSION)


def _record_built(conn: Conn) -> None:
    # a write of a state value raises its version (store/state.py); the migrations before
    # m_state_version run this on a state table that has no versions yet
    versioned = not isinstance(conn, sqlite3.Connection) or any(
        r[1] == "version"
        for r in conn.execute(Sql("PRAGMA table_info(state)", "SELECT 'ok'", noop=True))
    )
    conn.execute(
        Sql(
            "INSERT INTO state (namespace, key, value, updated) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(namespace, key) DO UPDATE SET value = excluded.value, "
            "updated = excluded.updated" + (", version = state.version + 1" if versioned else "")
        ),
        (*_BUILT_WITH, str(analysis.ANALYSIS_VERSION), time.time()),
    )


def reindex_chunks(conn: Conn, progress: Progress | None = None) -> int:
    """Fill search_body and the vocabulary from the chunks already recorded (their offsets
    stay; only the terms are re-derived), and record the analysis version that did it.
    The chunks' cached term counts are re-derived too where the schema has them (an older
    migration runs this before ``m_chunk_term_counts`` adds them). Corrupt blocks are
    skipped; returns blocks done."""
    cached = has_term_counts(conn)
    packed = cached and has_packed_counts(conn)
    ids = [
        int(r[0])
        for r in conn.execute(Sql("SELECT DISTINCT block_id FROM chunks ORDER BY block_id"))
    ]
    done = 0
    for i, block_id in enumerate(ids, 1):
        row = conn.execute(
            Sql(
                "SELECT hash, codec, CAST(data AS BLOB) AS data FROM blocks WHERE id = ?",
                "SELECT hash, codec, data AS data FROM blocks WHERE id = %s",
            ),
            (block_id,),
        ).fetchone()
        if row is None:
            continue
        try:
            text = blocks.unpack(hexed(row["hash"]), row["codec"], bytes(row["data"]))
        except (ValueError, OffloadError):
            continue
        chunks = conn.execute(
            Sql(
                "SELECT id, start, end FROM chunks WHERE block_id = ?",
                'SELECT id, start, "end" FROM chunks WHERE block_id = %s',
            ),
            (block_id,),
        ).fetchall()
        terms = [(c["id"], _joined(text[c["start"] : c["end"]])) for c in chunks]
        conn.executemany(
            Sql(
                "INSERT INTO search_body (rowid, terms) VALUES (?, ?)",
                "INSERT INTO search_body (rowid, terms) VALUES (%s, %s::tsvector)",
                params=pgsql.body_params,
            ),
            terms,
        )
        if packed:
            rewrite_counts(conn, [(cid, term_counts(t)) for cid, t in terms])
        elif cached:  # a migration older than m_chunk_term_counts_packed
            conn.executemany(
                Sql("UPDATE chunks SET term_counts = ? WHERE id = ?"),
                [(term_counts(t), cid) for cid, t in terms],
            )
        conn.executemany(
            Sql(
                "INSERT OR IGNORE INTO terms (term) VALUES (?)",
                "INSERT INTO terms (term) VALUES (%s) ON CONFLICT DO NOTHING",
            ),
            [(t,) for t in sorted(analysis.surface_words(text[:VOCABULARY_SCAN_CHARS]))],
        )
        done += 1
        if progress is not None:
            progress(i, len(ids))
    _record_built(conn)
    return done


def has_term_counts(conn: Conn) -> bool:
    """Whether the chunks table has the cached term counts (migration m_chunk_term_counts)."""
    if not isinstance(conn, sqlite3.Connection):
        return True
    return "term_counts" in _chunk_columns(conn)


def has_packed_counts(conn: Conn) -> bool:
    """Whether a SQLite chunks table keeps large cached counts compressed in a column of
    their own (migration m_chunk_term_counts_packed); PostgreSQL never does."""
    if not isinstance(conn, sqlite3.Connection):
        return False
    return "packed_counts" in _chunk_columns(conn)


def _chunk_columns(conn: sqlite3.Connection) -> set[str]:
    return {
        str(r[1]) for r in conn.execute(Sql("PRAGMA table_info(chunks)", "SELECT 'ok'", noop=True))
    }
