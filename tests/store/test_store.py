"""Blocks, entries, dedup, references, lifecycle of the store."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offload.core.tokens import EstimateCounter
from offload.errors import (
    AmbiguousReference,
    EncodingError,
    FenceError,
    Gone,
    IntegrityError,
    InvalidInput,
    NotFound,
    OtherScope,
    StoreError,
    WrongType,
)
from offload.store import totals
from offload.store.backend import Sql
from offload.store.models import Filters
from offload.store.search import query
from offload.store.store import Store
from offload.store.write.puts import PutOptions

texts = st.one_of(
    st.text(),
    st.lists(st.sampled_from(["a", "\r\n", "\n", "\r", "\x00", "é", "🎉", " "])).map("".join),
    st.builds(lambda n, c: c * n, st.integers(0, 20000), st.sampled_from(["x", "\x00", "ü"])),
)


@pytest.mark.slow
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=texts)
def test_any_text_round_trips_byte_exact(store: Store, text: str) -> None:
    entry = store.put(text).entry
    assert store.body(entry) == text
    assert store.body(store.resolve(entry.full_ref)) == text
    assert entry.size == len(text.encode("utf-8"))


def test_a_lone_surrogate_is_refused_and_nothing_is_stored(store: Store) -> None:
    with pytest.raises(EncodingError, match="surrogate"):
        store.put("bad \udc80 text")
    assert store.count() == 0


def test_a_salience_outside_zero_to_one_is_refused(store: Store) -> None:
    with pytest.raises(InvalidInput, match="salience"):
        store.put("x", salience=1.5)
    assert store.count() == 0


def test_offloading_the_same_content_again_returns_the_existing_entry(store: Store) -> None:
    first = store.put("same body", topic="first")
    second = store.put("same body", topic="second")
    assert first.created and not second.created
    assert second.entry.id == first.entry.id
    assert second.entry.topic == "first"
    assert store.count() == 1


def test_the_same_content_in_two_scopes_shares_one_block(store: Store) -> None:
    a = store.put("shared body " * 50, scope="a").entry
    b = store.put("shared body " * 50, scope="b").entry
    assert a.id != b.id and a.block_hash == b.block_hash
    assert store.stats()["blocks"] == 1
    store.forget(f"id:{a.id}")
    assert store.body(store.get(b.id)) == "shared body " * 50
    store.forget(f"id:{b.id}")
    assert store.stats()["blocks"] == 0


def test_a_block_is_compressed_on_disk(store: Store) -> None:
    text = "\n".join(
        f'{{"id": {i}, "status": "ok", "path": "/src/mod{i % 9}.py"}}' for i in range(3000)
    )
    store.put(text)
    s = store.stats()
    assert s["stored_bytes"] < 0.3 * s["raw_bytes"]


def test_a_corrupted_block_raises_instead_of_returning_bad_text(store: Store) -> None:
    entry = store.put("precious content " * 100).entry
    store.conn.execute(
        Sql("UPDATE blocks SET codec = 'raw', data = ? WHERE id = ?"),
        (b"tampered", store.block_id(entry.block_hash)),
    )
    with pytest.raises(IntegrityError, match="doctor"):
        store.body(entry)


def test_every_reference_form_resolves_to_the_same_entry(store: Store) -> None:
    e = store.put("resolve me", label="my-label").entry
    for ref in (
        str(e.id),
        f"id:{e.id}",
        f"#{e.id}",
        "my-label",
        e.full_ref,
        e.ref,
        e.content_hash[:8],
        e.content_hash.upper()[:10],
    ):
        assert store.resolve(ref).id == e.id, ref


def test_every_reference_form_answers_with_all_of_the_entrys_labels_sorted(
    store: Store,
) -> None:
    e = store.put("named thrice", label="zeta").entry
    store.label("zeta", "alpha")
    store.label("zeta", "mid-ä")
    bare = store.put("named never", scope="other").entry
    for ref in (f"id:{e.id}", "alpha", e.full_ref, e.content_hash[:10]):
        assert store.resolve(ref).labels == ("alpha", "mid-ä", "zeta"), ref
    assert store.label("alpha", "omega").labels == ("alpha", "mid-ä", "omega", "zeta")
    assert store.resolve(bare.ref).labels == ()
    assert store.put("named never", scope="other").entry.labels == ()


def test_an_ambiguous_prefix_error_names_every_candidate(store: Store) -> None:
    a = store.put("alpha").entry
    b = store.put("beta").entry
    # force two hashes to share an 8-char prefix by editing them (the resolver only reads;
    # SQLite's row keeps its block hash where it then differs: store/schema.py)
    for e in (a, b):
        store.conn.execute(
            Sql(
                "UPDATE entries SET block_own = block_hash, content_hash = unhex(?) WHERE id = ?",
                "UPDATE entries SET content_hash = %s WHERE id = %s",
            ),
            ("abcdef12" + e.content_hash[8:], e.id),
        )
    with pytest.raises(AmbiguousReference, match="ambiguous") as info:
        store.resolve("abcdef12")
    assert len(info.value.candidates) == 2


def test_a_path_like_reference_is_just_not_found(store: Store) -> None:
    store.put("x")
    with pytest.raises(NotFound):
        store.resolve("../../etc/passwd")


def test_a_forgotten_entry_answers_why_it_is_gone(store: Store) -> None:
    e = store.put("to forget", label="doomed").entry
    store.forget("doomed", reason="user asked")
    for ref in ("doomed", str(e.id), e.ref):
        with pytest.raises(Gone, match="user asked"):
            store.resolve(ref)
    assert store.stats()["blocks"] == 0


def test_an_expired_entry_answers_how_to_regenerate_it(tmp_path: Path) -> None:
    now = [1000.0]
    with Store(tmp_path / "s.db", counter=EstimateCounter(), clock=lambda: now[0]) as store:
        e = store.put("short lived", expires=1010.0, regenerate="re-run `make docs`").entry
        assert store.resolve(e.ref).id == e.id
        now[0] = 1011.0
        with pytest.raises(Gone, match=r"expired.*make docs"):
            store.resolve(e.ref)
        assert store.count() == 0


def test_checkout_issues_a_nonce_that_checkin_requires(store: Store) -> None:
    e = store.put("body").entry
    co = store.checkout(e.ref)
    assert co.entry.status == "hot" and len(co.nonce) >= 16
    with pytest.raises(FenceError):
        store.checkin(e.ref, "0" * 24)
    assert store.resolve(e.ref).status == "hot"
    assert store.checkin(e.ref, co.nonce).status == "cold"
    with pytest.raises(InvalidInput, match="not checked out"):
        store.checkin(e.ref, co.nonce)


def test_checking_out_again_soon_after_checkin_warns_of_churn(store: Store) -> None:
    e = store.put("body").entry
    co = store.checkout(e.ref)
    store.checkin(e.ref, co.nonce)
    assert "again" in store.checkout(e.ref).churn


def test_a_pin_survives_checkout_checkin_restart_and_reap(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path, counter=EstimateCounter()) as store:
        e = store.put("keep me", salience=0.1).entry
        store.pin(e.ref)
        co = store.checkout(e.ref)
        store.checkin(e.ref, co.nonce)
        assert store.resolve(e.ref).pinned
    with Store(path, counter=EstimateCounter()) as store:
        assert store.resolve(e.ref).pinned
        assert store.resolve(e.ref).salience == 1.0
        assert store.reap(older_than_s=0, max_salience=1.0, status=None) == []
        assert store.resolve(e.ref).pinned


def test_reap_dry_run_lists_without_forgetting(store: Store) -> None:
    store.put("old low", salience=0.1)
    store.put("high", salience=0.9)
    victims = store.reap(older_than_s=0, max_salience=0.5, dry_run=True)
    assert [v.topic for v in victims] == [""] and store.count() == 2
    assert len(store.reap(older_than_s=0, max_salience=0.5)) == 1
    assert store.count() == 1


def test_entries_left_hot_by_a_dead_process_are_reset(store: Store) -> None:
    e = store.put("body").entry
    store.checkout(e.ref)
    store.conn.execute(Sql("UPDATE entries SET owner_pid = 999999999"))
    assert store.reset_stale_hot() == 1
    assert store.resolve(e.ref).status == "cold"


def test_a_checkout_held_on_another_machine_is_not_reset_here(store: Store) -> None:
    e = store.put("body").entry
    co = store.checkout(e.ref)
    store.conn.execute(Sql("UPDATE entries SET owner_pid = 999999999, owner_host = 'elsewhere'"))
    assert store.reset_stale_hot() == 0
    assert store.resolve(e.ref).status == "hot"
    assert store.checkin(e.ref, co.nonce).status == "cold"


def test_listing_puts_pinned_then_salient_first_and_filters(store: Store) -> None:
    store.put("a", salience=0.2, kind="log")
    store.put("b", salience=0.9, kind="code")
    store.put("c", salience=0.5, kind="code", pinned=False, source="fs__read:1")
    pinned = store.put("d", salience=0.1).entry
    store.pin(pinned.ref)
    assert [e.id for e in store.entries()][:2] == [pinned.id, 2]
    assert [e.kind for e in store.entries(Filters(kinds=("code",)))] == ["code", "code"]
    assert [e.source for e in store.entries(Filters(source_prefix="fs__"))] == ["fs__read:1"]
    assert store.count(Filters(min_salience=0.5)) == 3


_RANK_MIGRATION = {
    "sqlite": "m_entry_rank_indexes_ascending",
    "postgresql": "pg_entry_rank_indexes_ascending",
}
_DESCENDING = (
    "DROP INDEX entries_rank",
    "DROP INDEX entries_scope_rank",
    "CREATE INDEX entries_rank ON entries(pinned DESC, salience DESC, accessed DESC, id DESC)",
    "CREATE INDEX entries_scope_rank "
    "ON entries(scope, pinned DESC, salience DESC, accessed DESC, id DESC)",
)


def _rank_index_columns(store: Store) -> list[str]:
    """The listing indexes' definitions, as the backend describes them."""
    rows = store.conn.execute(
        Sql(
            "SELECT sql FROM sqlite_schema WHERE name IN ('entries_rank', 'entries_scope_rank')",
            "SELECT indexdef FROM pg_indexes "
            "WHERE indexname IN ('entries_rank', 'entries_scope_rank')",
        )
    ).fetchall()
    return [str(r[0]) for r in rows]


