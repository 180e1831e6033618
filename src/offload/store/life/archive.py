"""A portable archive of a store: zstd-compressed JSON lines; the round trip is lossless.

Line 1 is a header ``{"format": "offload-archive", "version": 1}``; then one record per
line: ``entry`` (every field, its labels, its body and, when it differs, its original,
and its semantic vector when it has one), ``tombstone``, ``state``, ``counter`` and
``tally`` (store/tallies.py). Importing keeps hashes, metadata, labels and vectors (derived
data, but re-embedding a team store's every entry is the slow part of a move, and a target
without the model would lose hybrid ranking); entry ids are the target store's own. An archive written
before tallies existed holds the old totals in its ``state`` records: they are imported as
tallies.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import zstandard

from offload.errors import InvalidInput, StoreError
from offload.store import state, tallies
from offload.store.backend import Conn
from offload.store.models import Filters
from offload.store.sqlite import db
from offload.store.write import blocks, index, pgbulk, rows

if TYPE_CHECKING:
    from offload.store.handle import StoreHandle as Store

FORMAT = "offload-archive"
VERSION = 1
Progress = Callable[[int, int], None]
# entries a PostgreSQL import writes per batch (store/write/pgbulk.py)
IMPORT_BATCH = 500
# entries an export reads per page: a page's labels, vectors, bodies and originals each come
# in one statement (one entry at a time was 5-7 round trips per entry on PostgreSQL); its
# bodies are held at once, so the page stays modest
EXPORT_PAGE = 200
_ENTRY_PAGE = "SELECT * FROM entries WHERE id > ? ORDER BY id LIMIT ?"
# an entry's columns that belong to this store, not to the entry: its id, a checkout's
# owner, and PostgreSQL's write stamp (pgschema.pg_entry_changes)
_LOCAL_COLUMNS = frozenset(("id", "nonce", "owner_pid", "owner_host", "changed"))
# a page's labels and vectors by the page's id range; labels in the order the store holds
# them, as each entry's own look-up gave them
_LABELS_OF = "SELECT entry_id, label FROM labels WHERE entry_id >= ? AND entry_id <= ?"
_VECTORS_OF = (
    "SELECT entry_id, model, CAST(data AS BLOB) AS data FROM entry_vectors "
    "WHERE entry_id >= ? AND entry_id <= ?"
)
# which of a page's original blocks have chunks in the index
_INDEXED_OF = (
    "SELECT b.hash FROM blocks b WHERE b.hash IN (SELECT value FROM json_each(?)) "
    "AND EXISTS (SELECT 1 FROM chunks c WHERE c.block_id = b.id)"
)
# an imported vector joins its entry, found by what identifies it in any store; an entry
# that already has one (of the target's own model, say) keeps it
_ADD_VECTOR = (
    "INSERT OR IGNORE INTO entry_vectors (entry_id, model, data) "
    "SELECT id, ?, ? FROM entries WHERE scope = ? AND content_hash = ?"
)


def export_archive(store: Store, path: Path, *, progress: Progress | None = None) -> int:
    """Write every entry (and tombstones, state, counters) to ``path``; returns entries written.

    The archive is written beside ``path`` and renamed into place, so a reader never sees a
    half-written one; a failure (no such directory, a full disk) leaves nothing behind.
    """
    tmp = path.with_name(path.name + ".partial")
    try:
        raw = tmp.open("wb")
    except OSError as exc:
        raise InvalidInput(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        with raw:
            written = _write_records(store, raw, progress)
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


def _write_records(store: Store, raw: BinaryIO, progress: Progress | None) -> int:
    total = store.count(Filters())
    written = 0
    with zstandard.ZstdCompressor(level=6).stream_writer(raw, closefd=False) as zw:
        out = io.TextIOWrapper(zw, encoding="utf-8", newline="\n")
        _line(out, {"format": FORMAT, "version": VERSION})
        for record in _records(store):
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
    for row in conn.execute("SELECT * FROM tombstones ORDER BY id").fetchall():
        yield {"type": "tombstone", **{k: row[k] for k in row.keys() if k != "id"}}  # noqa: SIM118
    # a value's version is this store's own write count (store/state.py), not exported
    for row in conn.execute(
        "SELECT namespace, key, value, updated FROM state ORDER BY namespace, key"
    ).fetchall():
        yield {"type": "state", **{k: row[k] for k in row.keys()}}  # noqa: SIM118
    for row in conn.execute("SELECT * FROM counters ORDER BY name").fetchall():
        yield {"type": "counter", "name": row["name"], "value": row["value"]}
    for namespace, key, name, value in tallies.rows_all(conn):
        yield {"type": "tally", "namespace": namespace, "key": key, "name": name, "value": value}


_BLOCKS_OF = (
    "SELECT hash, codec, CAST(data AS BLOB) AS data FROM blocks "
    "WHERE hash IN (SELECT value FROM json_each(?))"
)


def _texts(conn: Conn, digests: list[str]) -> dict[str, str]:
    """The plaintexts of those of ``digests`` that are stored, each checked against its
    digest (one statement; the store's body cache is left to the readers it serves)."""
    found = conn.execute(_BLOCKS_OF, (json.dumps(list(dict.fromkeys(digests))),)).fetchall()
    return {
        str(r["hash"]): blocks.unpack(str(r["hash"]), r["codec"], bytes(r["data"])) for r in found
    }


def _entry_records(store: Store, page: list[Any]) -> Iterator[dict[str, Any]]:
    """The records of one page of entries (by id), from five statements for the page."""
    conn = store.conn
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


def _read(path: Path) -> Iterator[dict[str, Any]]:
    try:
        with path.open("rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as zr:
            text = io.TextIOWrapper(zr, encoding="utf-8")
            for n, line in enumerate(text, 1):
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InvalidInput(f"{path}: line {n} is not JSON ({exc.msg})") from exc
    except zstandard.ZstdError as exc:
        raise InvalidInput(f"{path}: not an offload archive ({exc})") from exc
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read ({exc.strerror})") from exc


def import_archive(store: Store, path: Path, *, progress: Progress | None = None) -> int:
    """Load an archive; content already present is kept (dedup). Returns entries added.

    The archive is validated whole before anything is written, so a bad archive changes
    nothing.
    """
    records = list(_read(path))
    if not records or records[0].get("format") != FORMAT:
        raise InvalidInput(f"{path}: not an offload archive (missing header)")
    if records[0].get("version") != VERSION:
        raise InvalidInput(f"{path}: archive version {records[0].get('version')} is not supported")
    entries = [r for r in records[1:] if r.get("type") == "entry"]
    for r in entries:
        if not isinstance(r.get("body"), str) or not isinstance(r.get("content_hash"), str):
            raise InvalidInput(f"{path}: an entry record lacks its body or hash")
    vectors = [(r, vector_bytes(path, r)) for r in entries if "vector" in r]
    added = 0
    conn = store.conn
    with db.write_tx(conn):
        if pgbulk.supported(conn):
            added = _import_bulk(store, entries, progress)
        else:
            for i, r in enumerate(entries, 1):
                added += _import_entry(store, r)
                if progress is not None:
                    progress(i, len(entries))
        for r, data in vectors:
            conn.execute(_ADD_VECTOR, (r["vector"]["model"], data, r["scope"], r["content_hash"]))
        old_archive = not any(r.get("type") == "tally" for r in records[1:])
        _import_tallies(conn, records[1:], old_archive)
        for r in records[1:]:
            kind = r.get("type")
            if kind == "tombstone":
                fields = {k: v for k, v in r.items() if k != "type"}
                cols = ", ".join(fields)
                conn.execute(
                    f"INSERT INTO tombstones ({cols}) VALUES ({', '.join('?' * len(fields))})",
                    list(fields.values()),
                )
            elif kind == "state" and _legacy_of(r, old_archive) is None:
                state.insert_text(conn, r["namespace"], r["key"], r["value"], r["updated"])
            elif kind == "counter":
                conn.execute(
                    "INSERT INTO counters (name, value) VALUES (?, ?) "
                    "ON CONFLICT(name) DO UPDATE SET value = max(value, excluded.value)",
                    (r["name"], r["value"]),
                )
    return added


def vector_bytes(path: Path, r: dict[str, Any]) -> bytes:
    """The packed vector an entry record carries (store/write/vectors.py's format); InvalidInput
    when it is malformed, found before anything is written."""
    vector = r["vector"]
    try:
        if not isinstance(vector, dict) or not isinstance(vector.get("model"), str):
            raise ValueError("no model")
        data = base64.b64decode(str(vector["data"]), validate=True)
        if len(data) <= 4:  # a float32 scale, then at least one int8 component
            raise ValueError("too short")
    except (KeyError, ValueError, binascii.Error) as exc:
        raise InvalidInput(
            f"{path}: entry {str(r['content_hash'])[:12]} carries a malformed vector ({exc})"
        ) from exc
    return data


def _legacy_of(r: dict[str, Any], old_archive: bool) -> tuple[list[tallies.Row], str | None] | None:
    """The counters an old archive's state record holds (tallies.legacy), else None."""
    if not old_archive:
        return None
    return tallies.legacy(str(r["namespace"]), str(r["key"]), str(r["value"]))


def _import_tallies(conn: Conn, records: list[dict[str, Any]], old_archive: bool) -> None:
    """The archive's tallies, or the totals an old archive saved in state; what else such
    a state value held (a proxy session's turns) is imported as state."""
    found: list[tallies.Row] = []
    for r in records:
        if r.get("type") == "tally":
            found.append((str(r["namespace"]), str(r["key"]), str(r["name"]), int(r["value"])))
        elif r.get("type") == "state" and (moved := _legacy_of(r, old_archive)) is not None:
            found.extend(moved[0])
            if moved[1] is not None:
                state.insert_text(conn, r["namespace"], r["key"], moved[1], r["updated"])
    tallies.keep_larger(conn, found)


def _import_bulk(store: Store, entries: list[dict[str, Any]], progress: Progress | None) -> int:
    """Import entries in batches on PostgreSQL (store/write/pgbulk.py): the new contents of each
    batch in a few COPY statements, every other record one by one as before (its labels
    only: it is stored already, or the batch stores it). Entries added."""
    conn = store.conn
    added = 0
    for start in range(0, len(entries), IMPORT_BATCH):
        batch = entries[start : start + IMPORT_BATCH]
        stored = pgbulk.stored_contents(conn, [(r["content_hash"], r["scope"]) for r in batch])
        new: list[dict[str, Any]] = []
        rest: list[dict[str, Any]] = []
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
        added += len(new)
        if progress is not None:
            progress(start + len(batch), len(entries))
    return added


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
    meta = index.meta_row(
        r.get("topic") or "",
        r.get("summary") or "",
        r.get("tags") or "",
        r.get("labels", []),
        r.get("source") or "",
    )
    return pgbulk.NewEntry(tuple(columns), tuple(blocks), meta)


def _import_entry(store: Store, r: dict[str, Any]) -> int:
    conn = store.conn
    exists = conn.execute(
        "SELECT id FROM entries WHERE scope = ? AND content_hash = ?",
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
        cols = [
            "kind", "topic", "tags", "summary", "salience", "status", "pinned", "tokens",
            "content_hash", "block_hash", "source", "scope", "created", "accessed",
            "access_count", "expires", "regenerate", "checked_out", "checked_in",
        ]  # fmt: skip
        values = [r.get(c) for c in cols]
        values[cols.index("status")] = "cold"  # a checkout does not travel
        cur = conn.execute(
            f"INSERT INTO entries ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", values
        )
        entry_id = int(cur.lastrowid or 0)
        index.refresh_meta(conn, entry_id)
        added = 1
    for label in r.get("labels", []):
        rows.set_label(conn, label, entry_id)
    return added
