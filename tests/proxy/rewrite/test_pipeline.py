"""The rewrite pipeline: stubbing, windowing, sessions, bad input, concurrency."""

from __future__ import annotations

import copy
import functools
import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from offload.config import ProxySettings
from offload.core.stubs import is_stub
from offload.core.tokens import EstimateCounter
from offload.errors import InvalidInput
from offload.proxy.rewrite.messages import session_key
from offload.proxy.rewrite.phases import RewriteResult
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.reuse import LOOP_NOTE, RECALL, SENT_NAMESPACE
from offload.proxy.rewrite.session import STATE_NAMESPACE
from offload.proxy.rewrite.stubs.expand import expand, is_proxy_note, is_range_stub
from offload.proxy.rewrite.window import Budget
from offload.store.backend import Sql
from offload.store.store import Store

Msgs = list[dict[str, Any]]
N_CTX = 4096  # threshold 81, high 2048, target 1433, ceiling 3481


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as s:
        yield s


def history_kept(result: RewriteResult) -> bool:
    """The previous request is a prefix of this one but for the proxy's own additions at
    its end (the recall block, the loop note), which each turn drops."""
    return result.prefix_kept or result.break_cause in (RECALL, LOOP_NOTE)


def make(store: Store, **overrides: Any) -> Pipeline:
    return Pipeline(store, ProxySettings(**overrides), EstimateCounter())


def bulky(tag: str, lines: int = 60) -> str:
    return "\n".join(
        f"{tag} line {i}: value={i * 7} status=ok path=/srv/{tag}/{i}" for i in range(lines)
    )


def conversation(turns: int, *, size: int = 15, every: int = 1) -> Msgs:
    """system, task, then per turn: assistant tool call, tool answer (bulky every
    ``every`` turns, a short line otherwise)."""
    msgs: Msgs = [
        {"role": "system", "content": "You are a careful agent."},
        {"role": "user", "content": "Investigate the service logs."},
    ]
    for t in range(turns):
        call_id = f"call_{t}"
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "read_log", "arguments": f'{{"n": {t}}}'},
                    }
                ],
            }
        )
        msgs.append(
            {
                "role": "tool",
                "tool_call_id": call_id,
                "name": "read_log",
                "content": bulky(f"t{t}", size),
            }
        )
    return msgs


def requests(msgs: Msgs) -> Iterator[Msgs]:
    """Each request a client would send: before every assistant message, and at the end."""
    for k, m in enumerate(msgs):
        if m["role"] == "assistant":
            yield msgs[:k]
    yield msgs


def test_a_short_conversation_goes_through_unchanged(store: Store) -> None:
    msgs: Msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hello"},
    ]
    result = make(store).rewrite(msgs, N_CTX)
    assert result.messages == msgs
    assert result.wire_tokens == result.client_tokens
    assert result.break_cause == "new_session"
    assert result.session_id == session_key(msgs)
    assert store.count() == 0  # nothing offloaded, nothing written


def test_a_long_tool_session_stays_under_the_ceiling_and_expands_back_exactly(store: Store) -> None:
    pipe = make(store)
    msgs = conversation(30, size=60)
    for request in requests(msgs):
        result = pipe.rewrite(request, N_CTX)
        assert result.wire_tokens <= int(0.85 * N_CTX)
        assert expand(store, result.messages) == request
    assert result.client_tokens > 5 * N_CTX
    assert result.stubbed_messages > 0


def test_stubbed_tool_messages_keep_their_call_id_and_name(store: Store) -> None:
    pipe = make(store)
    stubbed_tools = [
        m
        for request in requests(conversation(40, every=4))
        for m in pipe.rewrite(request, 8192).messages
        if m["role"] == "tool" and is_stub(str(m["content"]))
    ]
    assert stubbed_tools
    for m in stubbed_tools:
        assert m["tool_call_id"].startswith("call_")
        assert m["name"] == "read_log"
        assert "read_log" in m["content"]
        assert 'offload_read(ref="ctx:sha256:' in m["content"]


def test_with_retrieval_off_stubs_name_only_calls_the_client_can_make(store: Store) -> None:
    pipe = make(store, retrieval="off")
    stubs = [
        str(m["content"])
        for request in requests(conversation(40, every=4))
        for m in pipe.rewrite(request, 2048).messages
        if (is_stub(str(m.get("content") or "")) or is_range_stub(m)) and not is_proxy_note(m)
    ]
    assert any(is_stub(s) for s in stubs) and any(s.startswith("[offload: ") for s in stubs)
    for text in stubs:
        assert "offload_read" not in text and "offload_search" not in text
        assert 'read(ref="ctx:sha256:' in text and "`offload cat ctx:sha256:" in text


