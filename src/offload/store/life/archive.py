"""A portable archive of a store: zstd-compressed JSON lines; the round trip is lossless.

Line 1 is a header ``{"format": "offload-archive", "version": 1}``; then one record per
line: ``entry`` (every field, its labels, its body and, when it differs, its original,
and its semantic vector when it has one), ``tombstone``, ``state``, ``counter`` and
``tally`` (store/tallies.py). Importing keeps hashes, metadata, labels and vectors (derived
data, but re-embedding a team store's every entry is the slow part of a move, and a target
without the model would lose hybrid ranking); entry ids are the target store's own. An archive written
before tallies existed holds the old totals in its ``state`` records: they are imported as
tallies.

An import trusts nothing in the file: it is read as a stream within bounds
(store/life/archive_read.py), each record checked against a fixed schema and each hash against
the bytes it carries (store/life/archive_schema.py), and written with fixed statements.
"""

from __future__ import annotations

import base64
import io
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import zstandard

from offload.errors import InvalidInput, StoreError
from offload.store import state, tallies
from offload.store.backend import Conn, Sql
from offload.store.life import archive_read, archive_schema
from offload.store.life.archive_read import ImportLimits
from offload.store.life.archive_schema import FORMAT, VERSION, Record
from offload.store.models import Filters
from offload.store.schema import hexed, sqlite_entry_columns, sqlite_entry_values
from offload.store.sqlite import db
from offload.store.write import blocks, meta, pgbulk, rows

if TYPE_CHECKING:
    from offload.store.handle import StoreHandle as Store

Progress = Callable[[int, int], None]
# entries a PostgreSQL import writes per batch (store/write/pgbulk.py)
IMPORT_BATCH = 500
# entries an export reads per page: a page's labels, vectors, bodies and originals each come
# in one statement (one entry at a time was 5-7 round trips per entry on PostgreSQL); its
# bodies are held at once, so the page stays modest
EXPORT_PAGE = 200
_ENTRY_PAGE = Sql("SELECT * FROM entries WHERE id > ? ORDER BY id LIMIT ?")
_SCOPE_PAGE = Sql("SELECT * FROM entries WHERE scope = ? AND id > ? ORDER BY id LIMIT ?")
_SCOPE_TOMBSTONES = Sql("SELECT * FROM tombstones WHERE scope = ? ORDER BY id")
# an entry's columns that belong to this store, not to the entry: its id, a checkout's
# owner, PostgreSQL's write stamp (pgschema.pg_entry_changes) and SQLite's stored form of
# block_hash (store/schema.py)
_LOCAL_COLUMNS = frozenset(("id", "nonce", "owner_pid", "owner_host", "changed", "block_own"))
# a page's labels and vectors by the page's id range; labels in the order the store holds
# them, as each entry's own look-up gave them
_LABELS_OF = Sql("SELECT entry_id, label FROM labels WHERE entry_id >= ? AND entry_id <= ?")
_VECTORS_OF = Sql(
    "SELECT v.entry_id, coalesce(m.name, v.model) AS model, CAST(v.data AS BLOB) AS data "
    "FROM entry_vectors v LEFT JOIN vector_models m ON m.id = v.model "
    "WHERE v.entry_id >= ? AND v.entry_id <= ?",
    (
        "SELECT entry_id, model, data AS data FROM entry_vectors WHERE entry_id >= %s "
        "AND entry_id <= %s"
    ),
)
# which of a page's original blocks have chunks in the index
_INDEXED_OF = Sql(
    "SELECT lower(hex(b.hash)) FROM blocks b WHERE b.hash IN "
    "(SELECT unhex(value) FROM json_each(?)) AND EXISTS (SELECT 1 FROM chunks c WHERE c.block_id = b.id)",
    (
        "SELECT b.hash FROM blocks b WHERE b.hash IN (SELECT "
        "json_array_elements_text(%s::json)) AND EXISTS (SELECT 1 FROM chunks c WHERE "
        "c.block_id = b.id)"
    ),
)
# an imported vector joins its entry, found by what identifies it in any store; an entry
# that already has one (of the target's own model, say) keeps it
_ADD_VECTOR = Sql(
    "INSERT OR IGNORE INTO entry_vectors (entry_id, model, data) "
    "SELECT id, ?, ? FROM entries WHERE scope = ? AND content_hash = unhex(?)",
    (
        "INSERT INTO entry_vectors (entry_id, model, data) SELECT id, %s, %s FROM "
        "entries WHERE scope = %s AND content_hash = %s ON CONFLICT DO NOTHING"
    ),
)