def test_a_store_with_newest_first_listing_indexes_gets_ascending_ones_listing_alike(
    store_location: Path | str, store_backend: str
) -> None:
    clock = iter(range(1_000, 2_000))
    with Store(store_location, counter=EstimateCounter(), clock=lambda: float(next(clock))) as s:
        for i in range(12):
            s.put(f"entry {i}", salience=(i % 3) / 2, scope="a" if i % 2 else "b")
        s.touch(3)
        s.pin("id:5")
        want = [e.id for e in s.entries()], [e.id for e in s.entries(Filters(scope="a"))]
        for statement in _DESCENDING:  # as stores were made before
            s.conn.execute(Sql(statement))
        s.conn.execute(
            Sql("DELETE FROM _migrations WHERE name = ?"), (_RANK_MIGRATION[store_backend],)
        )
        assert all("DESC" in d for d in _rank_index_columns(s))
    with Store(store_location, counter=EstimateCounter()) as s:
        defs = _rank_index_columns(s)
        assert len(defs) == 2 and not any("DESC" in d for d in defs)
        assert ([e.id for e in s.entries()], [e.id for e in s.entries(Filters(scope="a"))]) == want
        # pinned, then the most salient, the one read last first, then the newest
        assert want[0][:4] == [5, 3, 12, 9]


