"""Search benchmarks: recall on LoCoMo conversations and speed at scale, beside plain FTS5.

    python bench/bench_search.py --data /path/to/locomo_dev.json            # recall + speed
    python bench/bench_search.py --data PATH --only recall --split 2        # conversations 1-2 vs 3-5
    python bench/bench_search.py --data PATH --only recall --undated        # no session dates
    python bench/bench_search.py --data PATH --only speed --entries 100000
    python bench/bench_search.py --data PATH --only scoped --speed-dir DIR --queries 200
    python bench/bench_search.py --data PATH --only writes --baseline-src /old/checkout/src

Recall: every turn of a conversation is stored as one entry (``Speaker said, text``) through
the public store API, in its own scope, with its session's date as its event time (one
``put_many`` a session; ``--undated``: none, one call a conversation), as a user with dated
conversations stores them; each question is passed verbatim to ``search`` as a user would. Turn-level evidence recall@k: the share of a question's evidence turns among the
top k hits, averaged over questions (evidence ids that name no turn are skipped; a question
left with none is not counted). The plain FTS5 baseline is measured beside it in the same
run: a porter-tokenized table with one row per turn, the question as an OR of its
non-stopword words, ordered by ``bm25()``.

Speed: ``--entries`` texts built from the conversations' turns (two turns each, seeded), put
through the bulk path, and the same texts in a plain FTS5 table; every question is timed as
a query on both, and on the same store searched the SQL way only (no in-memory index,
store/search/memory/resident.py: each store builds its own on its first search, timed and sized apart
before the queries). Beside the latencies: the build's wall and CPU seconds against the
plain table's, the store's files against the raw text (``disk_x_raw``; the plain table's
too), and the rare-term lookup: a term one text alone holds as the whole query
(``rare_term``, each store and plain FTS5). Scoped: the same store searched under filters (a small scope, a scattered one,
an eighth of the store, its newest fifth, a filter every entry passes) beside the whole
store, each beside plain FTS5 under the same filter (a join on the rows' scopes, or a rowid
range). Writes: the latency of one acknowledged ``put`` on a store already holding
``--write-base`` entries, for a turn, a 4 KB tool output and a 64 KB one; with
``--baseline-src`` the same measurement runs under another checkout's source in a child
process, side by side (``--write-rounds``: rounds on fresh stores, the order alternating).
LoCoMo is CC BY-NC: pass its path, never copy it into the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KS = (1, 5, 10)
_WORD = re.compile(r"[^\W_]+")


@dataclass
class Conversation:
    sample_id: str
    turns: list[tuple[str, str]]  # (dia_id, "Speaker said, text")
    questions: list[tuple[str, int, list[str]]] = field(default_factory=list)
    # each turn's session date (epoch seconds; None where the session has none)
    dates: list[float | None] = field(default_factory=list)


def load(path: Path) -> list[Conversation]:
    """The conversations of a LoCoMo file, turns in order, questions with valid evidence."""
    out = []
    for item in json.loads(path.read_text()):
        conv = item["conversation"]
        turns: list[tuple[str, str]] = []
        dates: list[float | None] = []
        n = 1
        while f"session_{n}" in conv:
            date = parse_time(str(conv.get(f"session_{n}_date_time") or ""))
            for t in conv[f"session_{n}"]:
                turns.append((t["dia_id"], f"{t['speaker']} said, {t['text']}"))
                dates.append(date)
            n += 1
        c = Conversation(str(item["sample_id"]), turns, dates=dates)
        known = {d for d, _ in turns}
        for q in item["qa"]:
            ev = [e for e in q.get("evidence", []) if e in known]
            if ev:
                c.questions.append((q["question"], int(q.get("category", 0)), ev))
        out.append(c)
    return out


def parse_time(text: str) -> float | None:
    from offload.core.text.timeexpr import parse_time as parse

    return parse(text)


def put_sessions(store: Any, c: Conversation, dated: bool) -> list[int]:
    """A conversation's turns through ``put_many``, one call a session, each with its
    session's date as the event time (``dated``; without, one call for all the turns);
    the entry ids in turn order."""
    texts = [text for _, text in c.turns]
    if not dated:
        return [r.entry.id for r in store.put_many(texts, scope=c.sample_id)]
    ids: list[int] = []
    start = 0
    while start < len(texts):
        end = start
        while end < len(texts) and c.dates[end] == c.dates[start]:
            end += 1
        batch = store.put_many(texts[start:end], scope=c.sample_id, event_time=c.dates[start])
        ids.extend(r.entry.id for r in batch)
        start = end
    return ids


def stopword(word: str) -> bool:
    from offload.core.text.analysis import is_stopword

    return is_stopword(word)


def fts_or_query(question: str) -> str:
    """The plain baseline's MATCH: the question's non-stopword words, quoted, ORed."""
    words = [w.lower() for w in _WORD.findall(question)]
    keep = [w for w in words if not stopword(w)] or words
    return " OR ".join('"' + w + '"' for w in dict.fromkeys(keep))


def plain_fts(texts: Iterable[tuple[int, str]], path: str = ":memory:") -> sqlite3.Connection:
    """A plain FTS5 table (porter tokenizer, one row per text)."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(text, tokenize='porter unicode61')")
    conn.executemany("INSERT INTO t (rowid, text) VALUES (?, ?)", texts)
    conn.commit()
    return conn


