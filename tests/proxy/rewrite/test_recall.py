"""Auto-recall: paged-out memory comes back onto the wire when the conversation returns to it."""

from __future__ import annotations

import gc
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offload.config import ProxySettings
from offload.core.text import analysis
from offload.core.tokens import EstimateCounter
from offload.errors import ConfigError
from offload.proxy.figures.metrics import Metrics, RequestRecord
from offload.proxy.retrieval.retrieval import search_result
from offload.proxy.rewrite import recall as recall_module
from offload.proxy.rewrite.memory import Doc, SessionIndex
from offload.proxy.rewrite.messages import validate
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.recall import (
    Recaller,
    RecallHit,
    excerpt,
    find_in,
    is_recall_block,
    tail_query,
)
from offload.proxy.rewrite.stubs.expand import expand
from offload.proxy.rewrite.window import Budget
from offload.store.store import Store

Msgs = list[dict[str, Any]]
N_CTX = 4096
SCOPE = "/work/project"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as s:
        yield s


def pipe(store: Store, **overrides: Any) -> Pipeline:
    settings = ProxySettings(scope=SCOPE, recall_ratio=0.08, **overrides)
    return Pipeline(store, settings, EstimateCounter(), scope=SCOPE)


def session(turns: int = 40) -> Msgs:
    msgs: Msgs = [
        {"role": "system", "content": "You are a careful agent."},
        {"role": "user", "content": "Investigate the service logs."},
    ]
    for t in range(turns):
        args = json.dumps({"path": f"logs/{t}.log"})
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{t}",
                        "type": "function",
                        "function": {"name": "read_log", "arguments": args},
                    }
                ],
            }
        )
        body = "\n".join(f"entry {t}.{i} status=ok latency={i * 3}ms" for i in range(30))
        if t == 2:
            body += "\nthe pelican quartermaster rotated the vault key at 03:14"
        msgs.append({"role": "tool", "tool_call_id": f"c{t}", "name": "read_log", "content": body})
    msgs.append({"role": "assistant", "content": "Done reading."})
    return msgs


def ask(msgs: Msgs, text: str) -> Msgs:
    return [*msgs, {"role": "user", "content": text}]


def test_a_question_about_paged_out_memory_brings_it_back_after_the_question(
    store: Store,
) -> None:
    p = pipe(store)
    history = session()
    p.rewrite(history, N_CTX)
    request = ask(history, "Who rotated the vault key, the pelican quartermaster?")
    result = p.rewrite(request, N_CTX)
    blocks = [m for m in result.messages if is_recall_block(m)]
    assert len(blocks) == 1 and result.recall_hits >= 1
    block = blocks[0]["content"]
    assert "the pelican quartermaster rotated the vault key at 03:14" in block
    assert "<offload:body:" in block and "from ctx:sha256:" in block and "read(ref=" in block
    # at the very end: the question and all before it are the previous request's prefix
    assert result.messages[-1] is blocks[0] and result.messages[-2] == request[-1]
    assert result.wire_tokens <= Budget.of(p.settings, N_CTX).ceiling
    assert expand(store, result.messages) == request


def test_no_recall_block_follows_a_tool_result_though_it_names_paged_out_memory(
    store: Store,
) -> None:
    p = pipe(store, recall_min_new=0.0)
    history = session()[:-1]  # ends with a tool result
    p.rewrite(history[:-2], N_CTX)
    quoted = "the pelican quartermaster rotated the vault key"
    call, result = dict(history[-2]), dict(history[-1])
    result["content"] = f"{quoted}? no such entry"
    after_tool = p.rewrite([*history[:-2], call, result], N_CTX)
    assert not any(is_recall_block(m) for m in after_tool.messages)
    after_user = p.rewrite(ask(session(), f"Who said {quoted}?"), N_CTX)
    assert any(is_recall_block(m) for m in after_user.messages)


