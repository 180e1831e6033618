"""Entry vectors for hybrid search: stored beside each entry, scored from one matrix.

Each entry has at most one vector (``entry_vectors``, migration ``m_entry_vectors``): the
embedding of its topic, summary, tags and body, quantised to 4 bits a component (128 bytes
and a float32 scale for 256 dimensions, :func:`pack`), with the model id that made it. The store never loads a model:
it is handed an :class:`Encoder` (``offload.llm.embedding``), and computes a vector before
the write transaction that stores it, so the write lock is never held while embedding.

Search reads the vectors of the current model into an in-process matrix once, and after
that only the rows added since (``entry_vectors.id`` only grows); one matrix-vector product
scores every entry. The matrix holds each row as its stored components, one byte each, and
its scale (:class:`Codes`: a quarter of the float32 rows' memory); a row's score is its
components' product with the query (widened to float32 a block of rows at a time) times
its scale, which is the float32 row's product up to rounding. Vectors of another model (the store was written while
``search.embedding_model`` named another) are never read into it: their entries are found
lexically until rewritten or re-embedded (``offload doctor --reindex``), and an entry whose
vector another model's process replaces leaves the matrix. Rows of entries forgotten since stay in the matrix until the
next full reload and are dropped by the filter that every candidate passes.

An entry without a vector (stored before this migration, or while the model was missing)
is still found lexically; ``offload doctor --reindex`` fills them in (:func:`backfill`).

SQLite keeps a row's model as the id (its digits) of its name in ``vector_models``
(migration ``m_vector_model_ids``: the name as text was 25 bytes a row, 0.09x the raw text
of a store of chat turns). A row is written with the name, as PostgreSQL keeps it, and a
trigger puts the id in its place within the same statement; the statements that pick a
model's rows look its id up by name, and those that hand a row on (an archive, a
migration to PostgreSQL) give the name.
"""

from __future__ import annotations

import json
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from offload.store.backend import Conn, Row, Sql
from offload.store.schema import hexed
from offload.store.sqlite import db

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray


Progress = Callable[[int, int], None]
_SCALE = struct.Struct("<f")
# levels each side of zero of a stored component (4 bits: -7..7, symmetric)
_LEVELS = 7.0
_BATCH = 256
# a full reload when more than this share of the best rows belong to forgotten entries
_STALE_RELOAD = 0.5
# a full reload once this many ids below the largest read are still missing
_MAX_GAPS = 100_000
# the typical similarity (fusion's floor) is the median over an even sample of this many
_FLOOR_SAMPLE = 4096
# Past this many rows the nearest are found in two passes: the first COARSE_DIMS components
# (when the model is trained Matryoshka-style, as the static one is: a prefix is itself an
# embedding; :func:`nested`) of every row, then every component of the best COARSE_KEEP x k rows. Scoring 100k rows reads 100 MB
# in full against 25 MB for the prefix.
COARSE_ROWS = 20_000
COARSE_DIMS = 64
COARSE_KEEP = 16


class Encoder(Protocol):
    """What the store needs of an embedding model (see offload.llm.embedding)."""

    @property
    def model_id(self) -> str: ...

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """One unit-length float32 row per text."""
        ...


def nested(encoder: Encoder) -> bool:
    """Whether a prefix of the encoder's vectors is itself an embedding (its ``nested``
    attribute; an encoder without one is taken to be, as the shipped static model is)."""
    return bool(getattr(encoder, "nested", True))


# an encoder reads a prefix of what it is given (16,000 characters for the built-in model):
# a multi-megabyte body is not copied whole to make it
BODY_CHARS = 64 * 1024


def entry_text(topic: str, summary: str, tags: str, body: str) -> str:
    """What an entry's vector describes: its metadata first, then its body (its first
    :data:`BODY_CHARS` characters)."""
    return "\n".join(part for part in (topic, summary, tags, body[:BODY_CHARS]) if part)