@pytest.mark.sqlite_only
def test_the_listing_reads_its_ascending_index_backwards_without_sorting(
    store_location: Path | str,
) -> None:
    with Store(store_location, counter=EstimateCounter()) as s:
        for f in (Filters(), Filters(scope="a")):
            where, params = query.filter_sql(f, 0.0)
            plan = s.conn.execute(
                Sql(
                    f"EXPLAIN QUERY PLAN SELECT e.id FROM entries e WHERE {where} ORDER BY "
                    "e.pinned DESC, e.salience DESC, e.accessed DESC, e.id DESC LIMIT 5"
                ),
                params,
            ).fetchall()
            steps = " / ".join(str(r[3]) for r in plan)
            assert "entries_" in steps and "rank" in steps and "TEMP B-TREE" not in steps


def test_run_numbers_are_never_reused_across_restarts(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path, counter=EstimateCounter()) as s:
        assert [s.next_number("fs__read"), s.next_number("fs__read")] == [1, 2]
    with Store(path, counter=EstimateCounter()) as s:
        assert s.next_number("fs__read") == 3


def test_a_counter_set_past_its_bound_outside_offload_numbers_nothing_twice(
    tmp_path: Path,
) -> None:
    # SQLite's value + 1 past 2^63 - 1 becomes a float that + 1 no longer moves: the same
    # number again, so two run labels would have named two responses alike
    path = tmp_path / "s.db"
    with Store(path, counter=EstimateCounter()) as s:
        s.next_number("fs__read")
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE counters SET value = ? WHERE name = 'fs__read'", (2**63 - 1,))
    raw.close()
    with Store(path, counter=EstimateCounter()) as s:
        for _ in range(2):
            with pytest.raises(StoreError, match="fs__read"):
                s.next_number("fs__read")
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT value FROM counters").fetchone()[0] == 2**63 - 1
    raw.close()


