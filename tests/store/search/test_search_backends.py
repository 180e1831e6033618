"""Both backends rank a fixed corpus alike (BM25 on SQLite, IDF-weighted ts_rank on
PostgreSQL), with the bounded ranking (store/search/selective.py) at work on each."""

from __future__ import annotations

from pathlib import Path

import pytest

from offload.core.tokens import EstimateCounter
from offload.store.search import selective
from offload.store.store import Store

# a few telling words among many rows of common ones
_TOLD = {
    "parser": "the config parser failed on a tab in the header line",
    "socket": "the socket closed before the retry finished",
    "nonce": "a checkout nonce expired before the write",
    "budget": "the token budget ran out in the middle of the session",
    "gateway": "the gateway dropped the upstream catalog after a restart",
}
_QUESTIONS = {
    "why did the config parser fail": "parser",
    "when did the socket close": "socket",
    "which checkout nonce expired": "nonce",
    "what happened to the token budget in the session": "budget",
    "why did the gateway drop the upstream catalog": "gateway",
}


def _fill(store: Store) -> dict[str, int]:
    filler = [f"the session config logged line {i} in the session log" for i in range(60)]
    store.put_many(filler, scope="c")
    ids = {k: store.put(text, scope="c").entry.id for k, text in _TOLD.items()}
    store.put_many([f"the retry of the session number {i} was fine" for i in range(40)], scope="c")
    return ids


def _tops(store: Store, k: int) -> dict[str, list[int]]:
    return {q: [h.entry.id for h in store.search(q, scope="c", limit=k)] for q in _QUESTIONS}


def test_both_backends_return_the_same_top_hits_for_each_question(
    tmp_path: Path, pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the rarest term alone is scored first, so the bound decides on both backends
    monkeypatch.setattr(selective, "POSTINGS_BUDGET", 5)
    tops = []
    for where in (tmp_path / "offload.db", pg_database):
        with Store(where, counter=EstimateCounter()) as store:
            ids = _fill(store)
            tops.append(_tops(store, 3))
            for q, key in _QUESTIONS.items():
                assert tops[-1][q][0] == ids[key], q
    assert tops[0] == tops[1]