def export_archive(
    store: Store, path: Path, *, scope: str | None = None, progress: Progress | None = None
) -> int:
    """Write every entry (and tombstones, state, counters) to ``path``; returns entries written.
    ``scope``: only that scope's entries and tombstones (the store-wide records, state,
    counters and tallies, stay out).

    The archive is written to a new file of its own beside ``path`` (created exclusively,
    readable by its owner alone: it holds the whole store) and renamed into place, so a
    reader never sees a half-written one; a failure (no such directory, a full disk) leaves
    nothing behind. ``path`` may be an older archive or an empty file (replaced) or a
    symlink (the link is replaced, its target untouched), never a file holding anything else
    (``offload export README.md`` would lose the README), a device, a FIFO or a socket:
    renaming over one would remove it (as root, ``/dev/full`` itself).
    """
    if not path.name or path.is_dir():
        raise InvalidInput(f"export needs a file to write, got {str(path)!r}")
    _refuse_special(path)
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    except OSError as exc:
        raise InvalidInput(f"cannot write {path}: {exc.strerror or exc}") from exc
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as raw:
            written = _write_records(store, raw, scope, progress)
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StoreError(
            f"export to {path} failed: {exc.strerror or exc}; nothing was written"
        ) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return written


def _refuse_special(path: Path) -> None:
    """Refuse to export over something that is there and is not a regular file or a
    symlink (a device, a FIFO, a socket), or over a file holding something that is no
    archive."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InvalidInput(f"cannot write {path}: {exc.strerror or exc}") from exc
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        what = "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
        raise InvalidInput(
            f"{path} is {what}, not a file: export writes a regular file and replaces what "
            "is there; name a file"
        )
    if stat.S_ISREG(mode) and not archive_read.may_replace(path):
        raise InvalidInput(
            f"{path} is not an offload archive: export replaces only an older archive "
            "(zstd-compressed) or an empty file; name another file, or remove this one first"
        )


def _write_records(
    store: Store, raw: BinaryIO, scope: str | None, progress: Progress | None
) -> int:
    total = store.count(Filters(scope=scope))
    written = 0
    with zstandard.ZstdCompressor(level=6).stream_writer(raw, closefd=False) as zw:
        out = io.TextIOWrapper(zw, encoding="utf-8", newline="\n")
        _line(out, {"format": FORMAT, "version": VERSION})
        for record in _scope_records(store, scope) if scope is not None else _records(store):
            _line(out, record)
            if record["type"] == "entry":
                written += 1
                if progress is not None:
                    progress(written, total)
        out.flush()
        out.detach()
    return written


def _line(out: io.TextIOWrapper, record: dict[str, Any]) -> None:
    out.write(json.dumps(record, ensure_ascii=False, sort_keys=True))
    out.write("\n")


def _records(store: Store) -> Iterator[dict[str, Any]]:
    conn = store.conn
    last = 0
    while page := conn.execute(_ENTRY_PAGE, (last, EXPORT_PAGE)).fetchall():
        yield from _entry_records(store, page)
        last = int(page[-1]["id"])
    for row in conn.execute(Sql("SELECT * FROM tombstones ORDER BY id")).fetchall():
        yield {"type": "tombstone", **{k: row[k] for k in row.keys() if k != "id"}}  # noqa: SIM118
    # a value's version is this store's own write count (store/state.py), not exported
    for row in conn.execute(
        Sql("SELECT namespace, key, value, updated FROM state ORDER BY namespace, key")
    ).fetchall():
        yield {"type": "state", **{k: row[k] for k in row.keys()}}  # noqa: SIM118
    for row in conn.execute(Sql("SELECT * FROM counters ORDER BY name")).fetchall():
        # only whole numbers, as import takes them: a damaged store's other values made an
        # archive its own import refused
        if isinstance(row["value"], int):
            yield {"type": "counter", "name": row["name"], "value": row["value"]}
    for namespace, key, name, value in tallies.rows_all(conn):
        yield {"type": "tally", "namespace": namespace, "key": key, "name": name, "value": value}


def _scope_records(store: Store, scope: str) -> Iterator[dict[str, Any]]:
    conn = store.conn
    last = 0
    while page := conn.execute(_SCOPE_PAGE, (scope, last, EXPORT_PAGE)).fetchall():
        yield from _entry_records(store, page)
        last = int(page[-1]["id"])
    for row in conn.execute(_SCOPE_TOMBSTONES, (scope,)).fetchall():
        yield {"type": "tombstone", **{k: row[k] for k in row.keys() if k != "id"}}  # noqa: SIM118


_BLOCKS_OF = Sql(
    "SELECT lower(hex(hash)) AS hash, codec, CAST(data AS BLOB) AS data FROM blocks "
    "WHERE hash IN (SELECT unhex(value) FROM json_each(?))",
    (
        "SELECT hash, codec, data AS data FROM blocks WHERE hash IN (SELECT "
        "json_array_elements_text(%s::json))"
    ),
)


def _texts(conn: Conn, digests: list[str]) -> dict[str, str]:
    """The plaintexts of those of ``digests`` that are stored, each checked against its
    digest (one statement; the store's body cache is left to the readers it serves)."""
    found = conn.execute(_BLOCKS_OF, (json.dumps(list(dict.fromkeys(digests))),)).fetchall()
    return {
        str(r["hash"]): blocks.unpack(str(r["hash"]), r["codec"], bytes(r["data"])) for r in found
    }


def _hexed_hashes(row: Any) -> dict[str, Any]:
    """An entries row as a dict, its hashes as hex whichever way the backend keeps them."""
    out = {k: row[k] for k in row.keys()}  # noqa: SIM118 - Row iterates values
    out["content_hash"] = hexed(out["content_hash"])
    out["block_hash"] = hexed(out["block_hash"])
    return out


def _entry_records(store: Store, page: list[Any]) -> Iterator[dict[str, Any]]:
    """The records of one page of entries (by id), from five statements for the page."""
    conn = store.conn
    page = [_hexed_hashes(r) for r in page]
    span = (int(page[0]["id"]), int(page[-1]["id"]))
    labels: dict[int, list[str]] = {}
    for r in conn.execute(_LABELS_OF, span).fetchall():
        labels.setdefault(int(r["entry_id"]), []).append(str(r["label"]))
    vectors = {int(r["entry_id"]): r for r in conn.execute(_VECTORS_OF, span).fetchall()}
    bodies = _texts(conn, [r["block_hash"] for r in page])
    lossy = list(
        dict.fromkeys(r["content_hash"] for r in page if r["content_hash"] != r["block_hash"])
    )
    # an original may be missing (forgotten to save room): such an entry carries none
    originals = _texts(conn, lossy) if lossy else {}
    indexed = (
        {str(r[0]) for r in conn.execute(_INDEXED_OF, (json.dumps(lossy),))} if lossy else set()
    )
    for row in page:
        rec = {k: row[k] for k in row.keys() if k not in _LOCAL_COLUMNS}  # noqa: SIM118 - Row iterates values
        body = bodies.get(row["block_hash"])
        if body is None:  # as reading it alone says
            body = store.block_text(row["block_hash"])
        rec.update(type="entry", labels=labels.get(int(row["id"]), []), body=body)
        original = (
            originals.get(row["content_hash"]) if row["content_hash"] != row["block_hash"] else None
        )
        if original is not None:
            rec["original"] = original
            rec["original_indexed"] = row["content_hash"] in indexed
        vector = vectors.get(int(row["id"]))
        if vector is not None:
            data = base64.b64encode(bytes(vector["data"])).decode("ascii")
            rec["vector"] = {"model": vector["model"], "data": data}
        yield rec


def _checked(path: Path, limits: ImportLimits, accept_unverified: bool) -> Iterator[Record]:
    """The archive's records, each checked against the schema (store/life/archive_schema.py),
    read within ``limits`` (store/life/archive_read.py)."""
    numbered = archive_read.lines(path, limits)
    first = next(numbered, None)
    archive_schema.check_header(path, None if first is None else first[1])
    for n, value in numbered:
        yield archive_schema.check_record(path, n, value, accept_unverified=accept_unverified)


def _rescoped(records: Iterator[Record], scope: str | None) -> Iterator[Record]:
    """``records``, or with ``scope``: their entries and tombstones moved into it, alone."""
    if scope is None:
        yield from records
        return
    for r in records:
        if r["type"] in ("entry", "tombstone"):
            yield {**r, "scope": scope}


@dataclass
class _Survey:
    """What the first, validating pass over an archive found."""

    entries: int = 0
    tallies: bool = False


def import_archive(
    store: Store,
    path: Path,
    *,
    progress: Progress | None = None,
    accept_unverified: bool = False,
    limits: ImportLimits | None = None,
    scope: str | None = None,
) -> int:
    """Load an archive; content already present is kept (dedup). Returns entries added.
    ``scope``: every entry and tombstone goes into that scope, whatever the archive says,
    and the store-wide records (state, counters, tallies) are left out.

    The archive is read twice: once to check every record against the schema and every
    hash against the bytes it carries, within ``limits`` (the store settings' by default),
    writing nothing; then again to write, every record checked again, in one transaction.
    A bad archive is InvalidInput and changes nothing. ``accept_unverified`` lets in lossy
    entries without their original, whose content hash nothing in the archive backs (an
    archive this process wrote itself).
    """
    limits = limits if limits is not None else ImportLimits.of(store.settings)
    survey = _Survey()
    for r in _rescoped(_checked(path, limits, accept_unverified), scope):
        survey.entries += r["type"] == "entry"
        survey.tallies = survey.tallies or r["type"] == "tally"
    loader = _Loader(store, survey, progress)
    with db.write_tx(store.conn):
        for r in _rescoped(_checked(path, limits, accept_unverified), scope):
            loader.take(r)
        loader.flush()
    return loader.added


class _Loader:
    """Writes checked records in the caller's transaction: entries a batch at a time (with
    their vectors), every other record as it comes."""

    def __init__(self, store: Store, survey: _Survey, progress: Progress | None) -> None:
        self.store, self.conn, self.survey, self.progress = store, store.conn, survey, progress
        self.batch: list[Record] = []
        self.added = self.done = 0

    def take(self, r: Record) -> None:
        if r["type"] == "entry":
            self.batch.append(r)
            if len(self.batch) >= IMPORT_BATCH:
                self.flush()
            return
        self.flush()
        conn = self.conn
        if r["type"] == "tombstone":
            conn.execute(_ADD_TOMBSTONE, [r.get(c) for c in _TOMBSTONE_COLUMNS])
        elif r["type"] == "state":
            self._state(r)
        elif r["type"] == "counter":
            conn.execute(_ADD_COUNTER, (r["name"], r["value"]))
        elif r["type"] == "tally":
            tallies.keep_larger(conn, [(r["namespace"], r["key"], r["name"], r["value"])])

    def flush(self) -> None:
        """Write the entries held so far."""
        if not self.batch:
            return
        batch, self.batch = self.batch, []
        _keep_held_labels(self.conn, batch)
        if pgbulk.supported(self.conn):
            self.added += _import_bulk(self.store, batch)
        else:
            self.added += sum(_import_entry(self.store, r) for r in batch)
        for r in batch:
            if "vector" in r:
                vector = r["vector"]
                self.conn.execute(
                    _ADD_VECTOR, (vector["model"], vector["data"], r["scope"], r["content_hash"])
                )
        self.done += len(batch)
        if self.progress is not None:
            self.progress(self.done, self.survey.entries)

    def _state(self, r: Record) -> None:
        """A state value; an archive written before tallies holds the old totals in state
        (tallies.legacy): those are imported as tallies, what else the value held as state."""
        moved = (
            None if self.survey.tallies else tallies.legacy(r["namespace"], r["key"], r["value"])
        )
        if moved is None:
            state.insert_text(self.conn, r["namespace"], r["key"], r["value"], r["updated"])
            return
        tallies.keep_larger(self.conn, moved[0])
        if moved[1] is not None:
            state.insert_text(self.conn, r["namespace"], r["key"], moved[1], r["updated"])


def _keep_held_labels(conn: Conn, batch: list[Record]) -> None:
    """Drop from ``batch`` the labels the store gives an entry already: an archive never
    moves a label (``deploy-key`` would otherwise read the archive's text from then on)."""
    wanted = [label for r in batch for label in r["labels"]]
    if not wanted:
        return
    held = {str(row[0]) for row in conn.execute(_HELD_LABELS, (json.dumps(wanted),))}
    if held:
        for r in batch:
            r["labels"] = [label for label in r["labels"] if label not in held]


_HELD_LABELS = Sql(
    "SELECT label FROM labels WHERE label IN (SELECT value FROM json_each(?))",
    ("SELECT label FROM labels WHERE label IN (SELECT json_array_elements_text(%s::json))"),
)
# fixed statements: an archive's keys are checked against a schema, never used as names
_TOMBSTONE_COLUMNS = (
    "entry_id", "content_hash", "labels", "topic", "source", "scope", "reason", "gone",
    "regenerate",
)  # fmt: skip
_ADD_TOMBSTONE = Sql(
    "INSERT INTO tombstones (entry_id, content_hash, labels, topic, source, scope, reason, "
    "gone, regenerate) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
    (
        "INSERT INTO tombstones (entry_id, content_hash, labels, topic, source, "
        "scope, reason, gone, regenerate) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
        "RETURNING id"
    ),
    returns_id=True,
)
_ADD_COUNTER = Sql(
    "INSERT INTO counters (name, value) VALUES (?, ?) "
    "ON CONFLICT(name) DO UPDATE SET value = max(value, excluded.value)",
    (
        "INSERT INTO counters (name, value) VALUES (%s, %s) ON CONFLICT(name) DO "
        "UPDATE SET value = greatest(counters.value, excluded.value)"
    ),
)


def _import_bulk(store: Store, batch: list[Record]) -> int:
    """Import a batch of entries on PostgreSQL (store/write/pgbulk.py): the new contents in a few
    COPY statements, every other record one by one (its labels only: it is stored already,
    or the batch stores it). Entries added."""
    conn = store.conn
    stored = pgbulk.stored_contents(conn, [(r["content_hash"], r["scope"]) for r in batch])
    new: list[Record] = []
    rest: list[Record] = []
    for r in batch:
        key = (r["content_hash"], r["scope"])
        (rest if key in stored else new).append(r)
        stored.add(key)
    ids = pgbulk.insert_new(conn, [_new_entry(store, r) for r in new], store.clock())
    for r, entry_id in zip(new, ids, strict=True):
        for label in r.get("labels", []):
            rows.set_label(conn, label, entry_id)
    for r in rest:
        _import_entry(store, r)
    return len(new)


def _new_entry(store: Store, r: dict[str, Any]) -> pgbulk.NewEntry:
    """An archive's entry record as a bulk insert's row (its blocks prepared here)."""
    s = store.settings

    def block(text: str, indexed: bool) -> rows.PreparedBlock:
        return rows.prepare_block(
            text.encode("utf-8"),
            indexed=indexed,
            chunk_lines=s.chunk_lines,
            chunk_chars=s.chunk_chars,
        )

    body = block(r["body"], True)
    if body.digest != r["block_hash"]:
        raise StoreError(f"archive entry {r['content_hash'][:12]}: body does not match its hash")
    blocks = [body]
    if "original" in r:
        blocks.append(block(r["original"], r.get("original_indexed") is True))
    columns = [r.get(c) for c in pgbulk.ENTRY_COLUMNS]
    columns[pgbulk.ENTRY_COLUMNS.index("status")] = "cold"  # a checkout does not travel
    meta_fields = meta.meta_row(
        r.get("topic") or "",
        r.get("summary") or "",
        r.get("tags") or "",
        r.get("labels", []),
        r.get("source") or "",
        r["body"],  # a topic or summary made from the body counts as it does for a put
    )
    return pgbulk.NewEntry(tuple(columns), tuple(blocks), meta_fields)


def _import_entry(store: Store, r: dict[str, Any]) -> int:
    conn = store.conn
    exists = conn.execute(
        Sql(
            "SELECT id FROM entries WHERE scope = ? AND content_hash = unhex(?)",
            "SELECT id FROM entries WHERE scope = %s AND content_hash = %s",
        ),
        (r["scope"], r["content_hash"]),
    ).fetchone()
    if exists is not None:
        entry_id = int(exists[0])
        added = 0
    else:
        now = store.clock()
        body_hash = rows.put_block(conn, r["body"].encode("utf-8"), store.settings, now)
        if body_hash != r["block_hash"]:
            raise StoreError(
                f"archive entry {r['content_hash'][:12]}: body does not match its hash"
            )
        if "original" in r:
            rows.put_block(
                conn,
                r["original"].encode("utf-8"),
                store.settings,
                now,
                indexed=r.get("original_indexed") is True,
            )
        cols = (
            "kind", "topic", "tags", "summary", "salience", "status", "pinned", "tokens",
            "content_hash", "block_hash", "source", "scope", "created", "accessed",
            "access_count", "expires", "regenerate", "checked_out", "checked_in", "event_time",
        )  # fmt: skip
        values = [r.get(c) for c in cols]
        values[cols.index("status")] = "cold"  # a checkout does not travel
        cur = conn.execute(
            Sql(
                f"INSERT INTO entries ({', '.join(sqlite_entry_columns(cols))}) VALUES "
                f"({', '.join(sqlite_entry_values(cols))})",
                f"INSERT INTO entries ({', '.join(cols)}) "
                f"VALUES ({', '.join(['%s'] * len(cols))}) RETURNING id",
                returns_id=True,
            ),
            values,
        )
        entry_id = int(cur.lastrowid or 0)
        meta.refresh_meta(conn, entry_id)
        added = 1
    for label in r.get("labels", []):
        rows.set_label(conn, label, entry_id)
    return added