@pytest.mark.parametrize(("mode", "reader"), [("auto", "offload_read"), ("off", "read")])
def test_the_recall_block_names_the_read_tool_the_model_can_call(
    store: Store, mode: str, reader: str
) -> None:
    p = pipe(store, retrieval=mode)
    history = session()
    p.rewrite(history, N_CTX)
    result = p.rewrite(ask(history, "Who rotated the vault key, the pelican quartermaster?"), N_CTX)
    block = next(str(m["content"]) for m in result.messages if is_recall_block(m))
    note = block.split("\n", 1)[0]
    assert note.endswith(f' more: {reader}(ref="REF", offset=LINE)]')
    assert result.wire_tokens <= Budget.of(p.settings, N_CTX).ceiling


def test_under_auto_the_recall_block_names_the_mcp_read_once_the_upstream_lacks_tools(
    store: Store,
) -> None:
    p = pipe(store, retrieval="auto")
    history = session()
    question = ask(history, "Who rotated the vault key, the pelican quartermaster?")
    p.rewrite(history, N_CTX)
    p.rewrite(question, N_CTX)  # a block naming the proxy's read is cached for this query
    p.name_proxy_tools(False)
    result = p.rewrite(question, N_CTX)
    block = next(str(m["content"]) for m in result.messages if is_recall_block(m))
    assert block.split("\n", 1)[0].endswith(' more: read(ref="REF", offset=LINE)]')
    assert "offload_read" not in block


def test_the_recall_block_is_the_same_bytes_for_the_same_history(tmp_path: Path) -> None:
    history = session()
    request = ask(history, "Who rotated the vault key, the pelican quartermaster?")
    wires = []
    for _ in range(2):
        with Store(tmp_path / "s.db", counter=EstimateCounter()) as s:
            p = pipe(s)
            p.rewrite(history, N_CTX)
            wires.append(p.rewrite(request, N_CTX).messages)
    assert wires[0] == wires[1]
    assert any(is_recall_block(m) for m in wires[0])


def test_the_next_turn_keeps_the_stable_prefix_without_the_block(store: Store) -> None:
    p = pipe(store)
    history = session()
    p.rewrite(history, N_CTX)
    request = ask(history, "Who rotated the vault key, the pelican quartermaster?")
    first = p.rewrite(request, N_CTX)
    follow = [*request, {"role": "assistant", "content": "The quartermaster."}]
    follow = ask(follow, "Thanks. Anything else in the logs?")
    second = p.rewrite(follow, N_CTX)
    assert not second.prefix_kept and second.break_cause == "recall"
    assert is_recall_block(first.messages[-1])
    stable = first.messages[:-1]
    assert second.messages[: len(stable)] == stable
    # only the dropped block (and what replaces it) is recomputed
    assert second.reused_tokens >= first.wire_tokens - first.recall_tokens - 8


def test_recall_is_off_at_a_zero_ratio_and_before_anything_was_paged(store: Store) -> None:
    history = session()
    request = ask(history, "Who rotated the vault key, the pelican quartermaster?")
    off = Pipeline(
        store, ProxySettings(scope=SCOPE, recall_ratio=0.0), EstimateCounter(), scope=SCOPE
    )
    off.rewrite(history, N_CTX)
    assert not any(is_recall_block(m) for m in off.rewrite(request, N_CTX).messages)
    short = ask(session(2), "Who rotated the vault key, the pelican quartermaster?")
    result = pipe(store).rewrite(short, N_CTX)
    assert result.recall_tokens == 0 and result.messages == short


def test_a_question_that_finds_nothing_adds_nothing(store: Store) -> None:
    p = pipe(store)
    history = session()
    p.rewrite(history, N_CTX)
    result = p.rewrite(ask(history, "xylophone zeppelin"), N_CTX)
    assert result.recall_tokens == 0
    assert not any(is_recall_block(m) for m in result.messages)