def test_stubs_made_after_the_proxy_tools_are_withdrawn_name_only_the_clients_calls(
    store: Store,
) -> None:
    pipe = make(store, retrieval="auto")
    requests_ = list(requests(conversation(40, every=4)))
    for request in requests_[:10]:
        pipe.rewrite(request, 2048)  # stubs naming offload_read, cached
    pipe.name_proxy_tools(False)  # the upstream turned out to render no tools
    wire = pipe.rewrite(requests_[-1], 2048).messages
    stubs = [
        str(m["content"])
        for m in wire
        if is_stub(str(m.get("content") or "")) and not is_proxy_note(m)
    ]
    assert stubs
    # the range stub already on the wire keeps its bytes until its range grows; every
    # message stub is made again
    for text in stubs:
        if not is_range_stub({"role": "user", "content": text}):
            assert "offload_read" not in text and 'read(ref="ctx:sha256:' in text
    assert expand(store, wire) == requests_[-1]


def test_with_retrieval_off_range_stubs_name_the_mcp_search_and_the_cli(store: Store) -> None:
    pipe = make(store, retrieval="off")
    ranges = [
        str(m["content"])
        for request in requests(conversation(40, every=4))
        for m in pipe.rewrite(request, 2048).messages
        if is_range_stub(m)
    ]
    assert ranges
    for text in ranges:
        assert 'search(queries=["…"], source="proxy:' in text and '`offload search "…"`' in text
        assert "offload_" not in text.replace("`offload ", "")


def test_every_tool_answer_on_the_wire_follows_its_call(store: Store) -> None:
    pipe = make(store)
    for request in requests(conversation(25)):
        wire = pipe.rewrite(request, N_CTX).messages
        open_calls: set[str] = set()
        for m in wire:
            if m["role"] == "assistant":
                open_calls = {c["id"] for c in m.get("tool_calls") or []}
            elif m["role"] == "tool":
                assert m["tool_call_id"] in open_calls
            else:
                open_calls = set()


def test_between_triggers_the_previous_wire_is_an_exact_prefix(store: Store) -> None:
    pipe = make(store)
    results = [pipe.rewrite(r, N_CTX) for r in requests(conversation(60, every=2))]
    for prev, cur in itertools.pairwise(results):
        if not cur.windowed:
            # a turn's recall block is the proxy's own, at the very end: the next turn
            # drops it and keeps everything before it
            assert history_kept(cur)
            stable = [m for m in prev.messages if not is_proxy_note(m)]
            assert prev.messages[: len(stable)] == stable
            assert cur.messages[: len(stable)] == stable
        else:
            assert cur.break_cause == "windowing"
    assert any(r.windowed for r in results)
    kept = sum(history_kept(r) for r in results[1:])
    assert kept / (len(results) - 1) >= 0.6


def test_the_same_history_gives_byte_identical_wire_after_a_restart(tmp_path: Path) -> None:
    msgs = conversation(20)
    with Store(tmp_path / "a.db", counter=EstimateCounter()) as store:
        first = make(store)
        for request in requests(msgs):
            before = first.rewrite(request, N_CTX)
        # a new process: same store, empty memory
        again = make(store).rewrite(copy.deepcopy(msgs), N_CTX)
    assert again.messages == before.messages
    assert again.break_cause == "restart"
    assert again.stubs_made == 0


def test_a_request_resent_after_a_clean_restart_reuses_its_whole_wire_with_no_break(
    tmp_path: Path,
) -> None:
    msgs = conversation(20)
    with Store(tmp_path / "a.db", counter=EstimateCounter()) as store:
        first = make(store)
        for request in requests(msgs):
            before = first.rewrite(request, N_CTX)
        assert first.remember_sent() == 1  # a clean stop keeps the last request's digests
        again = make(store).rewrite(copy.deepcopy(msgs), N_CTX)
        # the record is read once: a second restart without a clean stop knows nothing
        crashed = make(store).rewrite(copy.deepcopy(msgs), N_CTX)
    assert again.messages == before.messages
    assert again.break_cause is None and again.prefix_kept
    assert again.reused_tokens == again.wire_tokens > 0
    assert crashed.break_cause == "restart" and crashed.reused_tokens == 0