def plain_search(conn: sqlite3.Connection, question: str, k: int) -> list[int]:
    match = fts_or_query(question)
    if not match:
        return []
    rows = conn.execute(
        "SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT ?", (match, k)
    ).fetchall()
    return [int(r[0]) for r in rows]


def iso_time(t: float | None) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t or 0.0, UTC).isoformat()


def recall_at(found: Sequence[str], evidence: Sequence[str], k: int) -> float:
    top = set(found[:k])
    return sum(1 for e in evidence if e in top) / len(evidence)


# which model the stores embed with: the shipped static one, or offload[tools]'s MiniLM
EMBEDDER = "static"
# the hybrid store's semantic share (None: the default, search.semantic_weight)
SEMANTIC_WEIGHT: float | None = None


def embedder() -> Any:
    """The embedding model (hybrid search; ``--embedder``), or None when not installed:
    as a store configured with ``search.embedding_model`` loads it."""
    from offload.config import MINILM_MODEL, SearchSettings
    from offload.llm.embedding import load_embedder

    if EMBEDDER == "minilm":
        return load_embedder(SearchSettings(embedding_model=MINILM_MODEL))
    return load_embedder(SearchSettings())


def put_via_mcp(
    at: Path | str, texts: Sequence[str], scope: str, dates: Sequence[float | None] = ()
) -> list[int]:
    """Store each text as an agent does: one call of the MCP ``offload`` tool a text, through
    the official SDK's in-memory client, on a server whose scope is ``scope``; the entry
    ids in order (read back by content hash)."""
    import anyio
    from mcp.client.client import Client

    import offload
    from offload.config import load_settings
    from offload.core.hashing import text_hash
    from offload.mcp.context import McpContext
    from offload.mcp.server import build_server

    settings = load_settings(env={})
    store = offload.open_store(at, embedder=embedder())  # as the MCP server opens its store
    ctx = McpContext(settings, store, scope, (Path.cwd(),))

    async def run() -> None:
        async with Client(build_server(ctx)) as client:
            for i, text in enumerate(texts):
                args = {"content": text}
                if i < len(dates) and dates[i] is not None:
                    args["when"] = iso_time(dates[i])
                res = await client.call_tool("offload", args)
                assert not res.is_error, res

    try:
        anyio.run(run)
        return [store.resolve("ctx:sha256:" + text_hash(t), scope).id for t in texts]
    finally:
        store.close()