def test_state_round_trips_json(store: Store) -> None:
    store.put_state("proxy", "s1", {"frontier": 12, "stubs": ["a"]})
    assert store.get_state("proxy", "s1") == {"frontier": 12, "stubs": ["a"]}
    assert store.get_state("proxy", "nope") is None
    assert dict(store.state_items("proxy")) == {"s1": {"frontier": 12, "stubs": ["a"]}}


def test_a_failed_write_leaves_nothing_half_written(store: Store) -> None:
    store.put("first")
    # a label that collides with the id syntax is refused before anything is written
    with pytest.raises(InvalidInput):
        store.put("second", label="123")
    assert store.count() == 1 and store.stats()["blocks"] == 1


def _raw(location: Path | str, sql: str) -> list[tuple[object, ...]]:
    """Run one statement on a store's database without opening it as a Store (committed)."""
    if isinstance(location, Path):
        conn = sqlite3.connect(location)
        try:
            with conn:
                return list(conn.execute(sql).fetchall())
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(location) as raw:
        cur = raw.execute(sql)
        return list(cur.fetchall()) if cur.description else []


def test_a_store_a_newer_offload_migrated_is_refused_saying_so_and_left_as_it_was(
    store_location: Path | str,
) -> None:
    # an older offload would run its own pending migrations, then misread what the newer
    # ones changed (vectors in 4 bits read as 8: every search failed with a traceback)
    with Store(store_location, counter=EstimateCounter()) as s:
        ref = s.put("kept as the newer offload left it", label="kept").entry.ref
        s.conn.execute(Sql("INSERT INTO _migrations VALUES (?, ?)"), ("m_from_the_future", 0.0))
    names = "SELECT name FROM _migrations ORDER BY name"
    recorded = _raw(store_location, names)
    with pytest.raises(StoreError, match=r"upgraded by a newer offload \(.*m_from_the_future"):
        Store(store_location, counter=EstimateCounter())
    assert _raw(store_location, names) == recorded
    _raw(store_location, "DELETE FROM _migrations WHERE name = 'm_from_the_future'")
    with Store(store_location, counter=EstimateCounter()) as s:  # as the newer offload would
        assert s.read(ref) == "kept as the newer offload left it"


@pytest.mark.sqlite_only
def test_the_schema_records_its_migrations(store: Store) -> None:
    names = [r[0] for r in store.conn.execute(Sql("SELECT name FROM _migrations"))]
    assert names and names[0] == "m001_initial"
    assert (
        store.conn.execute(Sql("PRAGMA journal_mode", "SELECT 'ok'", noop=True)).fetchone()[0]
        == "wal"
    )