@pytest.mark.parametrize("damage", ["not json", "infinite tokens", "huge tokens"])
def test_a_damaged_kept_request_is_ignored_not_a_failed_request_or_absurd_figures(
    tmp_path: Path, damage: str
) -> None:
    # proxy.sent lives in a store other programs (another proxy, a hand) can write
    msgs = conversation(20)
    with Store(tmp_path / "a.db", counter=EstimateCounter()) as store:
        first = make(store)
        for request in requests(msgs):
            first.rewrite(request, N_CTX)
        first.remember_sent()
        ((key, value),) = store.state_items(SENT_NAMESPACE)
        if damage == "not json":
            sql = Sql("UPDATE state SET value = '{not json' WHERE namespace = ?")
            store.conn.execute(sql, (SENT_NAMESPACE,))
            store.conn.commit()
        else:
            forged = float("inf") if damage == "infinite tokens" else 10**30
            store.put_state(
                SENT_NAMESPACE, key, {**value, "tokens": [forged] * len(value["tokens"])}
            )
        again = make(store).rewrite(copy.deepcopy(msgs), N_CTX)
        assert 0 <= again.reused_tokens <= again.wire_tokens
        assert make(store).remember_sent() == 0  # the stop's sweep reads the rows too


def test_a_stop_forgets_the_requests_kept_for_sessions_that_never_came_back(
    store: Store,
) -> None:
    stale = {"version": 1, "digests": [], "tokens": [], "marks": [], "at": 0.0}
    store.put_state(SENT_NAMESPACE, "gone", stale)
    store.put_state(SENT_NAMESPACE, "recent", {**stale, "at": store.clock()})
    pipe = make(store)
    pipe.rewrite(conversation(3), N_CTX)
    assert pipe.remember_sent() == 1
    kept = dict(store.state_items(SENT_NAMESPACE))
    assert "gone" not in kept and "recent" in kept and len(kept) == 2


def test_the_next_turn_after_a_clean_restart_counts_the_prefix_it_shares(
    tmp_path: Path,
) -> None:
    msgs = conversation(20)
    turns = list(requests(msgs))
    with Store(tmp_path / "a.db", counter=EstimateCounter()) as store:
        first = make(store)
        for request in turns[:-1]:
            first.rewrite(request, N_CTX)
        first.remember_sent()
        after = make(store).rewrite(copy.deepcopy(turns[-1]), N_CTX)
    with Store(tmp_path / "b.db", counter=EstimateCounter()) as other:
        warm = make(other)  # the same turns served with no restart, for comparison
        for request in turns:
            expected = warm.rewrite(request, N_CTX)
    assert after.messages == expected.messages
    # whole messages shared (the recall block the previous turn ended with is not)
    assert 0 < after.reused_tokens <= expected.reused_tokens
    assert after.break_cause == expected.break_cause


def test_content_already_stored_is_not_written_again(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipe = make(store)
    msgs = conversation(20)
    for request in requests(msgs):
        pipe.rewrite(request, N_CTX)
    writes: list[str] = []
    real_put = store.put

    def counting_put(content: str, **kwargs: Any) -> Any:
        writes.append(content[:40])
        return real_put(content, **kwargs)

    monkeypatch.setattr(store, "put", counting_put)
    for _ in range(3):
        pipe.rewrite(copy.deepcopy(msgs), N_CTX)
    assert writes == []


def test_a_single_message_larger_than_the_window_is_stubbed_never_forwarded(store: Store) -> None:
    huge = bulky("dump", 3000)  # far more than n_ctx tokens
    msgs: Msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "look at this"},
        {"role": "assistant", "content": "paste it"},
        {"role": "user", "content": huge},
    ]
    result = make(store).rewrite(msgs, N_CTX)
    assert all(m["content"] != huge for m in result.messages)
    assert not result.emergency  # large: stubbed as it arrives (window.large), no trim
    assert result.wire_tokens <= int(0.85 * N_CTX)
    assert expand(store, result.messages) == msgs


def test_multi_part_content_is_stubbed_and_restored_as_parts(store: Store) -> None:
    parts = [{"type": "text", "text": bulky("part", 400)}]
    msgs: Msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": parts},
    ]
    result = make(store).rewrite(msgs, 2048)
    assert isinstance(result.messages[-1]["content"], str)
    assert expand(store, result.messages) == msgs