def bench_recall(
    convs: list[Conversation],
    tmp: Path,
    split: int | None,
    where: str | None = None,
    via: str = "library",
    dated: bool = True,
    store_first: bool = False,
) -> dict[str, Any]:
    """R@k per category for offload (lexical alone, and hybrid when the embedding model is
    installed) and the plain FTS5 baseline (and per half with split). ``where``: the
    store to fill instead of a temporary SQLite file (an empty PostgreSQL database's URL:
    the same questions through that backend). ``via``: how turns are stored: ``library``
    (``put_many``, one call a conversation) or ``mcp`` (the MCP ``offload`` tool, one call a
    turn, as an agent stores them; search is the store's, as MCP ``search`` calls it).
    ``dated``: each turn carries its session's date as its event time (as a user with
    dated conversations stores them); without, none does. Each conversation is asked right
    after it is stored (its scope ranked with the idf of those stored so far), or with
    ``store_first`` once all are (as a store holding many answers)."""
    import offload

    model = embedder()
    at = where or tmp / "recall.db"
    share = {} if SEMANTIC_WEIGHT is None else {"semantic_weight": SEMANTIC_WEIGHT}
    store = offload.open_store(at, embedder=model, **share)
    lexical = offload.open_store(at)  # the same store, searched without a model
    rows: list[dict[str, Any]] = []
    stored: list[dict[int, str]] = []
    for ci, c in enumerate(convs):
        texts = [text for _, text in c.turns]
        if via == "mcp":
            ids = put_via_mcp(at, texts, c.sample_id, c.dates if dated else ())
        else:
            ids = put_sessions(store, c, dated)
        stored.append({i: dia for i, (dia, _) in zip(ids, c.turns, strict=True)})
        if not store_first:
            rows += ask_conversation(store if model else None, lexical, ci, c, stored[ci])
    if store_first:
        for ci, c in enumerate(convs):
            rows += ask_conversation(store if model else None, lexical, ci, c, stored[ci])
    store.close()
    lexical.close()
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups["all"].append(r)
        groups[f"category {r['cat']}"].append(r)
        if split is not None:
            half = (
                f"conversations 1-{split}" if r["conv"] < split else f"conversations {split + 1}-"
            )
            groups[half].append(r)
    table = {
        name: {
            "n": len(rs),
            **{key: statistics.fmean(r[key] for r in rs) for key in rs[0] if "@" in key},
        }
        for name, rs in sorted(groups.items(), key=lambda kv: (kv[0] != "all", kv[0]))
    }
    return table


def ask_conversation(
    store: Any, lexical: Any, ci: int, c: Conversation, by_id: dict[int, str]
) -> list[dict[str, Any]]:
    """A conversation's questions asked of its scope: R@k of the lexical search, the
    hybrid one (``store``; None without a model) and plain FTS5 over its turns alone."""
    rows: list[dict[str, Any]] = []
    plain = plain_fts((i, text) for i, (_, text) in enumerate(c.turns))
    for question, cat, ev in c.questions:
        hits = lexical.search(question, scope=c.sample_id, limit=max(KS))
        mine = [by_id.get(h.entry.id, "?") for h in hits]
        base = [c.turns[i][0] for i in plain_search(plain, question, max(KS))]
        row = {"conv": ci, "cat": cat, **{f"offload@{k}": recall_at(mine, ev, k) for k in KS}}
        if store is not None:
            found = store.search(question, scope=c.sample_id, limit=max(KS))
            both = [by_id.get(h.entry.id, "?") for h in found]
            row.update({f"hybrid@{k}": recall_at(both, ev, k) for k in KS})
        row.update({f"fts5@{k}": recall_at(base, ev, k) for k in KS})
        rows.append(row)
    plain.close()
    return rows


def print_recall(table: dict[str, Any]) -> None:
    sides = [("offload", "offload lexical")] if "hybrid@1" not in table["all"] else []
    if not sides:
        sides = [("hybrid", "offload hybrid"), ("offload", "lexical alone")]
    sides.append(("fts5", "FTS5"))
    head = " | ".join(f"{label} R@{k}" for _, label in sides for k in KS)
    print(f"| questions | n | {head} |")
    print("|---|---:|" + "---:|" * (len(sides) * len(KS)))
    for name, r in table.items():
        cells = [f"{r[f'{key}@{k}']:.3f}" for key, _ in sides for k in KS]
        print(f"| {name} | {r['n']} | " + " | ".join(cells) + " |")