def test_a_second_open_of_the_same_file_sees_committed_writes(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    a = Store(path, counter=EstimateCounter())
    b = Store(path, counter=EstimateCounter())
    e = a.put("visible across connections").entry
    assert b.body(b.resolve(e.ref)) == "visible across connections"
    a.close()
    b.close()


def test_timestamps_are_recorded(store: Store) -> None:
    before = time.time()
    e = store.put("t").entry
    assert before - 1 <= e.created <= time.time() + 1


def test_offloading_time_limited_content_again_renews_its_expiry(tmp_path: Path) -> None:
    now = [1000.0]
    with Store(tmp_path / "s.db", counter=EstimateCounter(), clock=lambda: now[0]) as store:
        e = store.put("section body", expires=1010.0).entry
        now[0] = 1005.0
        assert store.put("section body", expires=1015.0).entry.expires == 1015.0
        assert store.put("section body", expires=1012.0).entry.expires == 1015.0
        now[0] = 1011.0
        assert store.resolve(e.ref).id == e.id


def _scanned_peek(store: Store, scope: str | None) -> dict[str, object]:
    rows = store.entries(Filters(scope=scope), limit=10_000)
    kinds: dict[str, dict[str, int]] = {}
    for e in rows:
        k = kinds.setdefault(e.kind, {"entries": 0, "tokens": 0})
        k["entries"] += 1
        k["tokens"] += e.tokens
    hot = sum(e.status == "hot" for e in rows)
    return {
        "entries": len(rows),
        "cold": len(rows) - hot,
        "hot": hot,
        "pinned": sum(e.pinned for e in rows),
        "tokens": sum(e.tokens for e in rows),
        "kinds": kinds,
    }


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["put", "pin", "unpin", "checkout", "forget"]),
            st.integers(0, 7),
            st.sampled_from(["a", "b"]),
            st.sampled_from(["log", "code"]),
        ),
        max_size=25,
    )
)
def test_peek_counts_always_match_a_full_scan(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, str, str]]
) -> None:
    path = tmp_path_factory.mktemp("peek") / "s.db"
    with Store(path, counter=EstimateCounter()) as store:
        for op, n, scope, kind in ops:
            text = f"body {n} " * (n + 1)
            try:
                if op == "put":
                    store.put(text, scope=scope, kind=kind)
                elif op == "pin":
                    store.pin(text_ref(text), scope)
                elif op == "unpin":
                    store.unpin(text_ref(text), scope)
                elif op == "checkout":
                    store.checkout(text_ref(text), scope=scope)
                else:
                    store.forget(text_ref(text), scope=scope)
            except (NotFound, Gone, OtherScope):
                pass
        for which in ("a", "b", None):
            assert store.peek(which) == _scanned_peek(store, which)


def text_ref(text: str) -> str:
    from offload.core.hashing import ctx_ref, text_hash

    return ctx_ref(text_hash(text))


def test_content_first_kept_as_a_lossy_puts_original_is_searchable_once_put_plainly(
    store: Store,
) -> None:
    original = "the quokka migration plan, step by step\n" * 20
    store.put(original, body="a plan (lossy)", scope="a")  # the original: kept, not indexed
    plain = store.put(original, scope="b").entry
    hits = store.search("quokka", Filters(scope="b"))
    assert [h.entry.id for h in hits] == [plain.id]


def test_putting_again_content_whose_entry_expired_stores_it_anew(tmp_path: Path) -> None:
    now = [1000.0]
    with Store(tmp_path / "s.db", counter=EstimateCounter(), clock=lambda: now[0]) as store:
        store.put("short lived", expires=1010.0)
        now[0] = 1011.0
        again = store.put("short lived")
        assert again.created
        assert store.body(store.resolve(again.entry.ref)) == "short lived"


def test_a_live_twin_in_another_scope_answers_when_one_scope_expired(tmp_path: Path) -> None:
    now = [1000.0]
    with Store(tmp_path / "s.db", counter=EstimateCounter(), clock=lambda: now[0]) as store:
        store.put("shared body", scope="a", expires=1010.0)
        live = store.put("shared body", scope="b").entry
        now[0] = 1011.0
        assert store.resolve(live.ref).id == live.id  # the first resolve, with no scope
        with pytest.raises(OtherScope):  # scope a's own entry has expired; b's is b's
            store.resolve(live.ref, "a")
        assert store.body(store.resolve(live.ref, "b")) == "shared body"
        assert store.count() == 1  # scope a's entry was archived on the way


def test_checkin_of_an_entry_removed_after_it_was_resolved_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.db"
    with Store(path, counter=EstimateCounter()) as store, Store(path) as other:
        co = store.checkout(store.put("checked out body").entry.ref, churn_window_s=0)
        resolve = store.resolve

        def resolve_then_lose(ref: str, scope: str | None = None) -> object:
            entry = resolve(ref, scope)
            other.forget(entry.ref, reason="forgotten by another process")
            return entry

        monkeypatch.setattr(store, "resolve", resolve_then_lose)
        with pytest.raises(Gone, match="forgotten by another process"):
            store.checkin(co.entry.ref, co.nonce)