def test_windowing_pages_out_into_one_range_stub_right_after_the_head(store: Store) -> None:
    pipe = make(store)
    for request in requests(conversation(40)):
        result = pipe.rewrite(request, N_CTX)
    wire = result.messages
    assert wire[:2] == conversation(0)  # the head, pinned
    assert is_range_stub(wire[2])
    assert sum(is_range_stub(m) for m in wire) == 1
    assert "retrieve(" in wire[2]["content"]


def test_an_edited_history_is_reported_as_a_client_edit(store: Store) -> None:
    pipe = make(store)
    msgs = conversation(20)
    for request in requests(msgs):
        pipe.rewrite(request, N_CTX)
    edited = copy.deepcopy(msgs)
    edited[4]["content"] = "rewritten by the client"
    result = pipe.rewrite(edited, N_CTX)
    assert not result.prefix_kept
    assert result.break_cause == "client_edit"
    assert expand(store, result.messages) == edited


def test_a_smaller_n_ctx_keeps_the_session_and_still_bounds_the_wire(store: Store) -> None:
    pipe = make(store)
    msgs = conversation(20)
    for request in requests(msgs):
        pipe.rewrite(request, N_CTX)
    smaller = pipe.rewrite(msgs, 3000)  # e.g. the app's retry after an upstream overflow
    assert smaller.wire_tokens <= int(0.85 * 3000)
    assert smaller.break_cause != "new_session"


@pytest.mark.parametrize(
    ("messages", "fragment"),
    [
        ("not a list", "must be a list"),
        ([], "empty"),
        (["text"], "must be an object"),
        ([{"role": "wizard", "content": "x"}], "unknown role"),
        ([{"role": "user", "content": 42}], "content must be"),
        ([{"role": "user"}], "no content"),
        ([{"role": "tool", "content": "x"}], "tool_call_id"),
        ([{"role": "user", "content": [1, 2]}], "must be an object with a type"),
        ([{"role": "user", "content": "x", "tool_calls": "x"}], "tool_calls"),
    ],
)
def test_malformed_messages_are_refused_and_nothing_is_stored(
    store: Store, messages: Any, fragment: str
) -> None:
    with pytest.raises(InvalidInput, match=fragment):
        make(store).rewrite(messages, N_CTX)
    assert store.count() == 0


@pytest.mark.parametrize("n_ctx", [0, -5, True, 4096.0])
def test_a_bad_n_ctx_is_refused(store: Store, n_ctx: Any) -> None:
    with pytest.raises(InvalidInput, match="n_ctx"):
        make(store).rewrite([{"role": "user", "content": "x"}], n_ctx)


def test_one_session_busy_does_not_block_another(store: Store) -> None:
    pipe = make(store)
    a: Msgs = [{"role": "user", "content": "session a"}]
    b: Msgs = [{"role": "user", "content": "session b"}]
    lock_a = pipe._locks.get(session_key(a))
    done = threading.Event()
    results: list[Any] = []

    def run_b() -> None:
        results.append(pipe.rewrite(b, N_CTX))
        done.set()

    with lock_a:  # session a is mid-rewrite
        worker = threading.Thread(target=run_b)
        worker.start()
        assert done.wait(timeout=10), "session b waited for session a"
    worker.join(timeout=10)
    assert results[0].messages == b


