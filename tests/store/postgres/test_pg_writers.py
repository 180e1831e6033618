"""Puts on a PostgreSQL team store run beside each other (each locks only its own keys:
the content in its scope, its blocks, its label) and still lose, duplicate or mix up
nothing: dedup, one block per content, labels on one entry with searchable metadata that
matches, per-scope counts, and the semantic matrix of a reader that saw ids commit out of
order."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from offload.core.text import analysis
from offload.core.tokens import EstimateCounter
from offload.llm.embedding import StaticEmbedder
from offload.store.backend import Sql
from offload.store.life.maintenance import doctor
from offload.store.postgres.pgconn import WRITE_LOCK
from offload.store.store import Store
from offload.store.write import vectors
from pgserver import PgServer
from realparts import child_env, release_together, wait_until

T = TypeVar("T")
WRITERS = 5
PUTS = 40

# One writer: waits for "go", then puts its own texts, texts every writer puts (one
# entry), one body in its own scope (one block for all), and moves contested labels;
# prints each put once put() returned.
WRITER = textwrap.dedent(
    """
    import json, sys
    from offload.core.tokens import EstimateCounter
    from offload.store.store import Store

    url, w, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    store = Store(url, counter=EstimateCounter())
    store.count()
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(n):
        puts = [(f"writer {w} item {i}\\n" * 3, "team", f"hot-{i % 4}" if i % 3 == 0 else None)]
        if i % 4 == 0:
            puts.append((f"shared item {i}\\n" * 5, "team", None))
        if i % 5 == 0:
            puts.append((f"common body {i}\\n" * 4, f"own-{w}", None))
        for text, scope, label in puts:
            r = store.put(text, scope=scope, label=label)
            print(json.dumps({"ref": r.entry.ref, "id": r.entry.id, "text": text,
                              "scope": scope, "label": label}), flush=True)
    store.close()
    """
)


def _start(url: str, w: int, tmp: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, url, str(w), str(PUTS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(tmp / f"home-{w}"),
    )


@pytest.mark.slow
def test_writer_processes_at_once_lose_duplicate_and_mix_up_nothing(
    pg_database: str, tmp_path: Path
) -> None:
    Store(pg_database, counter=EstimateCounter()).close()  # migrated before they start
    procs = [_start(pg_database, w, tmp_path) for w in range(WRITERS)]
    acks: list[dict[str, object]] = []
    try:
        for out in release_together(procs, timeout=600):
            acks.extend(json.loads(line) for line in out.splitlines())
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    distinct = {(a["text"], a["scope"]) for a in acks}
    with Store(pg_database, counter=EstimateCounter()) as store:
        assert store.count() == len(distinct)  # nothing lost, nothing stored twice
        for a in acks:
            assert store.read(str(a["ref"]), str(a["scope"])) == a["text"]
        ids: dict[tuple[object, object], set[object]] = {}
        for a in acks:
            ids.setdefault((a["text"], a["scope"]), set()).add(a["id"])
        assert all(len(v) == 1 for v in ids.values())  # a repeat is the first entry
        _check_labels(store, acks)
        _check_rows(store)
        assert store.peek("team")["entries"] == len({t for t, s in distinct if s == "team"})
        assert doctor(store).clean


def _check_labels(store: Store, acks: list[dict[str, object]]) -> None:
    """Each label names one entry, one it was put with; every entry's searchable labels
    are exactly the labels it holds."""
    for label in {a["label"] for a in acks if a["label"]}:
        entry = store.resolve(str(label), "team")
        assert entry.labels == (label,) or label in entry.labels
        assert store.body(entry) in {a["text"] for a in acks if a["label"] == label}
    held: dict[int, set[str]] = {}
    for r in store.conn.execute(Sql("SELECT entry_id, label FROM labels")):
        held.setdefault(int(r[0]), set()).add(r[1])
    meta = {
        int(r[0]): r[1] for r in store.conn.execute(Sql("SELECT rowid, labels FROM search_meta"))
    }
    for entry_id in set(held) | set(meta):
        want = set(analysis.index_text(" ".join(sorted(held.get(entry_id, ())))).split())
        assert set(meta.get(entry_id, "").split()) == want, entry_id


def _check_rows(store: Store) -> None:
    """One block per content, indexed once; one entry per content in a scope."""
    conn = store.conn
    assert not conn.execute(
        Sql("SELECT block_id, start FROM chunks GROUP BY block_id, start HAVING count(*) > 1")
    ).fetchall()
    assert not conn.execute(
        Sql("SELECT hash FROM blocks GROUP BY hash HAVING count(*) > 1")
    ).fetchall()
    shared = conn.execute(
        Sql("SELECT count(DISTINCT block_hash), count(*) FROM entries WHERE scope LIKE 'own-%'")
    ).fetchone()
    assert shared[0] * WRITERS == shared[1]  # each common body: one block, WRITERS entries


def _in_thread(fn: Callable[[], T]) -> tuple[threading.Thread, list[T]]:
    out: list[T] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    return t, out


def _waiting(server: PgServer, url: str, event: str) -> int:
    rows = server.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        f"AND wait_event = '{event}' AND datname = '{url.rsplit('/', 1)[1]}'"
    )
    return int(rows[0][0])


def test_a_put_in_flight_holds_back_its_own_content_and_other_writes_but_no_other_put(
    pg_server: PgServer, pg_database: str
) -> None:
    import psycopg

    a = Store(pg_database, counter=EstimateCounter())
    b = Store(pg_database, counter=EstimateCounter())
    anchor = a.put("the entry the contested label names first\n", scope="w").entry
    holder = psycopg.connect(pg_database)  # holds the label's row, uncommitted
    try:
        holder.execute("INSERT INTO labels (label, entry_id) VALUES ('held', %s)", (anchor.id,))
        slow, slow_out = _in_thread(lambda: a.put("put in flight\n", scope="w", label="held"))
        wait_until(lambda: _waiting(pg_server, pg_database, "transactionid") > 0, 60,
                   what="the put waiting inside its transaction")  # fmt: skip
        # a put of other content runs to its commit while the first is in flight
        meanwhile, meanwhile_out = _in_thread(lambda: b.put("other content\n", scope="w"))
        meanwhile.join(timeout=120)
        assert not meanwhile.is_alive(), "a put of other content waited for the one in flight"
        assert meanwhile_out[0].created
        twin, twin_out = _in_thread(lambda: b.put("put in flight\n", scope="w"))
        other, _ = _in_thread(lambda: b.forget(anchor.ref, scope="w"))
        wait_until(lambda: _waiting(pg_server, pg_database, "advisory") >= 2, 60,
                   what="the same content and a forget waiting for the put")  # fmt: skip
    finally:
        holder.rollback()
        holder.close()
    try:
        for t in (slow, twin, other):
            t.join(timeout=120)
            assert not t.is_alive()
        first, again = slow_out[0], twin_out[0]
        assert first.created and not again.created
        assert again.entry.id == first.entry.id
        assert b.resolve("held", "w").id == first.entry.id
        assert b.count() == 2  # the anchor was forgotten after the put committed
    finally:
        a.close()
        b.close()


def test_the_semantic_matrix_sees_a_vector_committed_after_a_larger_id(
    pg_database: str, model: StaticEmbedder
) -> None:
    import psycopg

    with Store(pg_database, counter=EstimateCounter()) as plain:  # no model: no vector
        late = plain.put("an entry whose vector commits late\n", scope="w").entry
    with Store(pg_database, counter=EstimateCounter(), embedder=model) as store:
        store.put("a first entry about harbour cranes\n", scope="w")
        matrix = store.vector_matrix
        assert matrix is not None
        matrix.refresh(store.conn)
        # a writer in flight (as a put: the store lock shared) draws its vector's id and
        # has not committed when the next put draws a larger id and commits
        writer = psycopg.connect(pg_database)
        writer.execute("SELECT pg_advisory_xact_lock_shared(%s)", (WRITE_LOCK,))
        writer.execute(
            "INSERT INTO entry_vectors (entry_id, model, data) VALUES (%s, %s, %s)",
            (late.id, model.model_id, vectors.encode_one(model, "a vector committed late")),
        )
        after = store.put("a later entry about river barges\n", scope="w").entry
        ids, _ = matrix.refresh(store.conn)
        assert after.id in set(ids.tolist()) and late.id not in set(ids.tolist())
        writer.commit()
        writer.close()
        ids, _ = matrix.refresh(store.conn)
        assert late.id in set(ids.tolist())  # read late, though a larger id was read before
