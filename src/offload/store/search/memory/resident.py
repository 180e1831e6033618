"""A store's body chunks as an in-process BM25 index, kept fresh before each search.

FTS5's ``bm25()`` over every row matching a query's terms costs more than the whole
search budget at 100k entries (a 30 ms p50) (plain FTS5 alone: ~39 ms p50 on a quiet machine), and the
neighbourhood scoring read ~900 chunks' cached counts per search. Held in numpy arrays
(store/search/memory/postings.py) the same scores take a few milliseconds, bit for bit FTS5's, and a
chunk's counts are a lookup.

Lifecycle, per :class:`ResidentIndex` (one per open store):

- The first search starts a build in a background thread and is answered by the SQL path;
  so is every search until the build is done. A build reads every chunk's cached counts
  (store/search/memory/chunkrows.py, one read snapshot), in batches so searches keep the interpreter.
- Before each search :meth:`ResidentIndex.view` reads the rows written since (a new small
  segment; the tail is merged once it has several) and checks the index's totals against
  the backend's own (FTS5's row count and tokens). A deletion or rewrite since the build
  (forget, gc, reindex: the generation moved), a mismatch, an unreadable row or an error
  reading any of it: that search takes the SQL path and a rebuild starts. A build that
  itself disagrees with the backend, or would pass the memory bound, is not retried until
  the chunks change.
- Views are immutable and swapped under a lock; a search keeps the view it started with.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from offload.errors import OffloadError
from offload.store.backend import Conn
from offload.store.search.memory import chunkrows, entrykeys, entrymap, pgchunks, postings

# rows parsed per step of a build (the interpreter passes to searches between steps)
BUILD_BATCH = 4096
# the tail of segments written since the build is merged into one past this many
TAIL_SEGMENTS = 8
# a tail of more rows than this is folded into the base in the background (a merge of
# every segment: ~1 s of CPU at 100k chunks), not merged inside the search that passes it
TAIL_ROWS_INLINE = 4096
# ~bytes of memory per token of the chunks (postings: 8 bytes each, at most one a token;
# the vocabulary and per-chunk arrays on top): a build that would pass the bound is refused
_BYTES_PER_TOKEN = 10

# after a build failed on an error (not a refusal), how long searches stay on the SQL path
RETRY_S = 30.0

_log = logging.getLogger("offload.store")


@dataclass(frozen=True, eq=False)
class _State:
    view: postings.View
    token: chunkrows.Token


@dataclass(frozen=True)
class BuildReport:
    """What the last finished build did: seconds, rows, memory, or why it was refused."""

    seconds: float
    rows: int
    nbytes: int
    refused: str = ""


class _Closed(Exception):
    """The index was closed during a build."""


class ResidentIndex:
    """The in-process index of one store's chunks (thread-safe; see the module docstring).

    ``connect`` opens a connection of the build's own (closed when it is done)."""

    def __init__(self, connect: Callable[[], Conn], *, max_bytes: int) -> None:
        self._connect = connect
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._state: _State | None = None
        self._building = False
        self._refused: chunkrows.Token | None = None  # a build refused at this token
        self._retry_at = 0.0  # monotonic time: no build before it (the last one failed)
        self.report: BuildReport | None = None
        # the chunk -> entry map, kept beside the postings (its own generation and build)
        self.entry_map = entrymap.resident(connect)
        # every entry's filter and ranking columns (store/search/memory/entrykeys.py)
        self.entry_keys = entrykeys.resident(connect)
        # set whenever a build finishes (done or refused): tests and the bench wait on it
        self.built = threading.Event()

    def view(self, conn: Conn) -> postings.View | None:
        """The index brought up to date with what ``conn`` sees, or None: the caller
        searches the SQL way (no index yet, building, refused, or out of step)."""
        source = chunk_source(conn)
        if source is None or self._closed.is_set():
            return None
        state = self._state
        if state is None:
            self._maybe_build(conn, source)
            return None
        try:
            batch = source.read_since(conn, state.token)
            if batch is not None and batch.rows:
                grown = self._extended(state, batch)
                if grown is None:  # past the memory bound: dropped
                    return None
                state = grown
        except (sqlite3.Error, OffloadError, postings.Unindexable) as exc:
            _log.debug("resident index: %s; searching the SQL way", exc)
            batch = None
        if batch is None or (
            # rows it holds were deleted or rewritten, or it no longer adds up to FTS5's
            batch.totals is not None and batch.totals != (state.view.rows, state.view.tokens)
        ):
            self._stale(state)
            return None
        return state.view

    def read_ahead(self, conn: Conn) -> None:
        """PostgreSQL: run now, in one round trip, the reads that bring this index, the
        chunk -> entry map and the entries' columns up to date (``PgConn.read_ahead``):
        a search's :meth:`view` and the copies' refreshes then take their answers, where
        each was a round trip of its own (~0.3-0.6 ms apiece at 1M)."""
        ahead = getattr(conn, "read_ahead", None)
        state = self._state
        if ahead is None or self._closed.is_set():
            return
        source = chunk_source(conn)
        mine = getattr(source, "next_read", None)
        reads = [
            mine(state.token) if mine is not None and state is not None else None,
            self.entry_map.pg_next_read(),
            self.entry_keys.pg_next_read(),
        ]
        try:
            ahead([r for r in reads if r is not None])
        except OffloadError as exc:  # each refresh reads for itself, and copes, as before
            _log.debug("resident index: reading ahead: %s", exc)

    def start(self) -> None:
        """Start a build now (in the background) unless one is running or done."""
        with self._lock:
            if self._state is not None or time.monotonic() < self._retry_at:
                return
        self._background(self._build)

    @property
    def held_bytes(self) -> int:
        """The memory the index holds now (0: none held)."""
        state = self._state
        return 0 if state is None else state.view.nbytes

    def release(self) -> None:
        """Let go of the index and the entries' copies (a process gone idle hands their
        memory back); the next :meth:`view` starts a rebuild and is answered None, as
        before the first build. A build refused for the memory bound stays refused."""
        self.entry_map.release()
        self.entry_keys.release()
        with self._lock:
            self._state = None

    def close(self) -> None:
        """Stop building (a build in progress ends at its next batch) and drop the index."""
        self._closed.set()
        self.entry_map.close()
        self.entry_keys.close()
        with self._lock:
            thread, self._state = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _maybe_build(self, conn: Conn, source: chunkrows.ChunkSource) -> None:
        refused = self._refused
        if refused is not None:
            try:
                later = source.read_since(conn, refused)
            except (sqlite3.Error, OffloadError):
                later = None
            if later is not None:  # the chunks it was refused for are all still there
                self._refused = later.token
                return
            self._refused = None
        self.start()

    def _stale(self, state: _State) -> None:
        with self._lock:
            if self._state is state:
                self._state = None
        self.start()

    def _extended(self, state: _State, batch: chunkrows.Batch) -> _State | None:
        """``state`` with the batch's rows as a new segment (the tail merged when long); None
        when that passes the memory bound: the index is dropped, as a build that would pass
        it is refused, and searches take the SQL path until the chunks change otherwise than
        by growing (a store that grows past the bound while serving stops the index growing
        with it, where the bound was checked only at the build)."""
        segments = (*state.view.segments, postings.Segment.build(batch.rows))
        tail = sum(s.rows for s in segments[1:])
        if len(segments) > TAIL_SEGMENTS + 1 and tail <= TAIL_ROWS_INLINE:
            segments = (segments[0], postings.merge(segments[1:]))
        new = _State(postings.View(segments), batch.token)
        if new.view.nbytes > self._max_bytes:
            with self._lock:
                if self._state is state:
                    self._state = None
                self._refused = batch.token
            why = f"{new.view.nbytes >> 20} MB held, bound {self._max_bytes >> 20} MB"
            self.report = BuildReport(0.0, new.view.rows, new.view.nbytes, why)
            _log.debug("resident index dropped: %s", why)
            return None
        with self._lock:
            if self._state is state:
                self._state = new
        if tail > TAIL_ROWS_INLINE:
            self._background(self._compact)
        return new

    def _background(self, work: Callable[[], None]) -> None:
        """Run ``work`` in the index's one background thread, unless it is busy."""
        with self._lock:
            if self._building or self._closed.is_set():
                return
            self._building = True
            self.built.clear()
            self._thread = threading.Thread(target=work, name="offload-resident", daemon=True)
            self._thread.start()

    def _compact(self) -> None:
        """Fold every segment into one; segments added meanwhile stay after it."""
        try:
            state = self._state
            if state is None:
                return
            done = state.view.segments
            merged = postings.merge(done)
            with self._lock:
                now = self._state
                if (
                    now is not None
                    and len(now.view.segments) >= len(done)
                    and all(a is b for a, b in zip(now.view.segments, done, strict=False))
                ):
                    rest = now.view.segments[len(done) :]
                    self._state = _State(postings.View((merged, *rest)), now.token)
        except MemoryError:
            _log.debug("resident index: no memory to compact; kept as it is")
        finally:
            with self._lock:
                self._building = False
            self.built.set()

    def _build(self) -> None:
        started = time.perf_counter()
        refused, rows, nbytes = "", 0, 0
        conn: Conn | None = None
        try:
            conn = self._connect()
            source = chunk_source(conn)
            if source is None:
                refused = "no chunk source for this backend"
                return
            batch = source.read_all(conn)
            _close(conn)
            conn = None
            rows = len(batch.rows)
            tokens = batch.totals[1] if batch.totals is not None else 0
            if tokens * _BYTES_PER_TOKEN > self._max_bytes:
                refused = f"~{tokens * _BYTES_PER_TOKEN >> 20} MB needed, bound {self._max_bytes >> 20} MB"
                self._refused = batch.token
                return
            try:
                view = _built_view(batch, self._closed)
            except postings.Unindexable as exc:
                refused = str(exc)
                self._refused = batch.token
                return
            nbytes = view.nbytes
            if batch.totals is not None and batch.totals != (view.rows, view.tokens):
                refused = f"index totals {batch.totals} != chunks' {(view.rows, view.tokens)}"
                self._refused = batch.token
                return
            with self._lock:
                if not self._closed.is_set():
                    self._state = _State(view, batch.token)
        except _Closed:
            refused = "closed"
        except (sqlite3.Error, OffloadError, MemoryError) as exc:
            refused = str(exc) or type(exc).__name__
            self._retry_at = time.monotonic() + RETRY_S
        finally:
            if conn is not None:
                _close(conn)
            self.report = BuildReport(time.perf_counter() - started, rows, nbytes, refused)
            if refused:
                _log.debug("resident index not built: %s", refused)
            with self._lock:
                self._building = False
            self.built.set()


def _built_view(batch: chunkrows.Batch, closed: threading.Event) -> postings.View:
    """The rows of a full read as one segment, parsed a batch at a time."""
    rows = batch.rows

    def check() -> None:
        if closed.is_set():
            raise _Closed

    parts = (rows[i : i + BUILD_BATCH] for i in range(0, len(rows), BUILD_BATCH))
    return postings.View((postings.Segment.build_batches(parts, check),))


def _close(conn: Conn) -> None:
    close = getattr(conn, "close", None)
    if close is not None:
        close()


def chunk_source(conn: Conn) -> chunkrows.ChunkSource | None:
    """The chunk source of ``conn``'s backend (SQLite's: store/search/memory/chunkrows.py; PostgreSQL's:
    store/search/memory/pgchunks.py)."""
    if isinstance(conn, sqlite3.Connection):
        return chunkrows.SqliteChunks()
    return pgchunks.PgChunks()
