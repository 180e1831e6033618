"""store.search.state: the one choice of the code that scores a search, and why."""

from __future__ import annotations

from pathlib import Path

from offload.core.tokens import EstimateCounter
from offload.store.search.memory import postings
from offload.store.search.state import (
    CONTEXT,
    LEXICAL,
    NEIGHBOURS,
    POSTINGS,
    SearchState,
    scoring_path,
)
from offload.store.store import Store
from wordcorpus import built_view


def test_without_the_in_memory_index_fts5_scores_and_the_context_step_follows(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        state = SearchState(store.conn, "1 = 1", [], store.clock(), 50)
        path = scoring_path(state, ["parser"])
        assert (path.lexical, path.neighbourhood) == (LEXICAL, CONTEXT)
        assert "no in-memory index" in path.why
        # no searched terms: the neighbours' share of each score, not BM25F
        assert scoring_path(state, []).neighbourhood == NEIGHBOURS


def test_the_in_memory_index_scores_up_to_its_term_bound(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter(), resident_mb=64) as store:
        store.put("the parser failed", scope="c")
        view = built_view(store)
        state = SearchState(store.conn, "1 = 1", [], store.clock(), 50, view=view)
        assert scoring_path(state, ["parser"]).lexical == POSTINGS
        many = [f"t{i}" for i in range(postings.MAX_TERMS + 1)]
        path = scoring_path(state, many)
        assert path.lexical == LEXICAL and f"more than {postings.MAX_TERMS} terms" in path.why