def scale_texts(convs: list[Conversation], n: int, seed: int = 11) -> list[str]:
    """``n`` distinct texts of two turns each (seeded), so the corpus is conversation-like."""
    turns = [t for c in convs for _, t in c.turns]
    rng = random.Random(seed)
    return [f"{rng.choice(turns)} {rng.choice(turns)} ({i})" for i in range(n)]


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def bench_speed(convs: list[Conversation], tmp: Path, n: int) -> dict[str, Any]:
    """Query latency on ``n`` entries beside a plain FTS5 table of the same texts.

    The stores are built in ``tmp``; a directory that already holds a complete build for the
    same ``n`` (its ``built`` marker) is reused, so ``--speed-dir`` times a 100k store again
    without the build.
    """
    import offload

    texts = scale_texts(convs, n)
    model = embedder()
    marker = tmp / f"built-{n}"
    reused = marker.exists()
    if not reused:  # an interrupted build is started again from nothing
        for name in ("speed.db", "speed.db-wal", "speed.db-shm", "plain.db"):
            (tmp / name).unlink(missing_ok=True)
    store = offload.open_store(tmp / "speed.db", embedder=model)
    lexical = offload.open_store(tmp / "speed.db")  # the same file, searched without a model
    # the same file searched the SQL way only (no in-memory index): the side-by-side base
    sql = offload.open_store(tmp / "speed.db", embedder=model, resident_mb=0)
    t0, c0 = time.perf_counter(), time.process_time()
    if not reused:
        for i in range(0, n, 2000):
            store.put_many(texts[i : i + 2000], scope=f"s{i // 2000 % 8}")
    build_s, build_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    if reused:
        plain = sqlite3.connect(str(tmp / "plain.db"))
    else:
        plain = plain_fts(enumerate(texts), str(tmp / "plain.db"))
        marker.write_text(f"{n} entries\n")
    plain_build_s, plain_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    questions = [q for c in convs for q, _, _ in c.questions]
    built = {
        name: _resident_built(s, questions[0])
        for name, s in (("hybrid", store), ("lexical", lexical))
    }
    for q in questions[:50]:  # warm both caches alike
        store.search(q, limit=10)
        lexical.search(q, limit=10)
        sql.search(q, limit=10)
        plain_search(plain, q, 10)
    mine: list[float] = []
    lex: list[float] = []
    base: list[float] = []
    via_sql: list[float] = []
    for q in questions:
        t = time.perf_counter()
        plain_search(plain, q, 10)
        base.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        sql.search(q, limit=10)
        via_sql.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        store.search(q, limit=10)
        mine.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        lexical.search(q, limit=10)
        lex.append((time.perf_counter() - t) * 1000)
    rare = _rare_lookups(texts, {"hybrid": store, "lexical": lexical, "sql": sql}, plain)
    store.close()
    lexical.close()
    sql.close()
    plain.close()
    raw = sum(len(t.encode()) for t in texts)
    on_disk = sum(p.stat().st_size for p in tmp.glob("speed.db*"))
    return {
        "entries": n,
        "reused": reused,
        "build_s": build_s,
        "plain_build_s": plain_build_s,
        "build_cpu_s": build_cpu_s,
        "plain_build_cpu_s": plain_cpu_s,
        "build_ratio": build_s / plain_build_s if not reused else None,
        "raw_mb": raw / 1e6,
        # the store's files after every connection closed (a reused store holds the scoped
        # runs' few hundred extra entries too)
        "disk_x_raw": on_disk / raw,
        "plain_disk_x_raw": (tmp / "plain.db").stat().st_size / raw,
        "rare_term": rare,
        "resident_index": built,
        "queries": len(questions),
        "hybrid": model is not None,
        "sql_path_p50": pct(via_sql, 0.5),
        "sql_path_p95": pct(via_sql, 0.95),
        "lexical_p50": pct(lex, 0.5),
        "lexical_p95": pct(lex, 0.95),
        "offload_p50": pct(mine, 0.5),
        "offload_p95": pct(mine, 0.95),
        "fts5_p50": pct(base, 0.5),
        "fts5_p95": pct(base, 0.95),
        "ratio_p50": pct(mine, 0.5) / pct(base, 0.5),
        "ratio_p95": pct(mine, 0.95) / pct(base, 0.95),
    }


RARE_LOOKUPS = 200


