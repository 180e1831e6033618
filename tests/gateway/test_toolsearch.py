"""Tool search: BM25F over the analysed fields of tool definitions, multi-step queries
merged clause by clause. Small fixed catalogs for ranking orders; GitHub's real catalog
(vendored) for natural task descriptions."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from catalog_tasks import MULTI_STEP, SERVERS
from github_tasks import TASKS
from numpy.typing import NDArray

from offload.config import SearchSettings
from offload.gateway.toolsearch import (
    VALUE_WEIGHT,
    ToolIndex,
    base_encoder,
    clauses,
    doc_for,
    embedding_views,
    semantic_share,
    value_terms,
)
from offload.llm.embedding import StaticEmbedder, load_embedder
from realparts import CATALOGS


def tool(name: str, description: str = "", **params: str) -> dict[str, Any]:
    props = {p: {"type": "string", "description": d} for p, d in params.items()}
    return {"name": name, "description": description, "inputSchema": {"properties": props}}


def index_of(*tools: tuple[str, dict[str, Any]]) -> ToolIndex:
    return ToolIndex.build(doc_for(f"{server}__{t['name']}", t) for server, t in tools)


def ranked(index: ToolIndex, query: str, limit: int = 5) -> list[str]:
    return [doc.key for doc, _ in index.search(query, limit)]


SMALL = index_of(
    ("gh", tool("create_pull_request", "Open a new pull request", title="PR title")),
    ("gh", tool("listPullRequests", "List pull requests in a repository")),
    ("notion", tool("API-create-a-comment", "Create a comment", parent="The page to comment on")),
    ("web", tool("browser.take_screenshot", "Capture the visible page", filename="Where to save")),
    ("fs", tool("read_file", "Read a file from disk", path="Path of the file")),
    ("fs", tool("move_file", "Move or rename a file", source="From", destination="To")),
    ("mem", tool("search_nodes", "Search the graph", query="Words to match in entity names")),
)


def test_identifiers_in_any_style_are_found_by_their_words() -> None:
    assert ranked(SMALL, "create a pull request")[0] == "gh__create_pull_request"
    assert ranked(SMALL, "list the pull requests")[0] == "gh__listPullRequests"
    assert ranked(SMALL, "add a comment")[0] == "notion__API-create-a-comment"
    assert ranked(SMALL, "take a screenshot")[0] == "web__browser.take_screenshot"


def test_a_whole_identifier_in_the_query_ranks_its_tool_first() -> None:
    assert ranked(SMALL, "move_file")[0] == "fs__move_file"
    assert ranked(SMALL, "listPullRequests please")[0] == "gh__listPullRequests"


def test_stemming_matches_other_forms_of_a_word() -> None:
    assert ranked(SMALL, "moving files around")[0] == "fs__move_file"
    assert ranked(SMALL, "screenshots of the page")[0] == "web__browser.take_screenshot"


def test_an_initialism_of_a_tools_name_finds_it() -> None:
    assert ranked(SMALL, "open a PR")[0] == "gh__create_pull_request"


def test_the_name_outweighs_the_description_and_parameters_count() -> None:
    both = index_of(
        ("a", tool("fetch_logs", "Download the records of a job")),
        ("b", tool("get_job", "Details of a job; includes links to its logs")),
        ("c", tool("get_entity", "One entity", selector="An entity name to match")),
    )
    assert ranked(both, "job logs")[0] == "a__fetch_logs"
    assert ranked(both, "selector")[0] == "c__get_entity"  # a parameter name
    assert ranked(both, "entity name")[0] == "c__get_entity"


def test_the_server_name_is_searchable() -> None:
    assert ranked(SMALL, "notion comment")[0] == "notion__API-create-a-comment"


def test_empty_queries_match_nothing_and_stopwords_alone_do_not_fail() -> None:
    assert ranked(SMALL, "") == [] and ranked(SMALL, "   ") == []
    assert ranked(SMALL, "the of and") == ranked(SMALL, "the of and")  # searched, never required
    assert ranked(SMALL, "read the file")[0] == "fs__read_file"  # "the" adds nothing


def test_a_multi_step_task_is_split_into_clauses_with_enough_words() -> None:
    assert clauses("read the file, move it to backup and then take a screenshot") == [
        "read the file",
        "move it to backup",
        "take a screenshot",
    ]
    assert clauses("look up the nodes named Alice and Bob") == [
        "look up the nodes named Alice and Bob"
    ]


def test_a_task_of_more_steps_than_rankings_keeps_its_last_steps_searched() -> None:
    steps = [
        f"step {word} the thing"
        for word in ["one", "two", "three", "four", "five", "six", "seven", "eight"]
    ]
    found = clauses(", then ".join(steps))
    assert len(found) == 6  # neighbouring steps share a ranking
    searched = " ".join(found)
    at = [searched.find(step) for step in steps]
    assert -1 not in at and at == sorted(at)  # every step, in order, none dropped
    assert found[-1].endswith("step eight the thing")


def test_each_step_of_a_multi_step_task_reaches_the_top() -> None:
    query = "read the config file, rename it, and take a screenshot of the page"
    top = ranked(SMALL, query, 3)
    assert set(top) == {"fs__read_file", "fs__move_file", "web__browser.take_screenshot"}


def test_search_is_deterministic_and_scoped_by_keys() -> None:
    first = ranked(SMALL, "file", 5)
    assert first == ranked(SMALL, "file", 5)
    only = SMALL.search("file", 5, keys=["fs__move_file", "mem__search_nodes"])
    assert [d.key for d, _ in only] == ["fs__move_file"]


def test_a_score_adds_each_query_terms_share_and_only_tools_holding_a_term_score() -> None:
    index = index_of(
        ("s", tool("alpha_tool", "alpha and beta")),
        ("s", tool("gamma", "beta only")),
        ("s", tool("delta", "unrelated words")),
    )
    both = dict(index.rank("alpha beta"))
    alpha, beta = dict(index.rank("alpha")), dict(index.rank("beta"))
    assert set(both) == {0, 1}  # delta holds neither term
    assert both[0] == pytest.approx(alpha[0] + beta[0])
    assert both[1] == pytest.approx(beta[1])


VALUES = index_of(
    ("git", tool("git_add", "Add file contents to the staging area", files="Paths to stage")),
    ("apps", tool("list_apps", "List the apps of a project")),
    ("mem", tool("search_nodes", "Search the graph for nodes")),
    ("web", tool("browser_type", "Type text into an editable field", text="Text to type")),
)


def test_the_pieces_of_an_argument_value_and_quoted_words_are_value_terms() -> None:
    assert value_terms("stage src/app.py for commit") == {"src", "app", "py"}
    assert value_terms("forget the entity ProjectX") == {"project", "x"}
    assert value_terms("commit with message 'fix typo'") == {"fix", "typo"}
    assert value_terms('type "hello" here') == {"hello"}
    assert value_terms("close issue 42") == {"42"}
    # a plain word giving the same term keeps it; apostrophes and hyphens quote nothing
    assert value_terms("commit abc123 to the app") == {"abc", "123"}
    assert value_terms("what's staged? I haven't re-run it") == frozenset()
    assert value_terms("") == frozenset()


def test_an_argument_value_does_not_draw_the_ranking_to_a_tool_about_its_words() -> None:
    assert ranked(VALUES, "stage src/app.py", 2) == ["git__git_add", "apps__list_apps"]
    assert ranked(VALUES, "stage the app", 2) == ["apps__list_apps", "git__git_add"]
    quoted = ["web__browser_type", "mem__search_nodes"]
    assert ranked(VALUES, "type 'search nodes' into the field", 2) == quoted
    assert ranked(VALUES, "search nodes")[0] == "mem__search_nodes"


def test_a_value_terms_share_is_the_value_weight_and_a_whole_identifier_keeps_its_own() -> None:
    apps = dict(VALUES.rank("list apps"))
    dotted = dict(VALUES.rank("list.apps"))  # pieces list, apps (value terms); whole list.apps
    assert 0 < VALUE_WEIGHT < 1
    assert dotted[1] == pytest.approx(VALUE_WEIGHT * apps[1])
    assert ranked(VALUES, "run list_apps")[0] == "apps__list_apps"  # the tool's name, whole


def vendored_index() -> ToolIndex:
    docs = []
    for path in sorted(CATALOGS.glob("*.json")):
        server = SERVERS[path.stem]
        docs += [
            doc_for(f"{server}__{t['name']}", t) for t in json.loads(path.read_text())["tools"]
        ]
    return ToolIndex.build(docs)


def test_natural_github_tasks_find_the_intended_tool_in_the_top_3() -> None:
    # GitHub's catalog alone; a general engine, no synonym table (see docs/benchmarks/gateway.md)
    data = json.loads((CATALOGS / "github-mcp-server.json").read_text())
    index = ToolIndex.build(doc_for(f"github__{t['name']}", t) for t in data["tools"])
    found = [any(doc.name in want for doc, _ in index.search(q, 3)) for q, want in TASKS]
    assert sum(found) / len(found) >= 0.85, [
        q for (q, _), ok in zip(TASKS, found, strict=True) if not ok
    ]


def test_whole_multi_step_tasks_find_every_step_in_the_top_10() -> None:
    index = vendored_index()
    keys = {d.key for d in index.docs}
    tasks = [(q, s) for q, s in MULTI_STEP if all(any(k in keys for k in st) for st in s)]
    assert len(tasks) >= 10
    whole = 0
    for query, steps in tasks:
        top = {d.key for d, _ in index.search(query, 10)}
        whole += all(any(k in top for k in step) for step in steps)
    assert whole / len(tasks) >= 0.6


@functools.cache
def embedder() -> StaticEmbedder:
    loaded = load_embedder(SearchSettings())
    assert loaded is not None, "wordllama is a main dependency: it must be installed"
    assert isinstance(loaded, StaticEmbedder)  # the default model
    return loaded


FOLDERS = [
    ("fs", tool("create_directory", "Create a new directory or ensure it exists", path="Path")),
    ("fs", tool("read_file", "Read a file from disk", path="Path of the file")),
    ("fs", tool("move_file", "Move or rename a file", source="From", destination="To")),
    ("gh", tool("create_pull_request", "Open a new pull request", title="PR title")),
    ("mem", tool("search_nodes", "Search the graph", query="Words to match in entity names")),
]


def hybrid_of(tools: list[tuple[str, dict[str, Any]]]) -> ToolIndex:
    return ToolIndex.build((doc_for(f"{s}__{t['name']}", t) for s, t in tools), embedder())


def test_with_an_embedding_a_task_in_other_words_than_the_tools_finds_it() -> None:
    lexical = index_of(*FOLDERS)
    hybrid = hybrid_of(FOLDERS)
    assert ranked(lexical, "make a folder") == []  # no word in common
    assert ranked(hybrid, "make a folder")[0] == "fs__create_directory"


def test_the_embedding_never_displaces_an_exact_name_or_a_clear_lexical_match() -> None:
    hybrid = hybrid_of(FOLDERS)
    assert ranked(hybrid, "move_file")[0] == "fs__move_file"
    assert ranked(hybrid, "open a PR")[0] == "gh__create_pull_request"
    assert ranked(hybrid, "") == [] and ranked(hybrid, "the of") == ranked(hybrid, "the of")


def test_hybrid_tool_search_is_deterministic_and_scoped_by_keys() -> None:
    first = hybrid_of(FOLDERS)
    again = hybrid_of(FOLDERS)
    assert ranked(first, "make a folder", 5) == ranked(again, "make a folder", 5)
    only = first.search("make a folder", 5, keys=["fs__read_file", "fs__move_file"])
    assert {d.key for d, _ in only} <= {"fs__read_file", "fs__move_file"}


@pytest.mark.slow
def test_hybrid_natural_github_tasks_rank_at_least_as_well_as_lexical() -> None:
    data = json.loads((CATALOGS / "github-mcp-server.json").read_text())
    docs = [doc_for(f"github__{t['name']}", t) for t in data["tools"]]
    rates = []
    for index in (ToolIndex.build(docs), ToolIndex.build(docs, embedder())):
        found = [any(doc.name in want for doc, _ in index.search(q, 3)) for q, want in TASKS]
        rates.append(sum(found) / len(found))
    assert rates[1] >= rates[0] >= 0.85, rates


class Concepts:
    """A deterministic stand-in for a contextual model: a text's vector counts the
    concepts its words name (synonyms share one), so it links words no tool uses."""

    model_id = "concepts"
    AXES = (
        ("folder", "directory", "directories"),
        ("reachable", "ping", "contacted"),
        ("file", "files"),
        ("pull", "pr", "request"),
        ("graph", "entity", "nodes"),
        ("move", "rename"),
    )

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.calls += 1
        out = np.full((len(texts), len(self.AXES) + 1), 0.05, dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().replace("_", " ").split():
                for k, axis in enumerate(self.AXES):
                    out[i, k] += word.strip("?.,") in axis
        unit: NDArray[np.float32] = out / np.linalg.norm(out, axis=1, keepdims=True)
        return unit


PINGS = [
    *FOLDERS,
    ("k8s", tool("ping", "Verify that the server can be contacted")),
    ("k8s", tool("kubectl_reconnect", "Reconnect to the server after a restart")),
]


def strong_of(tools: list[tuple[str, dict[str, Any]]], with_static: bool = True) -> ToolIndex:
    docs = (doc_for(f"{s}__{t['name']}", t) for s, t in tools)
    base = ToolIndex.build(docs, embedder() if with_static else None)
    return base.with_strong(Concepts())


def test_a_contextual_model_links_a_request_word_no_tool_uses() -> None:
    for with_static in (True, False):
        index = strong_of(PINGS, with_static)
        assert ranked(index, "is the server reachable?")[0] == "k8s__ping"
        assert ranked(index, "make a folder")[0] == "fs__create_directory"


def test_with_a_contextual_model_a_named_tool_and_a_clear_match_still_rank_first() -> None:
    index = strong_of(PINGS)
    assert ranked(index, "move_file")[0] == "fs__move_file"
    assert ranked(index, "open a PR")[0] == "gh__create_pull_request"
    assert ranked(index, "") == []


def test_with_a_contextual_model_search_is_deterministic_and_scoped_by_keys() -> None:
    first, again = strong_of(PINGS), strong_of(PINGS)
    query = "is the server reachable? then make a folder"
    assert first.search(query, 5) == again.search(query, 5)
    only = first.search(query, 5, keys=["fs__read_file", "k8s__kubectl_reconnect"])
    assert {d.key for d, _ in only} <= {"fs__read_file", "k8s__kubectl_reconnect"}


def test_a_search_embeds_the_query_and_its_clauses_in_one_call_and_remembers_them() -> None:
    index = strong_of(PINGS)
    encoder = index.strong
    assert isinstance(encoder, Concepts)
    before = encoder.calls
    index.search("read the file, then move it, and make a folder", 5)
    assert encoder.calls == before + 1
    index.search("read the file, then move it, and make a folder", 5)
    assert encoder.calls == before + 1


def test_without_a_contextual_model_the_ranking_is_todays() -> None:
    hybrid = hybrid_of(PINGS)
    assert hybrid.strong is None
    upgraded = strong_of(PINGS)
    assert hybrid.search("make a folder", 5) == hybrid_of(PINGS).search("make a folder", 5)
    assert upgraded.docs == hybrid.docs and upgraded.vectors is not None


def test_a_tools_views_are_its_whole_text_its_name_and_title_and_its_first_sentence() -> None:
    doc = doc_for("fs__create_directory", tool("create_directory", "Make one. Then more."))
    assert embedding_views(doc) == (
        "create directory\nMake one. Then more.",
        "create directory",
        "Make one.",
    )


def test_the_first_tool_index_uses_the_stores_model_unless_it_is_the_strong_one() -> None:
    static, strong = embedder(), Concepts()
    assert base_encoder(static, strong) is static
    assert base_encoder(static, None) is static
    assert base_encoder(None, strong) is None
    # the store configured with the strong model itself: embedded once, by the strong build
    assert base_encoder(Concepts(), strong) is None


LOGS = [
    ("fs", tool("create_directory", "Create a new directory")),
    ("logs", tool("tail_logs", "Show the newest lines of the logs")),
]


def test_the_embeddings_share_grows_with_the_query_words_no_tool_holds() -> None:
    assert semantic_share(0.3, known=4, terms=4) == 0.3
    assert semantic_share(0.3, known=0, terms=4) == 1.0
    assert semantic_share(0.3, known=2, terms=4) == pytest.approx(0.65)
    assert semantic_share(0.3, known=0, terms=0) == 0.3


def test_a_request_mostly_in_words_no_tool_uses_follows_its_meaning() -> None:
    index = ToolIndex.build((doc_for(f"{s}__{t['name']}", t) for s, t in LOGS), Concepts())
    # "logs" names one tool; "folder", "somewhere", "old" no tool holds: they mean the other
    assert ranked(index, "I want a folder somewhere for my old logs")[0] == "fs__create_directory"
    # a request in the catalog's own words keeps its lexical match first
    assert ranked(index, "show the newest logs")[0] == "logs__tail_logs"