def test_a_body_indexed_from_a_later_line_is_found_only_there_and_read_whole(
    store: Store,
) -> None:
    body = "earlier words: zebrafinch\nsecond line\nnew words: kingfisher\nlast line\n"
    e = store.put(body, index_from_line=3).entry
    assert store.search("zebrafinch") == []  # held by the lines before: another entry's
    hit = store.search("kingfisher")[0]
    assert hit.entry.id == e.id
    assert (hit.start_line, hit.match_line) == (3, 3)  # the body's own line numbers
    assert hit.text.startswith("new words: kingfisher")
    assert store.body(e) == body  # reading is not affected


def test_a_reindex_keeps_a_body_indexed_from_a_later_line(store: Store) -> None:
    from offload.store.life.maintenance import reindex

    e = store.put("old: zebrafinch\nnew: kingfisher\n", index_from_line=2).entry
    reindex(store)
    assert store.search("zebrafinch") == []
    assert [h.entry.id for h in store.search("kingfisher")] == [e.id]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2"])
def test_a_put_indexed_from_no_line_is_refused_and_stores_nothing(
    store: Store, bad: object
) -> None:
    with pytest.raises(InvalidInput, match="index_from_line"):
        store.put("some text", index_from_line=bad)  # type: ignore[arg-type]
    assert store.count() == 0


def test_a_new_entry_a_put_returns_is_the_entry_a_read_gives_back(store: Store) -> None:
    made = [
        store.put("plain body\nof two lines\n"),
        store.put(
            "pinned body", kind="note", topic="Tópico", tags=["b", "a"], summary="sum",
            salience=0.3, pinned=True, source="src/x.py", scope="proj", label="lbl:1",
            expires=time.time() + 3600, regenerate="run it again",
        ),
        store.put("lossy", body="lossy, compressed", keep_original=True, salience=0.7),
        store.put("", scope="empty"),
    ]  # fmt: skip
    for result in made:
        assert result.created
        assert result.entry == store.resolve(str(result.entry.id), result.entry.scope)


def _doc(label: str, kind: str) -> PutOptions:
    return PutOptions(kind, "", (), "", 0.5, False, label, "", label, None)


def test_put_each_stores_every_content_with_its_own_options_or_none_of_them(
    store: Store,
) -> None:
    results = store.put_each(
        [("alpha document", _doc("tool:a", "tool-definition")), ("beta", _doc("doc:b", "notes"))]
    )
    assert [r.created for r in results] == [True, True]
    assert store.read("tool:a") == "alpha document" and store.read("doc:b") == "beta"
    assert (store.resolve("tool:a").kind, store.resolve("doc:b").kind) == (
        "tool-definition",
        "notes",
    )
    with pytest.raises(InvalidInput):
        store.put_each([("gamma", _doc("doc:c", "notes")), ("\ud800", _doc("doc:d", "notes"))])
    assert store.count() == 2  # the valid one was not stored either
    again = store.put_each([("alpha document", _doc("tool:a", "tool-definition"))])
    assert not again[0].created and store.count() == 2


# -- a scope is a boundary ------------------------------------------------------------------


def test_a_reference_to_another_scopes_entry_answers_that_it_lives_elsewhere(
    store: Store,
) -> None:
    a = store.put("team a's secret plan", scope="teamA", label="plan").entry
    for ref in (f"#{a.id}", f"id:{a.id}", a.full_ref, a.ref, "plan"):
        with pytest.raises(OtherScope, match=r"another scope than 'teamB'"):
            store.resolve(ref, "teamB")
        with pytest.raises(OtherScope):
            store.read(ref, "teamB")
        assert store.resolve(ref, "teamA").id == a.id
        assert store.resolve(ref).id == a.id  # None: every scope, asked for explicitly


def test_a_content_hash_held_only_by_another_scope_does_not_give_its_text(store: Store) -> None:
    a = store.put("only team a holds this text", scope="teamA").entry
    with pytest.raises(OtherScope) as err:
        store.read(a.full_ref, "teamB")
    assert "only team a holds" not in str(err.value)


