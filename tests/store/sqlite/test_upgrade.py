"""A store the first release wrote, opened by this one after stopping at every later schema.

The store is written here, row by row, with the first release's SQL (its schema is
migrations m001-m004, frozen in store/sqlite/db.py): a body split into chunks, a shared
block, labels, a pin, a tombstone, another scope, saved state and a counter, as that
release's CLI, MCP server, proxy and gateway left them. A user upgrading from any later
release holds such a store migrated part of the way: each case runs the frozen
migrations up to one of them, closes the file, then opens it with the live code, which
must run the rest once and answer every reference with the bytes stored.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import zstandard

from offload.core.hashing import sha256_hex
from offload.core.tokens import EstimateCounter
from offload.errors import Gone
from offload.store.backend import Sql
from offload.store.life import maintenance
from offload.store.sqlite import db, migrations
from offload.store.store import Store

FIRST_RELEASE = 4  # m001-m004
CHUNK_LINES = 60  # the first release's chunk size


@dataclass(frozen=True)
class Old:
    """One entry as the first release stored it."""

    body: str
    scope: str = "/home/u/proj"
    kind: str = "text"
    topic: str = ""
    tags: str = ""  # space-separated, as that release wrote them
    label: str | None = None
    pinned: bool = False
    source: str = ""
    word: str = ""  # a word only this entry holds, to search for


LOG = "".join(f"2026-11-29T10:{i % 60:02d}:00Z worker-{i % 7} INFO batch {i}\n" for i in range(150))
OLD_ENTRIES = (
    Old(
        "# Deploy\n\nrotate the wombat-token monthly\n",
        topic="notes.md",
        tags="docs deploy",
        label="notes",
        source="/home/u/proj/notes.md",
        word="wombat",
    ),
    Old(
        LOG + "ERROR ConnectionResetError: quokka reset by peer\n",
        topic="big.log",
        tags="logs",
        source="/home/u/proj/big.log",
        word="quokka",
    ),
    Old(
        "pinned fact: the key rotates every 90 days (narwhal)\n",
        tags="fact",
        pinned=True,
        word="narwhal",
    ),
    Old("naïve café — 日本語 🦘\r\nno newline at the end, okapi", word="okapi"),
    Old("shared body across scopes: capybara\n", scope="teamB", word="capybara"),
    Old("shared body across scopes: capybara\n", topic="same body, other scope"),
    Old(
        "[tool output] grep ocelot: 3 matches\n" * 40,
        kind="proxy",
        source="proxy:61cdb187",
        word="ocelot",
    ),
    Old(
        "Commit: lemur scheduler tuned\n" * 30,
        kind="tool-output",
        scope="gateway",
        label="git__git_log:1",
        source="git__git_log:1",
        word="lemur",
    ),
)
GONE = Old("this will be forgotten: ibis\n", label="doomed")


def _chunks(body: str) -> list[tuple[int, int, int, int]]:
    """(start_line, end_line, start, end) of each run of CHUNK_LINES lines."""
    lines = body.splitlines(keepends=True)
    out, offset = [], 0
    for first in range(0, max(len(lines), 1), CHUNK_LINES):
        size = sum(len(line) for line in lines[first : first + CHUNK_LINES])
        last = min(first + CHUNK_LINES, len(lines))
        out.append((first + 1, last, offset, offset + size))
        offset += size
    return out


def _put(conn: sqlite3.Connection, old: Old, now: float) -> int:
    digest = sha256_hex(old.body.encode())
    block = conn.execute("SELECT id FROM blocks WHERE hash = ?", (digest,)).fetchone()
    if block is None:
        data = zstandard.ZstdCompressor().compress(old.body.encode())
        lines = old.body.count("\n") + (0 if old.body.endswith("\n") else 1)
        cur = conn.execute(
            "INSERT INTO blocks (hash, size, lines, codec, data, created) "
            "VALUES (?, ?, ?, 'zstd', ?, ?)",
            (digest, len(old.body.encode()), lines, data, now),
        )
        block_id = int(cur.lastrowid or 0)
        for start_line, end_line, start, end in _chunks(old.body):
            cur = conn.execute(
                "INSERT INTO chunks (block_id, start_line, end_line, start, end) "
                "VALUES (?, ?, ?, ?, ?)",
                (block_id, start_line, end_line, start, end),
            )
            conn.execute(
                "INSERT INTO chunks_fts (rowid, text) VALUES (?, ?)",
                (cur.lastrowid, old.body[start:end]),
            )
    cur = conn.execute(
        "INSERT INTO entries (kind, topic, tags, salience, pinned, tokens, content_hash, "
        "block_hash, source, scope, created, accessed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            old.kind,
            old.topic,
            old.tags,
            1.0 if old.pinned else 0.5,
            int(old.pinned),
            max(1, len(old.body) // 4),
            digest,
            digest,
            old.source,
            old.scope,
            now,
            now,
        ),
    )
    entry_id = int(cur.lastrowid or 0)
    conn.execute(
        "INSERT INTO meta_fts (rowid, topic, summary, tags, source) VALUES (?, ?, '', ?, ?)",
        (entry_id, old.topic, old.tags, old.source),
    )
    if old.label:
        conn.execute("INSERT INTO labels VALUES (?, ?)", (old.label, entry_id))
    return entry_id


def _forget(conn: sqlite3.Connection, entry_id: int, old: Old, now: float) -> None:
    """As the first release's forget: the entry goes, its block with its last reference,
    a tombstone keeps its hash, labels and reason."""
    digest = sha256_hex(old.body.encode())
    conn.execute("DELETE FROM meta_fts WHERE rowid = ?", (entry_id,))
    conn.execute("DELETE FROM entries WHERE id = ?", (entry_id,))
    block_id = conn.execute("SELECT id FROM blocks WHERE hash = ?", (digest,)).fetchone()[0]
    for chunk_id, start, end in conn.execute(
        "SELECT id, start, end FROM chunks WHERE block_id = ?", (block_id,)
    ).fetchall():
        text = old.body[start:end]
        conn.execute(
            "INSERT INTO chunks_fts (chunks_fts, rowid, text) VALUES ('delete', ?, ?)",
            (chunk_id, text),
        )
    conn.execute("DELETE FROM chunks WHERE block_id = ?", (block_id,))
    conn.execute("DELETE FROM blocks WHERE id = ?", (block_id,))
    cur = conn.execute(
        "INSERT INTO tombstones (entry_id, content_hash, labels, scope, reason, gone) "
        "VALUES (?, ?, ?, ?, 'superseded by the otter plan', ?)",
        (entry_id, digest, old.label or "", old.scope, now),
    )
    conn.execute("INSERT INTO tombstone_labels VALUES (?, ?)", (old.label, cur.lastrowid))


def first_release_store(path: Path) -> dict[int, Old]:
    """Write a store as the first release left it; its entries by id."""
    conn = sqlite3.connect(path, isolation_level=None)
    now = time.time()
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied REAL NOT NULL)")
    for name, fn in migrations.MIGRATIONS[:FIRST_RELEASE]:
        fn(conn)
        conn.execute("INSERT INTO _migrations VALUES (?, 0)", (name,))
    ids = {_put(conn, old, now): old for old in OLD_ENTRIES}
    _forget(conn, _put(conn, GONE, now), GONE, now)
    conn.execute("INSERT INTO counters VALUES ('gateway-run:git__git_log', 1)")
    conn.execute(
        "INSERT INTO state VALUES ('mcp.snapshot:/home/u/proj', 'before-upgrade', ?, ?)",
        ('{"task": "upgrade offload", "decisions": ["keep the otter plan"]}', now),
    )
    conn.execute("COMMIT")
    conn.close()
    return ids


def migrated_to(path: Path, stop: int) -> None:
    """Run the frozen migrations after the first release's up to ``stop``, one transaction
    each, as releases that knew only those left the file."""
    conn = db.connect(path, busy_timeout_s=5, synchronous="NORMAL")
    for name, fn in migrations.MIGRATIONS[FIRST_RELEASE:stop]:
        with db.write_tx(conn):
            fn(conn)
            conn.execute("INSERT INTO _migrations VALUES (?, ?)", (name, time.time()))
    conn.close()


STOPS = range(FIRST_RELEASE, len(migrations.MIGRATIONS))


@pytest.mark.parametrize("stop", STOPS, ids=[migrations.MIGRATIONS[s - 1][0] for s in STOPS])
def test_a_store_of_every_older_schema_opens_with_every_reference_byte_exact(
    tmp_path: Path, stop: int
) -> None:
    path = tmp_path / "offload.db"
    ids = first_release_store(path)
    migrated_to(path, stop)
    with Store(path, counter=EstimateCounter()) as s:
        for entry_id, old in ids.items():
            entry = s.get(entry_id)
            refs = [f"id:{entry_id}", entry.ref, entry.ref.removeprefix("ctx:sha256:")[:8]]
            for ref in [*refs, *([old.label] if old.label else [])]:
                assert s.body(s.resolve(ref, scope=old.scope)) == old.body, ref
            assert " ".join(entry.tags) == old.tags and entry.pinned == old.pinned
            if old.word:
                assert entry_id in [h.entry.id for h in s.search(old.word)], old.word
        with pytest.raises(Gone, match="superseded by the otter plan"):
            s.resolve("doomed")
        assert s.get_state("mcp.snapshot:/home/u/proj", "before-upgrade")["task"] == (
            "upgrade offload"
        )
        assert maintenance.doctor(s).clean
    with Store(path, counter=EstimateCounter()) as s:  # the migrations ran once
        recorded = [r[0] for r in s.conn.execute(Sql("SELECT name FROM _migrations"))]
        assert sorted(recorded) == sorted(name for name, _ in migrations.MIGRATIONS)
        assert db.migrate(s.conn) == []  # type: ignore[arg-type]