def test_the_query_comes_from_the_last_user_message_and_the_tool_results_after_it() -> None:
    msgs: Msgs = [
        {"role": "user", "content": "old words here"},
        {"role": "user", "content": "Find the Pelican key"},
        {"role": "tool", "tool_call_id": "x", "content": "vault rotated"},
    ]
    query = tail_query(msgs, 1)
    assert query.split() == ["find", "pelican", "key", "vault", "rotated"]


def test_a_bad_recall_scope_is_refused(store: Store) -> None:
    with pytest.raises(ConfigError):
        Recaller(store, ProxySettings(recall_scope="everywhere"), EstimateCounter(), SCOPE)


def test_a_memory_search_that_finds_nothing_says_so(store: Store) -> None:
    answer = search_result(store, EstimateCounter(), "xylophone", SCOPE, "0" * 16, 1000)
    assert answer.startswith("no memory matches")


def test_a_memory_search_leaves_out_what_the_model_already_has(store: Store) -> None:
    history = session()
    result = pipe(store).rewrite(history, N_CTX)
    needle = "the pelican quartermaster rotated the vault key at 03:14"
    query = "pelican quartermaster vault key"
    found = search_result(store, EstimateCounter(), query, SCOPE, result.session_id, 2000)
    assert needle in found
    held = [str(m["content"]) for m in history if needle in str(m.get("content"))]
    assert len(held) == 1
    again = search_result(
        store, EstimateCounter(), query, SCOPE, result.session_id, 2000, on_wire=held
    )
    assert needle not in again and "<offload:body:" in again  # other hits take the room
    shown = search_result(store, EstimateCounter(), "quartermaster", SCOPE, result.session_id, 2000)
    twice = search_result(
        store, EstimateCounter(), "quartermaster", SCOPE, result.session_id, 2000, on_wire=[shown]
    )
    assert twice.startswith("every memory match of 'quartermaster' is already in")


def test_recall_figures_are_counted(store: Store) -> None:
    metrics = Metrics()
    metrics.record(RequestRecord(session_id="s", recall_tokens=120, recall_hits=2, recall_read=1))
    counters = metrics.snapshot()["live"]["counters"]
    assert (counters["recall_blocks"], counters["recall_tokens"]) == (1, 120)
    assert (counters["recall_hits"], counters["recall_read"]) == (2, 1)


@pytest.mark.slow
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    turns=st.integers(min_value=1, max_value=45),
    question=st.text(alphabet="abcdefghij pelicanquartermaster", min_size=0, max_size=60),
)
def test_requests_with_a_recall_block_stay_valid_and_under_the_ceiling(
    tmp_path_factory: pytest.TempPathFactory, turns: int, question: str
) -> None:
    with Store(tmp_path_factory.mktemp("r") / "s.db", counter=EstimateCounter()) as s:
        p = pipe(s)
        history = session(turns)
        p.rewrite(history, N_CTX)
        request = ask(history, question or "?")
        result = p.rewrite(request, N_CTX)
        validate(result.messages)
        for i, m in enumerate(result.messages):
            if m["role"] == "tool":
                assert result.messages[i - 1]["role"] in ("assistant", "tool")
        assert result.wire_tokens <= Budget.of(p.settings, N_CTX).ceiling
        assert expand(s, result.messages) == request


def test_a_tail_about_what_is_on_the_wire_brings_nothing_back_unless_the_gate_is_off(
    store: Store,
) -> None:
    history = session()
    on_screen = ask(history, "Which entry status latency path came last?")
    gated = pipe(store)
    gated.rewrite(history, N_CTX)
    assert gated.rewrite(on_screen, N_CTX).recall_tokens == 0
    ungated = pipe(store, recall_min_new=0.0)
    ungated.rewrite(history, N_CTX)
    assert ungated.rewrite(on_screen, N_CTX).recall_tokens > 0


def _doc(index: int, header: str, text: str) -> Doc:
    counts = Counter(analysis.terms(text))
    return Doc(
        "ctx:sha256:abc",
        index,
        10 * index + 1,
        10 * index + 9,
        header,
        text,
        tuple(counts.items()),
        sum(counts.values()),
    )