def test_a_content_in_both_scopes_answers_with_the_askers_own_entry(store: Store) -> None:
    a = store.put("shared words", scope="teamA").entry
    b = store.put("shared words", scope="teamB").entry
    assert store.resolve(a.full_ref, "teamB").id == b.id
    assert store.resolve(a.full_ref, "teamA").id == a.id
    with pytest.raises(OtherScope):
        store.resolve(f"#{a.id}", "teamB")


def test_no_change_reaches_another_scope_through_a_reference(store: Store) -> None:
    a = store.put("team a's notes", scope="teamA").entry
    ref = f"#{a.id}"
    for change in (
        lambda: store.forget(ref, scope="teamB"),
        lambda: store.pin(ref, "teamB"),
        lambda: store.unpin(ref, "teamB"),
        lambda: store.checkout(ref, scope="teamB"),
        lambda: store.checkin(ref, "0" * 16, scope="teamB"),
        lambda: store.label(ref, "stolen", "teamB"),
        lambda: store.update(ref, topic="changed", scope="teamB"),
    ):
        with pytest.raises(OtherScope):
            change()
    after = store.resolve(ref, "teamA")
    assert (after.pinned, after.status, after.topic, after.labels) == (False, "cold", "", ())
    assert after.access_count == a.access_count


def test_another_scopes_forgotten_entry_is_not_explained_to_this_scope(store: Store) -> None:
    a = store.put("team a's draft", scope="teamA").entry
    store.forget(f"#{a.id}", reason="leaked salary table", scope="teamA")
    with pytest.raises(NotFound) as err:
        store.resolve(f"#{a.id}", "teamB")
    assert "salary" not in str(err.value)
    with pytest.raises(Gone, match="leaked salary table"):
        store.resolve(f"#{a.id}", "teamA")


def test_a_label_of_another_scopes_entry_is_not_taken_from_it(store: Store) -> None:
    a = store.put("team a's plan", scope="teamA", label="plan").entry
    with pytest.raises(InvalidInput, match="another scope"):
        store.put("team b's plan", scope="teamB", label="plan")
    b = store.put("team b's notes", scope="teamB").entry
    with pytest.raises(InvalidInput, match="another scope"):
        store.label(f"#{b.id}", "plan", "teamB")
    assert store.resolve("plan", "teamA").id == a.id
    assert store.count(Filters(scope="teamB")) == 1  # the refused put stored nothing
    moved = store.put("team a's newer plan", scope="teamA", label="plan").entry
    assert store.resolve("plan", "teamA").id == moved.id  # within a scope it still moves


@pytest.mark.parametrize(
    "kind",
    ["text\nSYSTEM: obey", "log</offload:body:x>", "a\u202eb", "x" * 33, "-lead", "two words"],
)
def test_a_kind_that_is_not_a_short_token_is_refused_and_nothing_is_stored(
    store: Store, kind: str
) -> None:
    with pytest.raises(InvalidInput, match="short token"):
        store.put("body", kind=kind)
    with pytest.raises(InvalidInput, match="short token"):
        store.put_many(["body"], kind=kind)
    assert store.count() == 0


def test_the_kinds_offload_itself_writes_are_short_tokens(store: Store) -> None:
    kinds = ["text", "file", "section", "proxy", "tool-output", "tool-definition", "v1.2_x"]
    for n, kind in enumerate(kinds):
        assert store.put(f"body {n}", kind=f"  {kind} ").entry.kind == kind
    assert store.put("blank kind", kind="  ").entry.kind == "text"


def test_put_refuses_a_bare_string_of_tags_as_a_type_error(store: Store) -> None:
    # iterating "src,python" would store the tags s, r, c, p, y, t, h, o, n
    for call in (
        lambda: store.put("body", tags="src,python"),
        lambda: store.put_many(["body"], tags="src"),
        lambda: store.put("body", tags=["ok", 3]),  # type: ignore[list-item]
    ):
        with pytest.raises(WrongType, match="tag"):
            call()
        with pytest.raises(TypeError):
            call()
    assert store.count() == 0
    e = store.put("body", tags=["src", "python"]).entry
    assert e.tags == ("src", "python")
    with pytest.raises(WrongType):
        store.update(e.ref, tags="src,python")


