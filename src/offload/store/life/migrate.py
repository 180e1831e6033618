"""Moving a store to another backend (a SQLite file into a team PostgreSQL store), proven.

:func:`migrate` writes the source's portable archive (store/life/archive.py: every entry, its
labels, body and original, tombstones, state, counters), loads it into the target, then
re-reads every block the archive names from the target and re-hashes it, and compares
every semantic vector the archive carries with the one the target now holds. The copy goes
through the same export and import as ``offload export`` / ``import``, so what one moves
the other moves; a re-run after an interruption adds only what is missing (import keeps
what is already there).
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zstandard

from offload.core.hashing import encode, sha256_hex
from offload.errors import IntegrityError, InvalidInput, StoreError
from offload.store.backend import Sql
from offload.store.life.archive import export_archive, import_archive
from offload.store.life.archive_read import ImportLimits
from offload.store.schema import hexed
from offload.store.store import Store
from offload.store.write import blocks

Progress = Callable[[int, int], None]
ARCHIVE_NAME = "migrate.offload-archive"
# blocks the verification reads per statement
VERIFY_PAGE = 500
# the target's vectors, a page of entries at a time (by id: any store's ids only grow)
_READ_VECTORS = Sql(
    "SELECT e.id, e.scope, e.content_hash, coalesce(m.name, v.model) AS model, "
    "CAST(v.data AS BLOB) AS data FROM entries e JOIN entry_vectors v ON v.entry_id = e.id "
    "LEFT JOIN vector_models m ON m.id = v.model WHERE e.id > ? ORDER BY e.id LIMIT ?",
    (
        "SELECT e.id, e.scope, e.content_hash, v.model, data AS data FROM entries e "
        "JOIN entry_vectors v ON v.entry_id = e.id WHERE e.id > %s ORDER BY e.id "
        "LIMIT %s"
    ),
)
_READ_BLOCKS = Sql(
    "SELECT lower(hex(hash)) AS hash, codec, CAST(data AS BLOB) AS data FROM blocks "
    "WHERE hash IN (SELECT unhex(value) FROM json_each(?))",
    (
        "SELECT hash, codec, data AS data FROM blocks WHERE hash IN (SELECT "
        "json_array_elements_text(%s::json))"
    ),
)


@dataclass(frozen=True)
class MigrateReport:
    """What a migration did: entries read and added, blocks re-hashed, and failures."""

    exported: int
    added: int
    blocks_checked: int
    bad_blocks: tuple[str, ...]  # digests missing on the target or whose bytes differ
    vectors_checked: int = 0
    bad_vectors: tuple[str, ...] = ()  # content digests whose vector is missing or differs

    @property
    def verified(self) -> bool:
        """True when every block and vector of the source reads back from the target intact."""
        return not self.bad_blocks and not self.bad_vectors


def migrate(
    source: Store,
    target: Store,
    workdir: Path,
    *,
    on_export: Progress | None = None,
    on_import: Progress | None = None,
    on_verify: Progress | None = None,
) -> MigrateReport:
    """Copy ``source`` into ``target`` through an archive in ``workdir``, then verify.

    Raises StoreError when the target does not hold every block intact afterwards (the
    report is in the message); the archive is removed either way.
    """
    archive = workdir / ARCHIVE_NAME
    try:
        exported = export_archive(source, archive, progress=on_export)
        # the archive was written just now by this process: its lossy entries without an
        # original are the source's own, and a store of any size moves whole
        added = import_archive(
            target,
            archive,
            progress=on_import,
            accept_unverified=True,
            limits=ImportLimits.unbounded(),
        )
        checked, bad = verify_blocks(target, archive_digests(archive), progress=on_verify)
        vectors_checked, bad_vectors = verify_vectors(target, archive_vectors(archive))
    finally:
        archive.unlink(missing_ok=True)
    report = MigrateReport(
        exported, added, checked, tuple(bad), vectors_checked, tuple(bad_vectors)
    )
    if not report.verified:
        what = f"{len(bad)} of {checked} blocks" if bad else ""
        if bad_vectors:
            what += (" and " if what else "") + f"{len(bad_vectors)} of {vectors_checked} vectors"
        shown = ", ".join(d[:16] for d in [*bad, *bad_vectors][:5])
        raise StoreError(
            f"migration copied {added} entries but {what} did not read back intact from the "
            f"target ({shown}); the source is unchanged, run it again"
        )
    return report


def archive_vectors(path: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """(scope, content digest) -> (model, sha256 of the packed vector) of every entry an
    archive carries a vector for."""
    found: dict[tuple[str, str], tuple[str, str]] = {}
    for record in _records(path):
        vector = record.get("vector")
        if record.get("type") != "entry" or not isinstance(vector, dict):
            continue
        data = base64.b64decode(str(vector["data"]))
        key = (str(record["scope"]), str(record["content_hash"]))
        found[key] = (str(vector["model"]), sha256_hex(data))
    return found


def verify_vectors(
    store: Store, expected: dict[tuple[str, str], tuple[str, str]]
) -> tuple[int, list[str]]:
    """Compare the vectors ``store`` holds with ``expected`` (:func:`archive_vectors`);
    (checked, content digests whose vector is missing or differs on ``store``)."""
    held: dict[tuple[str, str], tuple[str, str]] = {}
    last = 0
    # a team store may hold far more than the source: only the expected keys are kept
    while expected and (rows := store.conn.execute(_READ_VECTORS, (last, VERIFY_PAGE)).fetchall()):
        for r in rows:
            key = (str(r["scope"]), hexed(r["content_hash"]))
            if key in expected:
                held[key] = (str(r["model"]), sha256_hex(bytes(r["data"])))
        last = int(rows[-1]["id"])
    bad = [key[1] for key, want in expected.items() if held.get(key) != want]
    return len(expected), bad


def archive_digests(path: Path) -> list[str]:
    """Every block digest an archive's entries name (bodies and originals), once each."""
    seen: dict[str, None] = {}
    for record in _records(path):
        if record.get("type") != "entry":
            continue
        seen.setdefault(str(record["block_hash"]))
        if "original" in record:
            seen.setdefault(str(record["content_hash"]))
    return list(seen)


