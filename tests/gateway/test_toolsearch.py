"""Tool search over GitHub's real catalog: natural task descriptions find the intended tool."""

from __future__ import annotations

import json

from github_tasks import TASKS

from offload.gateway.toolsearch import ToolIndex, doc_for, stem, terms, words
from realparts import CATALOGS


def github_index() -> ToolIndex:
    data = json.loads((CATALOGS / "github-mcp-server.json").read_text())
    return ToolIndex.build(doc_for(f"github__{t['name']}", t) for t in data["tools"])


def test_the_intended_tool_is_in_the_top_3_for_at_least_90_percent_of_tasks() -> None:
    index = github_index()
    assert len(TASKS) >= 30
    found = [any(doc.name in wanted for doc, _ in index.search(task, 3)) for task, wanted in TASKS]
    assert sum(found) / len(found) >= 0.9, [
        t for (t, _), ok in zip(TASKS, found, strict=True) if not ok
    ]


def test_identifiers_split_into_words() -> None:
    assert words("listPullRequests get_me PRs README") == [
        "list",
        "pull",
        "requests",
        "get",
        "me",
        "prs",
        "readme",
    ]


def test_the_stemmer_folds_plurals_and_verb_forms() -> None:
    forms = ("issues", "branches", "requests", "merged", "merging", "merge", "running")
    assert [stem(w) for w in forms] == ["issu", "branch", "request", "merg", "merg", "merg", "run"]


def test_query_synonyms_map_everyday_words_onto_tool_vocabulary() -> None:
    assert terms("file a bug", expand=True) == ["creat", "issu"]
    assert "pull" in terms("PR", expand=True) and "repository" in terms("repo", expand=True)
    assert terms("fetch", expand=False) == ["fetch"]  # documents are not expanded


def test_search_is_deterministic_and_scoped_by_keys() -> None:
    index = github_index()
    first = [d.key for d, _ in index.search("merge a pull request", 5)]
    assert first == [d.key for d, _ in index.search("merge a pull request", 5)]
    assert first[0] == "github__merge_pull_request"
    only = index.search("merge a pull request", 5, keys=["github__get_me", "github__list_tags"])
    assert {d.key for d, _ in only} <= {"github__get_me", "github__list_tags"}