def test_concurrent_sessions_each_get_their_own_correct_wire(store: Store) -> None:
    pipe = make(store)
    convs = []
    for n in range(4):
        msgs = conversation(15)
        msgs[1] = {"role": "user", "content": f"task number {n}"}
        convs.append(msgs)
    failures: list[str] = []

    def drive(msgs: Msgs) -> None:
        for request in requests(msgs):
            result = pipe.rewrite(copy.deepcopy(request), N_CTX)
            if expand(store, result.messages) != request:
                failures.append(result.session_id)

    threads = [threading.Thread(target=drive, args=(m,)) for m in convs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not failures
    assert len({session_key(m[:2]) for m in convs}) == 4


def test_identical_openings_with_different_session_hints_keep_separate_frontiers(
    store: Store,
) -> None:
    pipe = make(store)
    msgs = conversation(15)
    first = [r for r in requests(msgs)]
    a = pipe.rewrite(copy.deepcopy(first[-1]), N_CTX, session_hint="agent-a")
    b = pipe.rewrite(copy.deepcopy(first[2]), N_CTX, session_hint="agent-b")
    assert a.session_id != b.session_id
    # agent a's next turn keeps its own prefix although agent b started over in between
    again = pipe.rewrite(copy.deepcopy(first[-1]), N_CTX, session_hint="agent-a")
    assert again.session_id == a.session_id and again.messages == a.messages
    assert again.prefix_kept
    assert pipe.rewrite(copy.deepcopy(first[-1]), N_CTX).session_id not in {
        a.session_id,
        b.session_id,
    }


def test_a_head_that_fills_the_band_leaves_compaction_to_the_ceiling(store: Store) -> None:
    # a 1,500-token system prompt in a 4096 window: after a compaction the head and the
    # tail already sit near the high water (2048), so firing there would buy a turn or two
    pipe = make(store)
    msgs = conversation(40, size=15)
    msgs[0] = {"role": "system", "content": bulky("rules", 100)}
    results = [pipe.rewrite(request, N_CTX) for request in requests(msgs)]
    windowed = [i for i, r in enumerate(results) if r.windowed]
    assert len(windowed) >= 3
    first = windowed[0]
    assert all(results[i].emergency for i in windowed[1:])  # only the ceiling fired
    waited = [r for r in results[first + 1 :] if r.wire_tokens > 2048 and not r.windowed]
    assert waited  # the high water was crossed without a compaction
    assert all(r.wire_tokens <= 3481 for r in results)
    kept = sum(history_kept(r) for r in results[1:]) / (len(results) - 1)
    assert kept >= 0.75


def test_a_windowed_chat_still_alternates_user_and_assistant(store: Store) -> None:
    # strict chat templates (older Mistral, Gemma) refuse two user messages in a row
    msgs: Msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    for t in range(40):
        msgs += [
            {"role": "assistant", "content": f"answer {t}: " + "detail " * 60},
            {"role": "user", "content": f"question {t}: " + "context " * 60},
        ]
    pipe = make(store)
    windowed = 0
    for request in requests(msgs):
        result = pipe.rewrite(request, N_CTX, alternate=True)
        windowed += result.windowed
        roles = [m["role"] for m in result.messages[1:]]
        assert all(a != b for a, b in itertools.pairwise(roles)), roles
        assert expand(store, result.messages) == request
    assert windowed >= 2
    assert any(is_range_stub(m) and m["role"] == "assistant" for m in result.messages)


def test_a_head_stubbed_in_an_emergency_is_sent_verbatim_again_once_it_fits(
    store: Store,
) -> None:
    n_ctx = 1800  # ceiling 1530
    system = {"role": "system", "content": bulky("rules", 45)}
    msgs: Msgs = [system, {"role": "user", "content": "go"}]
    calls = [{"id": f"c{k}", "type": "function", "function": {"name": "f"}} for k in range(8)]
    msgs.append({"role": "assistant", "content": None, "tool_calls": calls})
    msgs += [  # none large (window.large): each would keep its first and last lines
        {"role": "tool", "tool_call_id": f"c{k}", "content": bulky(f"out{k}", 20)}
        for k in range(8)  # even as stubs, eight answers leave no room for the head
    ]
    pipe = make(store)
    flooded = pipe.rewrite(msgs, n_ctx)  # head + this tail alone break the ceiling
    assert flooded.messages[0] != system
    assert flooded.wire_tokens <= 1530
    for t in range(4):  # short turns push the flood out of the tail
        msgs += [{"role": "assistant", "content": f"ok {t}"}, {"role": "user", "content": "next"}]
    calm = pipe.rewrite(msgs, n_ctx)
    assert calm.messages[0] == system
    assert calm.break_cause == "stubs_restored"
    assert calm.wire_tokens <= 1530
    assert expand(store, calm.messages) == msgs


# -- several proxy processes on one store: the store's session state is the truth --------
# Each pipeline below has its own Store object on one SQLite file (two processes, or two
# machines on a team store, behind a load balancer).


def alone(path: Path, msgs: Msgs) -> list[RewriteResult]:
    with Store(path, counter=EstimateCounter()) as store:
        pipe = make(store)
        return [pipe.rewrite(copy.deepcopy(r), N_CTX) for r in requests(msgs)]


def test_a_session_served_in_turn_by_two_processes_gets_the_wire_of_one(tmp_path: Path) -> None:
    msgs = conversation(40, every=2)
    reference = alone(tmp_path / "alone.db", msgs)
    assert sum(r.windowed for r in reference) >= 3, "the conversation must be paged, repeatedly"
    shared = tmp_path / "shared.db"
    with (
        Store(shared, counter=EstimateCounter()) as one,
        Store(shared, counter=EstimateCounter()) as two,
    ):
        pipes = [make(one), make(two)]
        for i, request in enumerate(requests(msgs)):
            result = pipes[i % 2].rewrite(copy.deepcopy(request), N_CTX)
            assert result.messages == reference[i].messages, f"request {i}"


def test_a_process_whose_copy_went_stale_follows_the_store_and_says_so(tmp_path: Path) -> None:
    msgs = conversation(40, every=2)
    turns = list(requests(msgs))
    reference = alone(tmp_path / "alone.db", msgs)
    # the first turn after which the other process compacts: the state moves under us
    moved = next(i for i, r in enumerate(reference) if i > 0 and r.windowed)
    shared = tmp_path / "shared.db"
    with (
        Store(shared, counter=EstimateCounter()) as one,
        Store(shared, counter=EstimateCounter()) as two,
    ):
        first, other = make(one), make(two)
        for request in turns[:moved]:
            first.rewrite(copy.deepcopy(request), N_CTX)
        before = one.state_version(STATE_NAMESPACE, reference[0].session_id)
        assert other.rewrite(copy.deepcopy(turns[moved]), N_CTX).windowed
        assert one.state_version(STATE_NAMESPACE, reference[0].session_id) > before
        back = first.rewrite(copy.deepcopy(turns[moved + 1]), N_CTX)
    assert back.messages == reference[moved + 1].messages
    assert back.break_cause == "moved"


def test_a_turn_whose_session_another_process_compacted_meanwhile_is_rebuilt_on_that(
    tmp_path: Path, shared_store: Path | str
) -> None:
    # Two processes serve one session at once: ``other`` compacts and saves while ``mine``
    # is rewriting a later request from the state before. Saved over the version it read,
    # mine's state would overwrite an acknowledged compaction (last writer wins); instead
    # mine is rebuilt on it: the outcome is that of serving the two one after the other.
    msgs = conversation(40, every=2)
    turns = list(requests(msgs))
    windowed = [i for i, r in enumerate(alone(tmp_path / "alone.db", msgs)) if r.windowed]
    i = windowed[1]
    with Store(tmp_path / "serial.db", counter=EstimateCounter()) as serial_store:
        serial = make(serial_store)
        for request in turns[: i + 1]:
            serial.rewrite(copy.deepcopy(request), N_CTX)
        after = [serial.rewrite(copy.deepcopy(r), N_CTX) for r in turns[i + 1 : i + 3]]
        saved = serial_store.get_state(STATE_NAMESPACE, after[0].session_id)
    with (
        Store(shared_store, counter=EstimateCounter()) as one,
        Store(shared_store, counter=EstimateCounter()) as two,
    ):
        other, mine = make(one), make(two)
        for request in turns[:i]:
            other.rewrite(copy.deepcopy(request), N_CTX)
        mine.rewrite(copy.deepcopy(turns[i - 1]), N_CTX)  # mine is current too
        meanwhile: list[RewriteResult] = []
        save = two.replace_state

        def other_saves_first(namespace: str, key: str, value: Any, expected: int) -> int:
            if not meanwhile:  # the interleaving: other's turn lands between read and save
                meanwhile.append(other.rewrite(copy.deepcopy(turns[i]), N_CTX))
            return save(namespace, key, value, expected)

        two.replace_state = other_saves_first  # type: ignore[method-assign]
        late = mine.rewrite(copy.deepcopy(turns[i + 1]), N_CTX)
        assert meanwhile[0].windowed, "the other process compacted in between"
        assert late.messages == after[0].messages
        assert late.break_cause == "moved"
        # the next turn, whichever process serves it, follows both acknowledged turns
        assert other.rewrite(copy.deepcopy(turns[i + 2]), N_CTX).messages == after[1].messages
        assert two.get_state(STATE_NAMESPACE, late.session_id) == saved


def test_a_steady_turn_reads_only_the_version_of_the_session_state(
    tmp_path: Path,
) -> None:
    msgs = conversation(12)
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        pipe = make(store)
        for request in requests(msgs):
            pipe.rewrite(copy.deepcopy(request), N_CTX)
        reads: list[str] = []
        real_get, real_version = store.get_state_versioned, store.state_version

        def get(namespace: str, key: str) -> tuple[Any, int]:
            reads.append("value")
            return real_get(namespace, key)

        def version(namespace: str, key: str) -> int:
            reads.append("version")
            return real_version(namespace, key)

        store.get_state_versioned = get  # type: ignore[method-assign]
        store.state_version = version  # type: ignore[method-assign]
        longer = [*msgs, {"role": "user", "content": "and now?"}]
        result = pipe.rewrite(longer, N_CTX)
    assert history_kept(result)
    assert reads == ["version"]


def served(path: Path, sequence: list[Msgs]) -> list[RewriteResult]:
    """Each request of ``sequence`` rewritten in turn by one process on a store of its own."""
    with Store(path, counter=EstimateCounter()) as store:
        pipe = make(store)
        return [pipe.rewrite(copy.deepcopy(r), N_CTX) for r in sequence]


def test_a_side_request_another_process_serves_leaves_the_frontier_alone(
    tmp_path: Path,
) -> None:
    msgs = conversation(30)
    turns = list(requests(msgs))
    reference = alone(tmp_path / "alone.db", msgs)
    side = [*msgs[:2], {"role": "user", "content": "Title this session in five words."}]
    shared = tmp_path / "shared.db"
    with (
        Store(shared, counter=EstimateCounter()) as one,
        Store(shared, counter=EstimateCounter()) as two,
    ):
        main, other = make(one), make(two)
        for request in turns[:-1]:
            main.rewrite(copy.deepcopy(request), N_CTX)
        session = reference[0].session_id
        frontier = one.get_state_versioned(STATE_NAMESPACE, session)
        assert frontier[0]["paged"] > 2  # the conversation was paged out
        answered = other.rewrite(copy.deepcopy(side), N_CTX)
        assert answered.messages == side
        assert one.get_state_versioned(STATE_NAMESPACE, session) == frontier
        last = main.rewrite(copy.deepcopy(turns[-1]), N_CTX)
    assert last.messages == reference[-1].messages
    assert history_kept(last)


def test_an_edited_history_continued_in_another_process_becomes_the_frontier(
    tmp_path: Path,
) -> None:
    msgs = conversation(30)
    turns = list(requests(msgs))
    edited = copy.deepcopy(msgs)
    edited[4]["content"] = "rewritten by the client"
    onward = [*edited, *conversation(31)[-2:]]
    reference = served(tmp_path / "alone.db", [*turns, edited, onward])
    shared = tmp_path / "shared.db"
    with (
        Store(shared, counter=EstimateCounter()) as one,
        Store(shared, counter=EstimateCounter()) as two,
    ):
        first, other = make(one), make(two)
        for request in turns:
            first.rewrite(copy.deepcopy(request), N_CTX)
        assert other.rewrite(copy.deepcopy(edited), N_CTX).break_cause == "client_edit"
        continued = first.rewrite(copy.deepcopy(onward), N_CTX)
        again = make(two).rewrite(copy.deepcopy(onward), N_CTX)  # a restarted process
    assert continued.messages == reference[-1].messages
    assert again.messages == continued.messages
    assert again.break_cause == "restart"


def test_a_newest_message_too_big_to_fit_shows_its_first_and_last_lines(store: Store) -> None:
    pipe = make(store)
    body = "\n".join(f"row {i}: value={i * 7} status=ok path=/srv/big/{i}" for i in range(3000))
    msgs: Msgs = [
        {"role": "system", "content": "You are a careful agent."},
        {"role": "user", "content": "Dump the table."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "dump", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "dump", "content": body},
    ]
    result = pipe.rewrite(msgs, N_CTX)
    shown = str(result.messages[-1]["content"])
    assert is_stub(shown) and "row 0: value=0" in shown and "row 2999: value=20993" in shown
    assert "lines not shown: offload_read(ref=" in shown and "offset=" in shown
    assert result.wire_tokens <= Budget.of(pipe.settings, N_CTX).ceiling
    assert expand(store, result.messages) == msgs


def _stored_times(store: Store) -> dict[str, set[float | None]]:
    """The event times of what the proxy stored, by source: message stubs, range parts."""
    out: dict[str, set[float | None]] = {}
    rows = store.conn.execute(Sql("SELECT source, event_time FROM entries")).fetchall()
    for source, when in rows:
        out.setdefault("range" if source.startswith("proxy:") else source, set()).add(when)
    return out


def test_a_message_timestamp_becomes_the_event_time_of_what_is_stored_from_it(
    store: Store,
) -> None:
    msgs = conversation(40, every=4)
    for k, m in enumerate(msgs):
        m["timestamp"] = 1_683_504_000 + 60 * k  # a client's own field: seconds
    pipe = make(store)
    for request in requests(msgs):
        pipe.rewrite(request, 8192)
    stored = store.conn.execute(Sql("SELECT source, topic, event_time FROM entries")).fetchall()
    stubs = [(topic, when) for source, topic, when in stored if source == "proxy"]
    ranges = [(topic, when) for source, topic, when in stored if source != "proxy"]
    assert stubs and ranges
    at = {m.get("tool_call_id"): m["timestamp"] for m in msgs}
    for topic, when in stubs:  # "tool output read_log (id call_10)": that message's own
        assert when == at[topic.rsplit(" ", 1)[1].rstrip(")")]
    for topic, when in ranges:  # "conversation #2-#13: ...": the newest message it holds
        last = int(topic.split(":")[0].rsplit("#", 1)[1])
        assert when == msgs[last]["timestamp"]


def test_a_system_prompts_date_of_another_day_is_the_event_time_of_what_is_stored(
    tmp_path: Path,
) -> None:
    for today, want in ((1_796_000_000.0, 1_683_504_000.0), (1_683_540_000.0, None)):
        clock = functools.partial(float, today)
        with Store(tmp_path / f"{today}.db", counter=EstimateCounter(), clock=clock) as s:
            msgs = conversation(40)
            msgs[0]["content"] = "You are a careful agent.\nToday's date: 2023-05-08\n"
            pipe = make(s)
            for request in requests(msgs):
                pipe.rewrite(request, N_CTX)
            times = _stored_times(s)
        assert times and all(ws == {want} for ws in times.values())


def test_a_bulky_call_arriving_while_the_head_and_tail_overflow_is_stubbed_without_a_break(
    store: Store,
) -> None:
    # a 2,000-token system prompt in a 4096 window, and calls that each carry a whole file:
    # the head and two such calls in the tail already break the ceiling (3481)
    msgs: Msgs = [
        {"role": "system", "content": bulky("rules", 130)},
        {"role": "user", "content": "Refactor the module."},
    ]
    pipe = make(store, recall_ratio=0)
    results: list[RewriteResult] = []
    sent: list[Msgs] = []
    for t in range(8):
        args = '{"path": "m.py", "body": "' + bulky(f"f{t}", 60).replace("\n", "\\n") + '"}'
        call = {"id": f"w{t}", "type": "function", "function": {"name": "write", "arguments": args}}
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": f"w{t}", "content": f"wrote {t}"})
        sent.append(list(msgs))
        results.append(pipe.rewrite(copy.deepcopy(msgs), N_CTX))
    arrived = [k for k, r in enumerate(results) if r.emergency and not r.windowed]
    assert arrived  # the ceiling acted without moving the frontier...
    for k in arrived:
        wire, request = results[k].messages, sent[k]
        assert results[k].prefix_kept  # ...so the previous wire stayed a prefix
        assert wire[-1] == request[-1]  # the newest message goes verbatim
        assert wire[-2] != request[-2]  # the call just made goes as a stub
        assert expand(store, wire) == request
    kept = sum(r.prefix_kept for r in results[1:])
    assert kept > sum(r.windowed for r in results)
    assert all(r.wire_tokens <= 3481 for r in results)
    assert expand(store, results[-1].messages) == msgs


def test_a_range_stub_for_a_small_window_is_shorter_and_names_the_same_part(store: Store) -> None:
    pipe = make(store)
    msgs = conversation(12, size=20)
    for t, m in enumerate(msgs[2::2]):  # each call a tool of its own, with a word about it
        m["content"] = f"Reading log {t} to find where the checksum of batch {t} went wrong."
        m["tool_calls"][0]["function"]["name"] = f"read_log_{t}"
    full, part = pipe.stubs.render_range("s", msgs, 2, 2, 20, None, 5000)
    small, same = pipe.stubs.render_range("s", msgs, 2, 2, 20, None, 5000, detail=0.5)
    assert small.tokens < full.tokens
    assert small.ref == full.ref and same.body == part.body  # the same messages behind it
    assert "contents: " in small.text
    gist = [line for line in full.text.splitlines() if line.startswith("gist: ")]
    assert gist and len(gist[0]) > len(next(x for x in small.text.splitlines() if "gist" in x))