def test_a_hit_on_a_tool_call_brings_back_what_the_call_returned() -> None:
    index = SessionIndex(
        [
            _doc(3, "## #3 user", "Check the quartermaster log."),
            _doc(4, "## #4 assistant · calls read_log", 'read_log(path="quartermaster.log")'),
            _doc(5, "## #5 tool · read_log (id c4)", "rotated the vault key at 03:14"),
            _doc(6, "## #6 assistant", "Noted."),
        ]
    )
    hits = find_in(index, "read_log quartermaster.log")
    assert hits and hits[0].index == 5 and "vault key" in hits[0].text
    assert all(h.index != 4 for h in hits)  # never the call line


def test_recall_still_fires_in_a_small_window_when_a_message_fits(store: Store) -> None:
    p = Pipeline(
        store, ProxySettings(scope=SCOPE, recall_ratio=0.04), EstimateCounter(), scope=SCOPE
    )
    history = session()
    p.rewrite(history, 2048)
    result = p.rewrite(ask(history, "Who rotated the vault key, the pelican quartermaster?"), 2048)
    assert result.recall_tokens > int(0.04 * 2048)
    assert result.wire_tokens <= Budget.of(p.settings, 2048).ceiling
    block = next(str(m["content"]) for m in result.messages if is_recall_block(m))
    assert "the pelican quartermaster rotated the vault key at 03:14" in block


def test_a_recall_gate_outside_zero_to_one_is_refused(store: Store) -> None:
    with pytest.raises(ConfigError, match="recall_min_new"):
        pipe(store, recall_min_new=1.5)


def test_an_excerpt_is_cut_around_the_same_line_whatever_the_hash_order() -> None:
    # a plain sum of these weights over a set rounds the 1.0 away in most orders (the
    # order a set yields follows the process's hash seed); the exact sum is 1.0 > 0.5
    zebra, yak, xylophone = analysis.terms("zebra yak xylophone")
    (walrus,) = analysis.terms("walrus")
    weights = {zebra: 1e16, yak: 1.0, xylophone: -1e16, walrus: 0.5}
    rows = [f"filler line {k} of the stored message" for k in range(40)]
    rows[5] = "the walrus line"
    rows[30] = "zebra yak xylophone"
    hit = RecallHit("ctx:sha256:" + "0" * 64, 1, 40, "", "\n".join(rows))
    cut = excerpt(hit, weights)
    assert "zebra yak xylophone" in cut.text and "walrus" not in cut.text
    assert (cut.first_line, cut.last_line) == (29, 33)


def test_a_hits_rows_weigh_their_term_sets_and_a_quiet_proxy_cuts_them(store: Store) -> None:
    text = "\n".join(f"row {i}: status=ok latency_ms={i % 97} host=node{i % 5}" for i in range(120))
    recall_module._rows_of(text)
    # the rows' term sets hold several times the text: the bound counts them
    assert recall_module._ROWS.weight >= 5 * len(text)
    p = Pipeline(store, ProxySettings(scope="s"), EstimateCounter(), scope="s")
    for n in range(400):
        recall_module._rows_of(f"{n}\n{text}")
    held = recall_module._ROWS.weight
    p.shrink_caches(16)
    assert recall_module._ROWS.weight <= recall_module._ROWS.bound // 16 < held


def test_a_long_hits_rows_are_kept_where_the_cyclic_gc_stops_walking_them() -> None:
    text = "\n".join(f"row {i}: status=ok host=node{i % 5}" for i in range(60))
    rows, row_terms = recall_module._rows_of(text)
    gc.collect()
    assert rows == tuple(text.split("\n"))
    assert [set(t) for t in row_terms] == [set(analysis.terms(r)) for r in rows]
    assert not gc.is_tracked(rows) and not any(gc.is_tracked(t) for t in row_terms)