def verify_blocks(
    store: Store, digests: list[str], *, progress: Progress | None = None
) -> tuple[int, list[str]]:
    """Read each block from ``store`` and re-hash it here; (checked, digests that failed).

    Blocks are read :data:`VERIFY_PAGE` at a time (one statement each: a 100k-entry
    store's verification was one round trip per block)."""
    bad: list[str] = []
    conn = store.conn
    for start in range(0, len(digests), VERIFY_PAGE):
        page = digests[start : start + VERIFY_PAGE]
        found = {
            str(r["hash"]): r for r in conn.execute(_READ_BLOCKS, (json.dumps(page),)).fetchall()
        }
        bad.extend(d for d in page if d not in found or not _intact(d, found[d]))
        if progress is not None:
            progress(start + len(page), len(digests))
    return len(digests), bad


def _intact(digest: str, row: Any) -> bool:
    try:  # unpack checks the stored bytes against the digest; the text is re-hashed too
        text = blocks.unpack(digest, str(row["codec"]), bytes(row["data"]))
    except (IntegrityError, InvalidInput):
        return False
    return sha256_hex(encode(text)) == digest


def _records(path: Path) -> Iterator[dict[str, object]]:
    try:
        with path.open("rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as zr:
            for line in io.TextIOWrapper(zr, encoding="utf-8"):
                record = json.loads(line)
                if isinstance(record, dict):
                    yield record
    except (OSError, zstandard.ZstdError, json.JSONDecodeError) as exc:
        raise StoreError(f"cannot read back the migration archive {path}: {exc}") from exc


__all__ = [
    "MigrateReport",
    "archive_digests",
    "archive_vectors",
    "migrate",
    "verify_blocks",
    "verify_vectors",
]