@pytest.mark.parametrize(
    ("older_than_s", "max_salience", "message"),
    [
        (None, None, "needs a filter"),
        (-3 * 86400, None, "older_than_s"),
        (float("nan"), None, "older_than_s"),
        (None, 1.5, "max_salience"),
    ],
)
def test_reap_without_a_filter_or_with_a_bad_one_is_refused_and_forgets_nothing(
    store: Store, older_than_s: float | None, max_salience: float | None, message: str
) -> None:
    store.put("added a moment ago", salience=0.1)
    with pytest.raises(InvalidInput, match=message):
        store.reap(older_than_s=older_than_s, max_salience=max_salience)
    assert store.count() == 1


def test_an_event_time_is_kept_apart_from_when_the_entry_was_stored(store: Store) -> None:
    e = store.put("the trip to Lisbon", event_time=1_683_504_000.0).entry
    again = store.resolve(e.ref)
    assert again.event_time == e.event_time == 1_683_504_000.0
    assert again.created > again.event_time and again.when == 1_683_504_000.0
    plain = store.put("no date given").entry
    assert plain.event_time is None and plain.when == plain.created


def test_put_many_gives_every_content_the_event_time(store: Store) -> None:
    results = store.put_many(["turn one", "turn two"], scope="c", event_time=1_600_000_000)
    assert [store.get(r.entry.id).event_time for r in results] == [1_600_000_000.0] * 2


def test_a_repeat_gives_a_stored_entry_an_event_time_and_never_changes_one(
    store: Store,
) -> None:
    first = store.put("said twice").entry
    store.put("said twice", event_time=100.0)
    store.put("said twice", event_time=200.0)
    assert store.get(first.id).event_time == 100.0


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), True, "2023-05-08", 1e13])
def test_an_event_time_that_is_not_a_time_is_refused_and_nothing_is_stored(
    store: Store, bad: object
) -> None:
    with pytest.raises((InvalidInput, WrongType)):
        store.put("dated wrongly", event_time=bad)  # type: ignore[arg-type]
    assert store.count() == 0


@pytest.mark.sqlite_only
def test_a_store_from_before_event_times_gains_the_column_empty(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with Store(path, counter=EstimateCounter()) as s:
        ref = s.put("stored before event times").entry.ref
        s.conn.execute(Sql.sqlite_only("ALTER TABLE entries DROP COLUMN event_time"))
        s.conn.execute(Sql("DELETE FROM _migrations WHERE name = 'm_entry_event_time'"))
        s.conn.commit()
    with Store(path, counter=EstimateCounter()) as s:
        assert s.resolve(ref).event_time is None
        assert s.put("stored after", event_time=5.0).entry.event_time == 5.0


def test_stats_read_the_block_totals_again_when_the_entries_change_or_the_figures_age(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.put("one body " * 20)
    first = store.stats()
    # behind the store's back: a change no entry count shows
    store.conn.execute(Sql("UPDATE blocks SET size = size + 100"))
    assert store.stats()["raw_bytes"] == first["raw_bytes"]  # not scanned again
    second = store.put("another body " * 20).entry
    assert store.stats()["raw_bytes"] == first["raw_bytes"] + 100 + second.size
    assert store.stats()["blocks"] == 2
    store.conn.execute(Sql("UPDATE blocks SET size = size + 1"))
    monkeypatch.setattr(totals, "STATS_TTL_S", -1.0)  # every reading has aged
    assert store.stats()["raw_bytes"] == first["raw_bytes"] + 102 + second.size
    store.forget(f"id:{second.id}")
    assert store.stats()["blocks"] == 1 and store.stats()["tombstones"] == 1


def test_a_put_whose_label_another_entry_held_says_which(store: Store) -> None:
    first = store.put("the first text\n", label="notes", scope="s")
    assert first.label_moved_from is None
    second = store.put("the second text\n", label="notes", scope="s")
    assert second.label_moved_from == first.entry.id
    again = store.put("the second text\n", label="notes", scope="s")
    assert not again.created and again.label_moved_from is None  # it holds it already
    back = store.put("the first text\n", label="notes", scope="s")
    assert not back.created and back.label_moved_from == second.entry.id