def pack(vector: NDArray[np.float32]) -> bytes:
    """The vector in 4 bits a component, two to a byte (low nibble first), after its
    float32 scale stored negated: 132 bytes for 256 dimensions, half the int8 form (the
    recall measured on LoCoMo moved by less than 0.005). A vector of an odd number of
    components keeps the int8 form (a positive scale, then one byte a component)."""
    import numpy as np

    if vector.size % 2:
        return _pack_int8(vector)
    top = float(np.max(np.abs(vector))) if vector.size else 0.0
    scale = top / _LEVELS if top > 0 else 1.0
    q = np.clip(np.rint(vector / scale), -_LEVELS, _LEVELS).astype(np.int8)
    nibbles = q.view(np.uint8) & 0x0F
    packed = nibbles[0::2] | (nibbles[1::2] << 4)
    return _SCALE.pack(-scale) + bytes(packed.astype(np.uint8).tobytes())


def _pack_int8(vector: NDArray[np.float32]) -> bytes:
    """int8 components after their float32 scale (positive): the form before 4 bits."""
    import numpy as np

    top = float(np.max(np.abs(vector))) if vector.size else 0.0
    scale = top / 127.0 if top > 0 else 1.0
    q = np.clip(np.rint(vector / scale), -127, 127).astype(np.int8)
    return _SCALE.pack(scale) + bytes(q.tobytes())


def unpack(data: bytes) -> NDArray[np.float32]:
    """The float32 vector :func:`pack` stored (either form: the scale's sign tells)."""
    row: NDArray[np.float32] = unpack_rows([data])[0]
    return row


def unpack_rows(stored: Sequence[bytes]) -> NDArray[np.float32]:
    """The float32 vectors of several packed rows as one matrix; rows of one length and
    form (a store's usual case) are decoded together, without a loop over the rows."""
    return unpack_codes(stored).decoded()


def unpack_codes(stored: Sequence[bytes]) -> Codes:
    """Several packed rows as their components and scales (:class:`Codes`), undecoded."""
    import numpy as np

    width = len(stored[0])
    if any(len(d) != width for d in stored):
        return Codes.joined([unpack_codes([d]) for d in stored])
    raw = np.frombuffer(b"".join(stored), dtype=np.uint8).reshape(len(stored), width)
    scales = np.ascontiguousarray(raw[:, : _SCALE.size]).view("<f4").reshape(-1)
    body = raw[:, _SCALE.size :]
    four = scales < 0
    if four.any() and not four.all():
        return Codes.joined([unpack_codes([d]) for d in stored])
    if four.all():
        q = np.empty((len(stored), 2 * body.shape[1]), dtype=np.int8)
        q[:, 0::2] = ((body & 0x0F) ^ 8).astype(np.int8) - 8  # sign-extend each nibble
        q[:, 1::2] = ((body >> 4) ^ 8).astype(np.int8) - 8
        scales = -scales
    else:
        q = np.array(body.view(np.int8))  # a copy of its own: rows are zeroed in place
    return Codes(q, scales.astype(np.float32))


@dataclass(frozen=True, eq=False)
class Codes:
    """Rows as their stored components (int8: the 4-bit ones sign-extended) and one
    float32 scale a row: 260 bytes a row of 256 components against 1,024 as float32.
    Indexed like a matrix of rows (a slice, a list or an array of row numbers), it gives
    those rows as Codes; :meth:`decoded` gives them as :func:`unpack_rows` does."""

    q: Any  # NDArray[np.int8], (rows, components)
    scales: Any  # NDArray[np.float32], (rows,)

    @staticmethod
    def joined(parts: Sequence[Codes]) -> Codes:
        import numpy as np

        return Codes(np.vstack([p.q for p in parts]), np.concatenate([p.scales for p in parts]))

    def __len__(self) -> int:
        return len(self.q)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.q.shape)

    @property
    def nbytes(self) -> int:
        return int(self.q.nbytes) + int(self.scales.nbytes)

    def __getitem__(self, at: Any) -> Codes:
        return Codes(self.q[at], self.scales[at])

    def contiguous(self) -> Codes:
        """The same rows in arrays of their own (a slice's rows are read faster so)."""
        import numpy as np

        return Codes(np.ascontiguousarray(self.q), np.ascontiguousarray(self.scales))

    def decoded(self, dims: int | None = None) -> NDArray[np.float32]:
        """The rows (their first ``dims`` components) in float32: component times scale."""
        import numpy as np

        q = self.q if dims is None else self.q[:, :dims]
        out: NDArray[np.float32] = q.astype(np.float32) * self.scales[:, None]
        return out


def encode_one(encoder: Encoder, text: str) -> bytes:
    """The packed vector of one text (call it outside any write transaction)."""
    return pack(encoder.encode([text])[0])