def rare_terms(texts: Sequence[str], k: int = RARE_LOOKUPS, seed: int = 5) -> list[str]:
    """``k`` terms each held by one of ``texts`` alone (seeded): the number a speed text
    ends with (:func:`scale_texts`), from 10000 up, where the turns hold none of them. The
    turns themselves repeat: at 100k texts their rarest words are in dozens."""
    first = min(10_000, len(texts) // 2)
    picked = random.Random(seed).sample(range(first, len(texts)), min(k, len(texts) - first))
    return [str(i) for i in picked]


def _rare_lookups(texts: Sequence[str], stores: dict[str, Any], plain: Any) -> dict[str, Any]:
    """p50/p95 ms of one rare word as the whole query, on each store and plain FTS5."""
    words = rare_terms(texts)
    timed: dict[str, list[float]] = defaultdict(list)
    for w in words[:20]:  # warm
        for s in stores.values():
            s.search(w, limit=10)
    for w in words:
        for name, s in stores.items():
            t = time.perf_counter()
            s.search(w, limit=10)
            timed[name].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        plain_search(plain, w, 10)
        timed["fts5"].append((time.perf_counter() - t) * 1000)
    out: dict[str, Any] = {"lookups": len(words), "texts_per_term": _df_range(texts, words)}
    for name, ms in timed.items():
        out[f"{name}_p50"], out[f"{name}_p95"] = pct(ms, 0.5), pct(ms, 0.95)
    return out


def _df_range(texts: Sequence[str], terms: Sequence[str]) -> list[int]:
    """The fewest and most texts one of ``terms`` occurs in (as a whole word)."""
    wanted = set(terms)
    df: dict[str, int] = defaultdict(int)
    for t in texts:
        for w in wanted.intersection(re.findall(r"\w+", t)):
            df[w] += 1
    return [min(df.values()), max(df.values())] if df else [0, 0]


def _resident_built(store: Any, question: str) -> dict[str, Any]:
    """Start a store's in-memory index the way a user does (a first search), wait for the
    background build, and what it took: wall seconds, the build's own, rows, MB."""
    t = time.perf_counter()
    store.search(question, limit=10)
    if store.resident is None:
        return {"on": False}
    store.resident.built.wait()
    # the chunk -> entry map and the entries' columns build beside it (store/search/memory/held.py)
    store.resident.entry_map.wait()
    store.resident.entry_keys.wait()
    r = store.resident.report
    return {
        "on": not r.refused,
        "wall_s": round(time.perf_counter() - t, 2),
        "build_s": round(r.seconds, 2),
        "rows": r.rows,
        "mb": round(r.nbytes / 2**20, 1),
        "refused": r.refused,
    }


SMALL_SCOPE = "small"
SMALL_ENTRIES = 300


def _plain_scopes(plain: sqlite3.Connection, n: int, small: list[str]) -> None:
    """The plain table's scope per row (the same split as the store's) and the small
    scope's texts, added once: its filtered baseline is a join on this table."""
    if plain.execute("SELECT 1 FROM sqlite_master WHERE name = 'scopes'").fetchone():
        return
    plain.execute("CREATE TABLE scopes (id INTEGER PRIMARY KEY, scope TEXT NOT NULL)")
    plain.executemany(
        "INSERT INTO scopes VALUES (?, ?)", ((i, f"s{i // 2000 % 8}") for i in range(n))
    )
    rows = list(enumerate(small, n))
    plain.executemany("INSERT INTO t (rowid, text) VALUES (?, ?)", rows)
    plain.executemany("INSERT INTO scopes VALUES (?, ?)", ((i, SMALL_SCOPE) for i, _ in rows))
    plain.execute("CREATE INDEX scopes_scope ON scopes(scope)")
    plain.commit()


SCATTERED_SCOPE = "scattered"
SCATTERED_ENTRIES = 300


def _scattered(store: Any, plain: sqlite3.Connection, convs: list[Conversation]) -> None:
    """A scope of SCATTERED_ENTRIES entries put one at a time between as many entries of
    another scope (a run of one id each: projects written interleaved), added once, and the
    same rows (with their scopes) in the plain table."""
    from offload.store.models import Filters

    texts = [f"{t} [scattered]" for t in scale_texts(convs, 2 * SCATTERED_ENTRIES, seed=13)]
    scopes = [SCATTERED_SCOPE if i % 2 == 0 else "scatter-gaps" for i in range(len(texts))]
    if not store.count(Filters(scope=SCATTERED_SCOPE)):
        for text, scope in zip(texts, scopes, strict=True):
            store.put(text, scope=scope)
    if plain.execute("SELECT 1 FROM scopes WHERE scope = ?", (SCATTERED_SCOPE,)).fetchone():
        return
    first = int(plain.execute("SELECT max(rowid) FROM t").fetchone()[0]) + 1
    rows = list(enumerate(texts, first))
    plain.executemany("INSERT INTO t (rowid, text) VALUES (?, ?)", rows)
    plain.executemany("INSERT INTO scopes VALUES (?, ?)", ((i, scopes[i - first]) for i, _ in rows))
    plain.commit()


def plain_from(conn: sqlite3.Connection, question: str, first: int, k: int) -> list[int]:
    """The plain baseline under "created after": the rows from ``first`` on (the store's
    entries arrive in the plain table's row order)."""
    match = fts_or_query(question)
    if not match:
        return []
    rows = conn.execute(
        "SELECT rowid FROM t WHERE t MATCH ? AND rowid >= ? ORDER BY bm25(t) LIMIT ?",
        (match, first, k),
    ).fetchall()
    return [int(r[0]) for r in rows]


def plain_scoped(conn: sqlite3.Connection, question: str, scope: str, k: int) -> list[int]:
    """The plain baseline under a scope: the same MATCH, joined to the rows' scopes."""
    match = fts_or_query(question)
    if not match:
        return []
    rows = conn.execute(
        "SELECT t.rowid FROM t JOIN scopes s ON s.id = t.rowid "
        "WHERE t MATCH ? AND s.scope = ? ORDER BY bm25(t) LIMIT ?",
        (match, scope, k),
    ).fetchall()
    return [int(r[0]) for r in rows]


def bench_scoped(convs: list[Conversation], tmp: Path, n: int, limit: int) -> dict[str, Any]:
    """Filtered search beside whole-store search, each beside plain FTS5 with the same filter
    (a join), on the ``--speed-dir`` store of ``n`` entries (built by ``--only speed``).

    Filters: a small scope (SMALL_ENTRIES entries added to the store once), a scattered
    one (SCATTERED_ENTRIES, one id in two), one of the build's eight scopes (an eighth of
    the store), the newest fifth of the store (created after; not a scope), and a kind
    filter every entry passes."""
    import offload
    from offload.store.models import Filters

    if not (tmp / f"built-{n}").exists():
        raise SystemExit(f"--only scoped times the store --only speed built in {tmp}: none yet")
    small = [f"{t} [small]" for t in scale_texts(convs, SMALL_ENTRIES, seed=12)]
    store = offload.open_store(tmp / "speed.db", embedder=embedder())
    if not store.count(Filters(scope=SMALL_SCOPE)):
        store.put_many(small, scope=SMALL_SCOPE)
    plain = sqlite3.connect(str(tmp / "plain.db"))
    _plain_scopes(plain, n, small)
    _scattered(store, plain, convs)
    fifth = int(0.8 * n)  # the plain table's row 80,000 is the store's 80,001st entry
    row = store.conn.execute("SELECT created FROM entries ORDER BY id LIMIT 1 OFFSET ?", (fifth,))
    recent = float(row.fetchone()[0])
    questions = [q for c in convs for q, _, _ in c.questions][:limit]
    cases: dict[str, tuple[Filters, str | int | None]] = {
        "whole": (Filters(), None),
        "small": (Filters(scope=SMALL_SCOPE), SMALL_SCOPE),
        "scattered": (Filters(scope=SCATTERED_SCOPE), SCATTERED_SCOPE),
        "eighth": (Filters(scope="s0"), "s0"),
        "recent_fifth": (Filters(created_after=recent), fifth),
        "everything": (Filters(kinds=("text",)), None),
    }
    for q in questions[:20]:  # warm the caches alike
        for f, _ in cases.values():
            store.search(q, f, limit=10)
        plain_search(plain, q, 10)
    times: dict[str, list[float]] = defaultdict(list)
    for q in questions:
        for name, (f, scope) in cases.items():
            t = time.perf_counter()
            if scope is None:
                plain_search(plain, q, 10)
            elif isinstance(scope, int):
                plain_from(plain, q, scope, 10)
            else:
                plain_scoped(plain, q, scope, 10)
            times[f"fts5_{name}"].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            store.search(q, f, limit=10)
            times[f"offload_{name}"].append((time.perf_counter() - t) * 1000)
    store.close()
    plain.close()
    out: dict[str, Any] = {"entries": n, "queries": len(questions)}
    for key, ms in times.items():
        out[f"{key}_p50"] = pct(ms, 0.5)
        out[f"{key}_p95"] = pct(ms, 0.95)
    return out


WRITE_SCRIPT = r"""
import json, random, statistics, sys, time
from pathlib import Path
from offload.store.store import Store
from offload.core.tokens import EstimateCounter
path, base_n, reps = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
turns = json.loads(sys.stdin.read())
rng = random.Random(5)
try:  # hybrid search as installed by default (a checkout from before it has none)
    from offload.config import SearchSettings
    from offload.llm.embedding import load_embedder
    store = Store(path, embedder=load_embedder(SearchSettings()))
except ImportError:
    store = Store(path)
store.counter.count("warm up")
for i in range(base_n):
    store.put(f"{rng.choice(turns)} ({i})", scope="base")
def tool_output(size, i):
    rows, n = [], 0
    while n < size:
        t = rng.choice(turns)
        rows.append({"id": len(rows), "text": t, "path": f"src/mod_{len(rows)}/file.py"})
        n += len(t) + 40
    return json.dumps({"run": i, "rows": rows}, indent=1)[:size]
out = {}
for label, make in (("turn", lambda i: f"{rng.choice(turns)} [{i}]"),
                    ("4kb", lambda i: tool_output(4096, i)),
                    ("64kb", lambda i: tool_output(65536, i))):
    times = []
    for i in range(reps):
        body = make(i) + f" #{label}{i}"
        t = time.perf_counter()
        store.put(body, scope="w")
        times.append((time.perf_counter() - t) * 1000)
    out[label] = statistics.median(times)
store.close()
print(json.dumps(out))
"""


def bench_writes(
    convs: list[Conversation],
    tmp: Path,
    base_n: int,
    reps: int,
    srcs: dict[str, str],
    rounds: int = 1,
) -> dict[str, dict[str, float]]:
    """Median ms of one acknowledged put (default BPE token counter) under each source tree,
    over ``rounds`` rounds (each on fresh stores, the trees' order alternating: run one
    after the other once, the ratio swung from 0.9x to 1.7x between runs here). With two
    trees, ``"ratio"`` holds each figure's median of the rounds' first-tree / second-tree
    ratios."""
    turns = json.dumps([t for c in convs for _, t in c.turns])
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in srcs}
    for r in range(rounds):
        order = list(srcs) if r % 2 == 0 else list(srcs)[::-1]
        for name in order:
            db = tmp / f"w-{name}-{r}.db"
            env = {**os.environ, "PYTHONPATH": srcs[name]}
            res = subprocess.run(
                [sys.executable, "-c", WRITE_SCRIPT, str(db), str(base_n), str(reps)],
                input=turns,
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
            runs[name].append(json.loads(res.stdout))
    out = {name: _medians(rs) for name, rs in runs.items()}
    if len(srcs) == 2:
        first, second = (runs[name] for name in srcs)
        out["ratio"] = {
            k: statistics.median(a[k] / b[k] for a, b in zip(first, second, strict=True))
            for k in first[0]
        }
    return out


def _medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


CONCURRENT_WRITER = r"""
import json, random, sys, time
from pathlib import Path
from offload.store.store import Store
from offload.errors import OffloadError
path, worker, count, size = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
turns = json.loads(sys.stdin.readline())
rng = random.Random(worker)
store = Store(path)
store.counter.count("warm up")
bodies = []
for i in range(count):
    rows, n = [], 0
    while n < size:
        t = rng.choice(turns)
        rows.append({"id": len(rows), "text": t})
        n += len(t) + 20
    bodies.append(json.dumps({"w": worker, "i": i, "rows": rows})[: max(size, 60)] + f" {worker}-{i}")
print("ready", flush=True)
sys.stdin.readline()  # go: every writer starts together
errors = 0
t0 = time.perf_counter()
for b in bodies:
    try:
        store.put(b, scope="conc")
    except OffloadError:
        errors += 1
print(json.dumps({"s": time.perf_counter() - t0, "errors": errors}))
store.close()
"""


def bench_concurrency(
    convs: list[Conversation], tmp: Path, count: int, size: int, srcs: dict[str, str]
) -> dict[str, dict[str, float]]:
    """Puts per second with one writer process and with four at once, on one store file."""
    turns = json.dumps([t for c in convs for _, t in c.turns])
    out: dict[str, dict[str, float]] = {}
    for name, src in srcs.items():
        env = {**os.environ, "PYTHONPATH": src}
        res: dict[str, float] = {}
        for procs in (1, 4):
            db = tmp / f"c-{name}-{procs}.db"
            subprocess.run(
                [sys.executable, "-c", "import sys; from offload.store.store import Store; "
                 "Store(__import__('pathlib').Path(sys.argv[1])).close()", str(db)],
                env=env, check=True,
            )  # fmt: skip
            ps = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        CONCURRENT_WRITER,
                        str(db),
                        f"w{w}",
                        str(count),
                        str(size),
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    env=env,
                )
                for w in range(procs)
            ]
            for p in ps:
                assert p.stdin is not None
                p.stdin.write(turns + "\n")
                p.stdin.flush()
            for p in ps:
                assert p.stdout is not None
                assert p.stdout.readline().strip() == "ready"
            t0 = time.perf_counter()
            for p in ps:
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.close()
            results = []
            for p in ps:
                assert p.stdout is not None
                results.append(json.loads(p.stdout.read()))
                p.wait(timeout=1800)
            wall = time.perf_counter() - t0
            res[f"puts_per_s_{procs}"] = procs * count / wall
            res[f"errors_{procs}"] = sum(r["errors"] for r in results)
        res["speedup"] = res["puts_per_s_4"] / res["puts_per_s_1"]
        out[name] = res
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="locomo_dev.json")
    ap.add_argument(
        "--only", choices=["recall", "speed", "scoped", "writes", "concurrency"], action="append"
    )
    ap.add_argument("--conc-puts", type=int, default=300, help="puts per writer process")
    ap.add_argument("--conc-size", type=int, default=4096, help="bytes per concurrent put")
    ap.add_argument("--split", type=int, default=2, help="recall per half: conversations 1-N, N+1-")
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=10_000, help="--only scoped: questions timed")
    ap.add_argument("--write-base", type=int, default=2000)
    ap.add_argument("--write-reps", type=int, default=60)
    ap.add_argument(
        "--write-rounds",
        type=int,
        default=1,
        help="rounds of --only writes, each on fresh stores, the trees' order alternating",
    )
    ap.add_argument("--baseline-src", help="another checkout's src/ to time writes beside")
    ap.add_argument(
        "--recall-store",
        action="append",
        help="recall: fill this empty store (a postgresql:// URL; 'sqlite': a temporary "
        "file) instead; repeatable: each store filled and searched in turn, a table each",
    )
    ap.add_argument(
        "--via",
        choices=["library", "mcp"],
        default="library",
        help="recall: store turns with put_many, or one MCP offload call a turn (an agent's path)",
    )
    ap.add_argument(
        "--store-first",
        action="store_true",
        help="recall: store every conversation before asking any (a store holding many)",
    )
    ap.add_argument(
        "--undated",
        action="store_true",
        help="recall: store turns without their session's date as event time",
    )
    ap.add_argument(
        "--speed-dir", type=Path, help="build the speed stores here and reuse them on later runs"
    )
    ap.add_argument(
        "--embedder",
        choices=["static", "minilm"],
        default="static",
        help="the stores' embedding model: the shipped static one, or offload[tools]'s MiniLM",
    )
    ap.add_argument(
        "--semantic-weight", type=float, help="recall: the hybrid store's semantic share"
    )
    args = ap.parse_args()
    global EMBEDDER, SEMANTIC_WEIGHT
    EMBEDDER, SEMANTIC_WEIGHT = args.embedder, args.semantic_weight
    convs = load(args.data)
    parts = args.only or ["recall", "speed", "writes"]
    load_avg = os.getloadavg()
    print(f"load average at start: {load_avg[0]:.2f} {load_avg[1]:.2f} {load_avg[2]:.2f}")
    with tempfile.TemporaryDirectory(prefix="bench-search-") as d:
        tmp = Path(d)
        if "recall" in parts:
            stores = args.recall_store or ["sqlite"]
            for i, where in enumerate(stores):
                t = time.perf_counter()
                own = tmp / f"recall-{i}"
                own.mkdir()
                at = None if where == "sqlite" else where
                table = bench_recall(
                    convs, own, args.split, at, args.via, not args.undated, args.store_first
                )
                if len(stores) > 1:
                    print(f"\n{where.split('@')[-1]}:")
                print_recall(table)
                print(f"(recall run: {time.perf_counter() - t:.1f} s)")
        if "speed" in parts:
            speed_dir = args.speed_dir or tmp
            speed_dir.mkdir(parents=True, exist_ok=True)
            r = bench_speed(convs, speed_dir, args.entries)
            print(json.dumps(r, indent=1))
        if "scoped" in parts:
            if args.speed_dir is None:
                raise SystemExit("--only scoped needs --speed-dir (a store --only speed built)")
            r = bench_scoped(convs, args.speed_dir, args.entries, args.queries)
            print(json.dumps(r, indent=1))
        srcs = {"this": str(Path(__file__).resolve().parents[1] / "src")}
        if args.baseline_src:
            srcs["baseline"] = args.baseline_src
        if "writes" in parts:
            print(
                json.dumps(
                    bench_writes(
                        convs, tmp, args.write_base, args.write_reps, srcs, args.write_rounds
                    )
                )
            )
        if "concurrency" in parts:
            conc = bench_concurrency(convs, tmp, args.conc_puts, args.conc_size, srcs)
            print(json.dumps(conc))
    load_avg = os.getloadavg()
    print(f"load average at end: {load_avg[0]:.2f} {load_avg[1]:.2f} {load_avg[2]:.2f}")


if __name__ == "__main__":
    main()
