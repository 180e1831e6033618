"""The lexical engine: any-term BM25 over analysed terms, field weights, neighbours, snippets."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import older_stores
from offload.config import StoreSettings
from offload.core.text import analysis
from offload.core.tokens import EstimateCounter
from offload.store import open_store
from offload.store.backend import Sql
from offload.store.models import Filters
from offload.store.sqlite import db, migrations
from offload.store.store import Store
from offload.store.write import index


def _ids(store: Store, q: str, **kw: object) -> list[int]:
    return [h.entry.id for h in store.search(q, limit=10, **kw)]  # type: ignore[arg-type]


def _filler(store: Store, prefix: str) -> None:
    """Six unrelated entries, so the index statistics are not those of two texts alone."""
    for i in range(6):
        store.put(f"{prefix} {i}")


def test_a_word_after_an_escaped_newline_in_json_is_found(store: Store) -> None:
    e = store.put('{"m":"ok\\nZebrawordx failed"}').entry
    assert _ids(store, "Zebrawordx") == [e.id]
    assert _ids(store, "failed") == [e.id]


def test_a_question_finds_the_entry_sharing_only_some_of_its_words(store: Store) -> None:
    store.put("Melanie said, the kids loved the beach", kind="turn")
    hit = store.put("Caroline said, I went to a LGBTQ support group yesterday", kind="turn").entry
    store.put("Melanie said, painting is my favourite hobby", kind="turn")
    assert _ids(store, "When did Caroline go to the LGBTQ support group?")[0] == hit.id


def test_empty_and_punctuation_only_queries_find_nothing(store: Store) -> None:
    store.put("some text")
    for q in ("", "   ", "?!", "()", '"'):
        assert store.search(q) == []


def test_a_stopword_only_query_matches_without_error(store: Store) -> None:
    e = store.put("to be or not to be").entry
    store.put("completely different words")
    assert _ids(store, "to be or not to be")[0] == e.id


def test_a_rare_word_outranks_a_common_one(store: Store) -> None:
    for i in range(10):
        store.put(f"alpha common entry {i}")
    rare = store.put("zebra appears once").entry
    assert _ids(store, "alpha zebra")[0] == rare.id


def test_metadata_outranks_the_body_for_the_same_word(store: Store) -> None:
    # every surface gives entries a topic; the weights are relative to those
    for i in range(6):
        store.put(f"filler text number {i}", topic=f"filler {i}", kind=f"k{i}")
    body = store.put("notes that mention kubernetes once", topic="notes", kind="a").entry
    topic = store.put("notes about something", topic="kubernetes", kind="b").entry
    assert _ids(store, "kubernetes")[:2] == [topic.id, body.id]


def test_labels_are_searchable(store: Store) -> None:
    e = store.put("some body text")
    store.put("other body text")
    store.label(e.entry.ref, "quarterly-report")
    assert _ids(store, "quarterly report")[0] == e.entry.id


def test_an_exact_identifier_outranks_its_pieces(store: Store) -> None:
    _filler(store, "filler")
    pieces = store.put("first parse the cfg file, then load it").entry
    exact = store.put("call parseCfgFile(path) to load it").entry
    assert _ids(store, "parseCfgFile")[:2] == [exact.id, pieces.id]


def test_the_written_form_outranks_other_inflections_of_its_stem(store: Store) -> None:
    _filler(store, "filler note")
    # the stem four times in a short text, against the exact word once in a longer one
    many = store.put("expected 3, expected 4: the expected value was expected").entry
    exact = store.put("a longer reply where we are expecting the parcel to arrive soon").entry
    assert _ids(store, "expecting")[:2] == [exact.id, many.id]
    assert _ids(store, "expected")[:2] == [many.id, exact.id]
    # the stem still finds every inflection
    assert set(_ids(store, "expect")) == {many.id, exact.id}


def test_a_lookup_ranks_the_word_as_written_above_the_same_word_in_another_case(
    store: Store,
) -> None:
    _filler(store, "filler note")
    # the other case nine times in a short text, against the written case once in a longer one
    loud = store.put("Checking. Checking. Checking, Checking. Checking Checking " * 2).entry
    quiet = store.put("we kept on checking the logs of the build server for a while").entry
    assert _ids(store, "checking")[:2] == [quiet.id, loud.id]
    assert _ids(store, "Checking")[:2] == [loud.id, quiet.id]
    # a question is not a lookup: its words follow its grammar, case included
    assert _ids(store, "who was checking?")[0] == loud.id
    # the scores stay in order whatever the case check did
    scores = [h.score for h in store.search("checking", limit=10)]
    assert scores == sorted(scores, reverse=True)


def test_a_lookup_shows_the_chunk_of_its_entry_that_holds_the_word_as_written(
    store_location: Path | str,
) -> None:
    # small chunks: the entry's best chunk by BM25 holds the word three times in another case
    settings = StoreSettings(chunk_lines=2)
    with Store(store_location, settings, counter=EstimateCounter()) as store:
        store.put("unrelated filler text")
        body = "endpoints and endpoints\nmore endpoints\n" + "padding line\n" * 6
        body += "the Endpoints table lists every host\nand a long tail of other words here\n"
        e = store.put(body).entry
        hit = store.search("Endpoints", limit=1)[0]
        assert hit.entry.id == e.id
        assert "Endpoints" in hit.text
        assert store.search("endpoints", limit=1)[0].text.startswith("endpoints and")


@pytest.mark.parametrize(
    ("query", "body"),
    [
        ("refused", "raise ERR_CONN_REFUSED now"),
        ("err_conn_refused", "raise ERR_CONN_REFUSED now"),
        ("join", "use os.path.join here"),
        ("os.path.join", "use os.path.join here"),
        ("store", "see src/offload/store/search.py"),
        ("src/offload/store/search.py", "see src/offload/store/search.py"),
        ("max_retries", "config maxRetries=3"),
        ("kebab", "the kebab-case-name"),
        ("connection", "connections were dropped"),
    ],
)
def test_identifiers_and_their_pieces_are_found(store: Store, query: str, body: str) -> None:
    store.put("unrelated words only")
    e = store.put(body).entry
    assert _ids(store, query)[0] == e.id, query


@pytest.mark.parametrize(
    ("query", "body"),
    [("strasse", "die Straße"), ("cafe", "un café"), ("CAFÉ", "un cafe"), ("東京", "東京 タワー")],
)
def test_unicode_is_folded_like_the_index(store: Store, query: str, body: str) -> None:
    store.put("unrelated words only")
    e = store.put(body).entry
    assert _ids(store, query)[0] == e.id


def test_words_side_by_side_rank_above_the_same_words_apart(store: Store) -> None:
    _filler(store, "filler")
    apart = store.put("support for the new group was given").entry
    together = store.put("the support group met on tuesday").entry
    assert _ids(store, "support group")[:2] == [together.id, apart.id]


def test_the_turn_after_a_strong_hit_outranks_a_weak_hit(store: Store) -> None:
    turns = [
        "Mel said, what did you do this weekend?",
        "Caroline said, did you see the adoption agency?",
        "Mel said, yes, it was lovely and warm",
        "Caroline said, great",
        "Mel said, my cousin works at some agency, they have long days and lots of meetings",
        "Caroline said, sounds tiring",
    ]
    ids = [r.entry.id for r in store.put_many(turns, kind="turn", scope="chat")]
    store.put_many([f"Mel said, filler {i}" for i in range(6)], kind="turn", scope="chat")
    found = _ids(store, "adoption agency", scope="chat")
    # both neighbours of the strong hit rank above the weak one
    assert found[0] == ids[1] and set(found[1:3]) == {ids[0], ids[2]} and ids[4] in found[3:]


def test_a_neighbour_never_extends_the_list_past_the_matches(store: Store) -> None:
    store.put_many(["one line about canaries", "a line about nothing"], kind="turn")
    assert len(store.search("canaries")) == 1


def test_neighbours_are_of_the_same_kind_scope_and_filters(store: Store) -> None:
    store.put("a note kept before", kind="doc", scope="p")
    hit = store.put("the canary rollout", kind="log", scope="p").entry
    store.put("another scope's line", kind="log", scope="q")
    assert _ids(store, "canary") == [hit.id]
    store.put("next log line", kind="log", scope="p", salience=0.1)
    assert _ids(store, "canary", filters=Filters(min_salience=0.4)) == [hit.id]


def test_snippets_show_the_best_matching_lines_with_their_numbers(store: Store) -> None:
    body = "\n".join(
        ["header line", "nothing", "the deploy failed", "deploy canary failed here", "end"]
    )
    store.put(body)
    (hit,) = store.search("canary deploy failed")
    assert hit.match_line == 4 and hit.snippet == "deploy canary failed here"
    assert [n for n, _ in hit.lines] == [3, 4]


def test_snippets_leave_out_lines_holding_under_half_the_best_lines_terms(store: Store) -> None:
    store.put("\n".join(["deploy notes", "the canary rollout failed at deploy time", "end"]))
    (hit,) = store.search("canary rollout failed deploy")
    assert [n for n, _ in hit.lines] == [2]


def test_the_store_api_opens_puts_searches_reads_and_forgets(tmp_path: Path) -> None:
    with open_store(tmp_path / "m.db", counter=EstimateCounter()) as s:
        ref = s.put("Caroline said, hello there", scope="c").entry.ref
        (r,) = s.put_many(["Mel said, bye"], scope="c")
        assert r.created
        assert s.search("hello", scope="c")[0].entry.ref == ref
        assert s.read(ref) == "Caroline said, hello there"
        s.forget(ref)
        assert s.search("hello", scope="c") == []


def test_put_many_dedups_like_put(store: Store) -> None:
    first = store.put("same text").entry
    results = store.put_many(["same text", "new text", "new text"])
    assert [r.created for r in results] == [False, True, False]
    assert results[0].entry.id == first.id and results[1].entry.id == results[2].entry.id


def _old_store(path: Path) -> None:
    """A store as the previous release wrote it: migrations 1-4, one entry indexed by the
    old unicode61 tables."""
    conn = db.connect(path, busy_timeout_s=5, synchronous="NORMAL")
    old = migrations.MIGRATIONS[:4]  # m001-m004: the schema before the analysed index
    conn.execute(Sql("BEGIN IMMEDIATE"))
    conn.execute(Sql("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied REAL NOT NULL)"))
    for name, fn in old:
        fn(conn)
        conn.execute(Sql("INSERT INTO _migrations VALUES (?, 0)"), (name,))
    text = "old entry about parseCfgFile and the canary\n"
    from offload.core.hashing import sha256_hex

    digest = sha256_hex(text.encode())
    conn.execute(
        Sql(
            "INSERT INTO blocks (id, hash, size, lines, codec, data, created) "
            "VALUES (1, ?, ?, 1, 'raw', ?, 0)",
            "INSERT INTO blocks (id, hash, size, lines, codec, data, created) VALUES (1, %s, %s, 1, 'raw', %s, 0) RETURNING id",
            returns_id=True,
        ),
        (digest, len(text), text.encode()),
    )
    conn.execute(
        Sql(
            "INSERT INTO chunks VALUES (1, 1, 1, 1, 0, ?)",
            "INSERT INTO chunks VALUES (1, 1, 1, 1, 0, %s) RETURNING id",
            returns_id=True,
        ),
        (len(text),),
    )
    conn.execute(Sql("INSERT INTO chunks_fts (rowid, text) VALUES (1, ?)"), (text,))
    conn.execute(
        Sql(
            "INSERT INTO entries (kind, topic, tokens, content_hash, block_hash, created, accessed) "
            "VALUES ('text', 'old topic', 9, ?, ?, 0, 0)",
            "INSERT INTO entries (kind, topic, tokens, content_hash, block_hash, created, accessed) VALUES ('text', 'old topic', 9, %s, %s, 0, 0) RETURNING id",
            returns_id=True,
        ),
        (digest, digest),
    )
    conn.execute(Sql("INSERT INTO meta_fts (rowid, topic) VALUES (1, 'old topic')"))
    conn.execute(Sql("COMMIT"))
    conn.close()


def test_an_old_store_is_reindexed_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_store(path)
    with Store(path, counter=EstimateCounter()) as s:
        assert [h.entry.id for h in s.search("canary")] == [1]
        assert [h.entry.id for h in s.search("parseCfg")] == [1]
        assert [h.entry.id for h in s.search("topic")] == [1]
        s.forget("id:1")
        assert s.search("canary") == []
        tables = {r[0] for r in s.conn.execute(Sql("SELECT name FROM sqlite_master"))}
        assert "chunks_fts" not in tables and "meta_fts" not in tables


def _bodies_indexed_on_open(path: Path) -> int:
    """How many chunk rows the migrations write into search_body when ``path`` is opened."""
    conn = db.connect(path, busy_timeout_s=5, synchronous="NORMAL")
    written: list[str] = []
    conn.set_trace_callback(written.append)
    db.migrate(conn)
    conn.close()
    return sum(1 for sql in written if sql.startswith("INSERT INTO search_body (rowid, terms)"))


def test_an_old_store_is_analysed_once_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_store(path)
    assert _bodies_indexed_on_open(path) == 1  # one chunk, rebuilt once (it was twice)
    with Store(path, counter=EstimateCounter()) as s:
        assert [h.entry.id for h in s.search("canary")] == [1]


def test_a_store_analysed_by_the_first_version_is_rebuilt_by_the_second(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_store(path)
    conn = db.connect(path, busy_timeout_s=5, synchronous="NORMAL")
    with db.write_tx(conn):
        for name, fn in migrations.MIGRATIONS[4:5]:  # m_search_analysed_index as version 1 ran it
            assert name == "m_search_analysed_index"
            fn(conn)
            conn.execute(Sql("INSERT INTO _migrations VALUES (?, 0)"), (name,))
        conn.execute(Sql("DELETE FROM state WHERE namespace = 'search.index'"))  # v1 kept no record
    conn.close()
    assert _bodies_indexed_on_open(path) == 1


@pytest.mark.sqlite_only  # the FTS5 index as an older analysis wrote it
def test_a_store_indexed_by_the_previous_analysis_is_rebuilt_once_on_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v2.db"
    with Store(path, counter=EstimateCounter()) as s:
        exact = s.put("a longer reply where we are expecting the parcel to arrive soon").entry
        s.put("expected 3, expected 4: the expected value was expected")
    conn = db.connect(path, busy_timeout_s=5, synchronous="NORMAL")
    with db.write_tx(conn):
        # the index as analysis version 2 wrote it: stems and identifiers, no written forms
        conn.execute(
            Sql(
                "INSERT INTO search_body (search_body) VALUES ('delete-all')",
                "DELETE FROM search_body",
            )
        )
        for cid, text in _chunk_texts(conn):
            old = " ".join(t for w in analysis.words(text) for t in analysis.stem_terms(w))
            conn.execute(
                Sql(
                    "INSERT INTO search_body (rowid, terms) VALUES (?, ?)",
                    "INSERT INTO search_body (rowid, terms) VALUES (%s, %s::tsvector)",
                ),
                (cid, old),
            )
        conn.execute(Sql("UPDATE state SET value = '2' WHERE namespace = 'search.index'"))
        conn.execute(Sql("DELETE FROM _migrations WHERE name = 'm_search_index_written_forms'"))
        older_stores.hashes_as_hex(conn)
    conn.close()
    assert _bodies_indexed_on_open(path) == 2  # each chunk once
    assert _bodies_indexed_on_open(path) == 0  # and never again
    with Store(path, counter=EstimateCounter()) as s:
        assert s.search("expecting")[0].entry.id == exact.id
        assert index.integrity_ok(s.conn)


def _chunk_texts(conn: sqlite3.Connection) -> list[tuple[int, str]]:
    from offload.store.schema import hexed
    from offload.store.write import blocks

    out = []
    for r in conn.execute(
        Sql(
            "SELECT c.id, c.start, c.end, b.hash, b.codec, CAST(b.data AS BLOB) AS data "
            "FROM chunks c JOIN blocks b ON b.id = c.block_id",
            'SELECT c.id, c.start, c."end", b.hash, b.codec, CAST(b.data AS BLOB) AS data FROM chunks c JOIN blocks b ON b.id = c.block_id',
        )
    ).fetchall():
        text = blocks.unpack(hexed(r["hash"]), r["codec"], bytes(r["data"]))
        out.append((int(r["id"]), text[r["start"] : r["end"]]))
    return out


@pytest.mark.sqlite_only  # FTS5's own integrity check
def test_a_forgotten_entry_leaves_both_indexes(store: Store) -> None:
    e = store.put("findable body words", topic="findable topic").entry
    store.forget(e.ref)
    assert store.search("findable") == []
    integrity = store.conn.execute(
        Sql(
            "INSERT INTO search_body (search_body, rank) VALUES ('integrity-check', 1)",
            "SELECT 1",
            noop=True,
        )
    )
    assert isinstance(integrity, sqlite3.Cursor)


@pytest.mark.sqlite_only  # SQLite's statement trace
def test_a_put_writes_only_the_vocabulary_words_the_store_lacks(store: Store) -> None:
    store.put("the quokka ate zucchini")
    written: list[str] = []
    conn = store.conn
    assert isinstance(conn, sqlite3.Connection)
    conn.set_trace_callback(written.append)
    store.put("zucchini for the wombat")
    conn.set_trace_callback(None)
    inserted = [s for s in written if s.startswith("INSERT OR IGNORE INTO terms")]
    assert len(inserted) == 2 and any("'wombat'" in s for s in inserted)  # "for" and "wombat"
    assert [h.entry.id for h in store.search("wombats")] == [2]  # still a known word
    assert store.search("wombatt") and store.search("zuchini")  # typos reach both bodies


def test_a_topic_and_summary_made_from_the_body_rank_as_if_absent(store: Store) -> None:
    from offload.core.text.gist import gist

    turns = [
        "Caroline said, I went to a LGBTQ support group yesterday and it was so powerful.",
        "Melanie said, Wow, that's cool! What happened at the support group?",
        "Caroline said, The transgender stories were so inspiring!",
        "Melanie said, I took the kids to the beach last weekend.",
        "Caroline said, I am painting a sunrise for the support group.",
    ]
    for t in turns:
        store.put(t, scope="plain")
        store.put(t, scope="derived", topic=t.splitlines()[0][:80], summary=gist(t))

    def order(scope: str) -> list[str]:
        hits = store.search("support group painting", scope=scope, limit=5)
        return [store.read(h.entry.ref) for h in hits]

    assert order("derived") == order("plain")