def encode_many(encoder: Encoder, texts: Sequence[str]) -> list[bytes]:
    """The packed vectors of several texts, in one call of the model."""
    return [pack(row) for row in encoder.encode(texts)]


def insert(conn: Conn, entry_id: int, model_id: str, data: bytes) -> None:
    """Store (or replace) an entry's vector, inside the caller's write transaction.

    A replaced vector gets a new row id (AUTOINCREMENT: ids are never reused), so every
    in-process matrix sees it on its next refresh.
    """
    conn.execute(
        Sql(
            "INSERT OR REPLACE INTO entry_vectors (entry_id, model, data) VALUES (?, ?, ?)",
            (
                "INSERT INTO entry_vectors (entry_id, model, data) VALUES (%s, %s, %s) ON "
                "CONFLICT (entry_id) DO UPDATE SET id = nextval('entry_vectors_id_seq'), "
                "model = excluded.model, data = excluded.data"
            ),
        ),
        (entry_id, model_id, data),
    )


class Growing:
    """An array that grows along its first axis in place: appended rows go into room kept
    spare at its end (half its size again whenever it fills), so appending k rows copies k
    rows, not the whole array. A process that searches while entries arrive refreshes its
    matrix with a few rows at a time; copying the whole matrix each time cost a full copy
    per refresh in CPU and, with searches holding the old copy, that much again in memory.
    Readers keep views of the rows so far, which later appends never write to. The spare
    room is allocated but not touched, so it takes no resident memory until filled."""

    def __init__(self, first: Any) -> None:
        self._buf = first
        self._used = len(first)

    @property
    def rows(self) -> Any:
        """The rows so far (a view)."""
        return self._buf[: self._used]

    def extend(self, new: Any) -> Any:
        """Append ``new`` (rows of the same shape and type); the rows so far, as a view."""
        import numpy as np

        need = self._used + len(new)
        if need > len(self._buf):
            room = max(need, len(self._buf) * 3 // 2 + 64)
            grown = np.empty((room, *self._buf.shape[1:]), dtype=self._buf.dtype)
            grown[: self._used] = self._buf[: self._used]
            self._buf = grown
        self._buf[self._used : need] = new
        self._used = need
        return self.rows


class VectorMatrix:
    """The vectors of one model as a float32 matrix, refreshed by the largest row id.

    Shared by a store's threads (under a lock); rebuilt from scratch when the table was
    rebuilt or too many of the best rows belong to forgotten entries. ``coarse``: the
    model's prefixes are embeddings (:func:`nested`), so a big scan may rank by them first.
    """

    def __init__(self, model_id: str, *, coarse: bool = True) -> None:
        self.model_id = model_id
        self.coarse = coarse
        self._lock = threading.Lock()
        self._last = 0
        self._ids: Any = None  # NDArray[np.int64]: the entry id of each row (-1: replaced)
        self._rows: Codes | None = None  # one unit row per vector
        self._where: dict[int, int] = {}  # entry id -> its current row
        self._prefix: Any = None  # NDArray[np.float32]: unit COARSE_DIMS prefixes of the rows
        # where the ids, the rows' components and scales grow (each a view of its rows)
        self._grown: tuple[Growing, Growing, Growing] | None = None
        self._prefix_grown: Growing | None = None
        self._sample: Any = None  # NDArray[np.float32]: a contiguous copy of the floor's rows
        self._reload = False
        self._gaps: set[int] = set()  # ids below _last not read yet (uncommitted, or gone)

    @property
    def held_bytes(self) -> int:
        """The memory the matrix holds now: its rows, their entry ids and prefixes (the
        room kept spare for rows to come takes none until filled)."""
        with self._lock:
            held = (self._ids, self._rows, self._prefix)
            return sum(int(a.nbytes) for a in held if a is not None)

    def prefixes(self) -> Any:
        """The rows' unit-length prefixes (call after refresh), built when first asked."""
        with self._lock:
            rows = self._rows
            if rows is not None and (self._prefix is None or len(self._prefix) != len(rows)):
                self._prefix_grown = Growing(unit_prefixes(rows))
                self._prefix = self._prefix_grown.rows
            return self._prefix

    def sample(self) -> Any:
        """A contiguous copy of the rows the floor is the median over (call after refresh):
        the same values as ``rows[::step]`` (:func:`floor_rows`), read ~3.5x faster than
        every step-th row of the whole matrix at 100k rows. None while the sample is every
        row: the scan scores them all anyway."""
        with self._lock:
            rows = self._rows
            if self._sample is None and rows is not None and floor_rows(rows) is not rows:
                self._sample = floor_rows(rows).contiguous()
            return self._sample

    def refresh(self, conn: Conn) -> tuple[Any, Any]:
        """(entry ids, matrix) including every vector stored so far.

        Rows are read by id, but ids are not always committed in id order: on PostgreSQL
        puts commit side by side, so a row may appear after a larger id was read. An id
        below the largest one read that was missing is kept as a gap and asked for again
        until it shows up or is known never to (:func:`settled_id`: its writer is gone).
        """
        with self._lock:
            row = conn.execute(
                Sql(
                    "SELECT seq FROM sqlite_sequence WHERE name = 'entry_vectors'",
                    "SELECT coalesce(max(id), 0) AS seq FROM entry_vectors",
                )
            ).fetchone()
            top = 0 if row is None else int(row[0])
            if self._reload or top < self._last or len(self._gaps) > _MAX_GAPS:
                self._last, self._ids, self._rows, self._where = 0, None, None, {}
                self._prefix, self._gaps = None, set()
                self._grown, self._prefix_grown = None, None
                self._sample, self._reload = None, False
            if top > self._last or self._gaps:
                # taken before the read: every id up to it is committed or never will be
                settled = settled_id(conn, wait=self._last == 0)
                new = conn.execute(
                    Sql(
                        "SELECT id, entry_id, CASE WHEN model = (SELECT CAST(id AS TEXT) "
                        "FROM vector_models WHERE name = ?) THEN data END AS data FROM entry_vectors "
                        "WHERE id > ? OR id IN (SELECT value FROM json_each(?)) ORDER BY id",
                        (
                            "SELECT id, entry_id, CASE WHEN model = %s THEN data END AS data FROM "
                            "entry_vectors WHERE id > %s OR id IN (SELECT value FROM offload_ids(%s)) "
                            "ORDER BY id"
                        ),
                    ),
                    (self.model_id, self._last, json.dumps(sorted(self._gaps))),
                ).fetchall()
                self._append([(r[1], r[2]) for r in new])
                self._note_gaps([int(r[0]) for r in new], settled)
            return self._ids, self._rows

    def _note_gaps(self, read: list[int], settled: int | None) -> None:
        """Advance past the ids read (sorted); what is missing below the largest becomes a
        gap, and a gap is dropped once read or settled."""
        gaps = self._gaps.difference(read)
        last = self._last
        for i in read:
            if i > last:
                gaps.update(range(last + 1, i))
                last = i
        if settled is not None:
            gaps = {g for g in gaps if g > settled}
        self._last, self._gaps = last, gaps

    def _append(self, new: list[Row]) -> None:
        """Add the rows read: (entry id, vector), the vector None when another model wrote
        it (that entry's row of this model, if any, no longer counts)."""
        import numpy as np

        others = [int(r[0]) for r in new if r[1] is None]
        new = [r for r in new if r[1] is not None]
        if others and self._ids is not None:
            self._drop([self._where.pop(eid) for eid in others if eid in self._where])
        if not new:
            return
        self._sample = None  # rows added, or a replaced one zeroed below
        ids = np.fromiter((int(r[0]) for r in new), dtype=np.int64, count=len(new))
        rows = unpack_codes([bytes(r[1]) for r in new])
        base = 0 if self._ids is None else len(self._ids)
        if self._grown is None:
            self._grown = (Growing(ids), Growing(rows.q), Growing(rows.scales))
            self._ids, self._rows = ids, rows
        else:
            ids_at, q_at, scales_at = self._grown
            self._ids = ids_at.extend(ids)
            self._rows = Codes(q_at.extend(rows.q), scales_at.extend(rows.scales))
        replaced = []
        for offset, eid in enumerate(ids.tolist()):
            old = self._where.get(eid)
            if old is not None:  # re-embedded: the old row no longer counts
                replaced.append(old)
            self._where[eid] = base + offset
        self._drop(replaced)
        if self._prefix is not None and self._prefix_grown is not None:
            self._prefix = self._prefix_grown.extend(unit_prefixes(rows))

    def _drop(self, at: list[int]) -> None:
        """Rows that no longer count: their entry id -1, their components zero."""
        if not at:
            return
        self._ids[at] = -1
        if self._rows is not None:
            self._rows.q[at] = 0
        if self._prefix is not None:
            self._prefix[[i for i in at if i < len(self._prefix)]] = 0.0
        self._sample = None

    def similarity(self, query: NDArray[np.float32], entry_ids: Sequence[int]) -> dict[int, float]:
        """The similarity of each of ``entry_ids`` that has a row (call after refresh)."""
        with self._lock:
            rows, where = self._rows, self._where
            at = [(eid, where[eid]) for eid in entry_ids if eid in where]
        if not at or rows is None:
            return {}
        sims = _dot(rows[[i for _, i in at]], query)
        return {eid: float(s) for (eid, _), s in zip(at, sims.tolist(), strict=True)}

    def note_stale(self, share: float) -> None:
        """Report the share of the best rows that were forgotten entries."""
        if share > _STALE_RELOAD:
            with self._lock:
                self._reload = True


def settled_id(conn: Conn, *, wait: bool) -> int | None:
    """An id up to which every entry_vectors row is committed or never will be (None:
    not known now). SQLite serialises writers and draws ids in commit order: every id
    missing below one read is gone for good. On PostgreSQL it is the id drawn last when
    no writer was in flight (``PgConn.settled_id``; ``wait``: wait for that moment)."""
    settled = getattr(conn, "settled_id", None)
    if settled is None:
        return sys.maxsize
    value: int | None = settled("entry_vectors_id_seq", wait=wait)
    return value


# rows of :class:`Codes` widened to float32 at a time to be scored (2 MiB at 256 components)
_DECODE_ROWS = 2048


def _dot(rows: Any, query: NDArray[np.float32]) -> Any:
    """Each row's dot product with ``query``. numpy's own loop, not BLAS: on a busy
    machine OpenBLAS's threads made a 2,000 x 256 product take ~45 ms instead of 0.1 ms.
    :class:`Codes`: each row's components (widened to float32 a block of rows at a time)
    with the query, times the row's scale: the float32 rows' product up to rounding (the
    scale applied once, not to each component), at about the float32 matrix's speed."""
    import numpy as np

    if not isinstance(rows, Codes):
        return np.einsum("ij,j->i", rows, query)
    out = np.empty(len(rows), dtype=np.result_type(np.float32, query.dtype))
    for start in range(0, len(rows), _DECODE_ROWS):
        block = slice(start, start + _DECODE_ROWS)
        np.einsum("ij,j->i", rows.q[block].astype(np.float32), query, out=out[block])
    out *= rows.scales
    return out


def floor_rows(rows: Any) -> Any:
    """The even sample of about _FLOOR_SAMPLE rows the floor is the median over (a view;
    below twice that many, every row: ``rows`` itself)."""
    step = len(rows) // _FLOOR_SAMPLE
    return rows if step <= 1 else rows[::step]


def unit_prefixes(rows: Any) -> Any:
    """Each row's first COARSE_DIMS components, scaled to unit length."""
    import numpy as np

    head = rows.decoded(COARSE_DIMS) if isinstance(rows, Codes) else rows[:, :COARSE_DIMS]
    prefix = np.ascontiguousarray(head, dtype=np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", prefix, prefix))
    norms[norms == 0] = 1.0
    out: Any = prefix / norms[:, None]
    return out


def nearest(
    ids: Any,
    rows: Any,
    query: NDArray[np.float32],
    k: int,
    allowed: Any = None,
    prefixes: Any = None,
    sample: Any = None,
) -> tuple[list[tuple[int, float]], float]:
    """The ``k`` rows closest to ``query`` (among ``allowed`` entry ids, when given) as
    (entry id, similarity) best first, and the typical similarity (the floor).

    With ``prefixes`` (:meth:`VectorMatrix.prefixes`) and more than COARSE_ROWS rows, the
    candidates are the best COARSE_KEEP x k by prefix, then ranked in full. ``sample``:
    :meth:`VectorMatrix.sample`, the floor's rows already copied (else read from ``rows``)."""
    import numpy as np

    if ids is None or not len(ids):
        return [], 0.0
    if sample is None:
        sample = floor_rows(rows)
    scored = _dot(sample, query)  # every row's score when the sample is every row
    floor = float(np.median(scored))
    live = ids >= 0 if allowed is None else np.isin(ids, allowed)
    pick = np.flatnonzero(live)
    if not len(pick):
        return [], floor
    k = min(k, len(pick))
    if prefixes is not None and len(pick) > COARSE_ROWS and len(pick) > COARSE_KEEP * k:
        head = query[:COARSE_DIMS]
        rough = _dot(prefixes, head / (float(np.linalg.norm(head)) or 1.0))
        every = len(pick) == len(ids)  # nothing filtered out: no copy of the scores
        if not every:
            rough = rough[pick]
        keep = COARSE_KEEP * k
        best = np.argpartition(-rough, keep - 1)[:keep]
        pick = best if every else pick[best]
        sims = _dot(rows[pick], query)
    elif 2 * len(pick) < len(ids):
        sims = _dot(rows[pick], query)  # a narrow filter: score only the rows it keeps
    else:
        sims = (scored if sample is rows else _dot(rows, query))[pick]
    order = np.argpartition(-sims, k - 1)[:k]
    top, top_sims = pick[order], sims[order]
    ranked = np.lexsort((-ids[top], -top_sims))  # ties: the newer entry first
    return [(int(ids[top[i]]), float(top_sims[i])) for i in ranked], floor


def missing(conn: Conn, model_id: str) -> int:
    """How many entries have no vector of ``model_id``."""
    row = conn.execute(
        Sql(
            "SELECT count(*) FROM entries e WHERE NOT EXISTS (SELECT 1 FROM entry_vectors v "
            "WHERE v.entry_id = e.id AND v.model = (SELECT CAST(id AS TEXT) FROM vector_models WHERE name = ?))",
            (
                "SELECT count(*) FROM entries e WHERE NOT EXISTS "
                "(SELECT 1 FROM entry_vectors v WHERE v.entry_id = e.id AND v.model = %s)"
            ),
        ),
        (model_id,),
    ).fetchone()
    return int(row[0])


class Embeddable(Protocol):
    """What :func:`backfill` uses of the store (``StoreHandle`` has it all)."""

    @property
    def embedder(self) -> Encoder | None: ...

    @property
    def conn(self) -> Conn: ...

    def block_text(self, digest: str) -> str: ...


def backfill(store: Embeddable, *, progress: Progress | None = None) -> int:
    """Embed every entry without a vector of the store's model; returns how many.

    Batches are encoded outside any transaction; each batch lands in one short write
    transaction (an entry forgotten meanwhile is skipped).
    """
    encoder = store.embedder
    if encoder is None:
        return 0
    model = encoder.model_id
    conn = store.conn
    total = missing(conn, model)
    done = 0
    last = 0
    while True:
        rows = conn.execute(
            Sql(
                "SELECT e.id, e.topic, e.summary, e.tags, e.block_hash FROM entries e "
                "WHERE e.id > ? AND NOT EXISTS (SELECT 1 FROM entry_vectors v "
                "WHERE v.entry_id = e.id AND v.model = "
                "(SELECT CAST(id AS TEXT) FROM vector_models WHERE name = ?)) ORDER BY e.id LIMIT ?",
                (
                    "SELECT e.id, e.topic, e.summary, e.tags, e.block_hash FROM entries e "
                    "WHERE e.id > %s AND NOT EXISTS (SELECT 1 FROM entry_vectors v "
                    "WHERE v.entry_id = e.id AND v.model = %s) ORDER BY e.id LIMIT %s"
                ),
            ),
            (last, model, _BATCH),
        ).fetchall()
        if not rows:
            return done
        last = int(rows[-1][0])
        texts = [
            entry_text(
                r["topic"], r["summary"], r["tags"], store.block_text(hexed(r["block_hash"]))
            )
            for r in rows
        ]
        packed = [pack(v) for v in encoder.encode(texts)]
        with db.write_tx(conn) as tx:
            for r, data in zip(rows, packed, strict=True):
                if tx.execute(Sql("SELECT 1 FROM entries WHERE id = ?"), (r[0],)).fetchone():
                    insert(tx, int(r[0]), model, data)
        done += len(rows)
        if progress is not None:
            progress(min(done, total), total)
