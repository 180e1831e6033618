"""Message stubs: a near duplicate of an earlier body gets a delta stub."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from offload.config import ProxySettings
from offload.core.hashing import short_ref, text_hash
from offload.core.tokens import EstimateCounter, estimate_tokens
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.stubs.expand import expand
from offload.proxy.rewrite.stubs.message_stubs import StubMaker
from offload.proxy.rewrite.stubs.parts import Earlier
from offload.store.store import Store

Msgs = list[dict[str, Any]]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as s:
        yield s


def source_file(version: int = 0, functions: int = 40) -> str:
    """A module read by a tool; ``version`` changes the body of one function."""
    return "\n".join(
        f"def step_{i}(value):\n    return value * {i + (version if i == 7 else 0)}"
        for i in range(functions)
    )


def reads(*bodies: str) -> Msgs:
    """A conversation: the task, then one read_file call and answer per body."""
    msgs: Msgs = [
        {"role": "system", "content": "You are a careful agent."},
        {"role": "user", "content": "Fix the module."},
    ]
    for t, body in enumerate(bodies):
        call = {"name": "read_file", "arguments": '{"path": "m.py"}'}
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"call_{t}", "type": "function", "function": call}],
            }
        )
        msgs.append(
            {"role": "tool", "tool_call_id": f"call_{t}", "name": "read_file", "content": body}
        )
    return msgs


def stub_of(maker: StubMaker, msgs: Msgs, i: int, gain: float = 2.0) -> Any:
    return maker.worth_stubbing(msgs[i], "read_file", 50, gain=gain, earlier=Earlier(msgs, i))


def test_a_file_read_again_with_one_line_changed_gets_a_delta_stub_naming_line_and_call(
    store: Store,
) -> None:
    first, second = source_file(), source_file(version=5)
    msgs = reads(first, second)
    maker = StubMaker(store, EstimateCounter(), scope="proxy")
    made = stub_of(maker, msgs, 5)
    ref = short_ref(text_hash(second))
    assert made is not None and made.base == text_hash(first)
    lines = made.stub.split("\n")
    assert lines[0].endswith(f"stored as {ref}]")
    assert lines[1] == (
        f"same as the earlier read_file output {short_ref(text_hash(first))} except:"
    )
    assert lines[2:4] == ["@@ -16 +16 @@", "+    return value * 12"]
    assert lines[4] == f'read: offload_read(ref="{ref}") or `offload cat {ref}`'
    assert not any(line.startswith("gist: ") for line in lines)


def test_the_call_a_delta_stub_names_returns_the_new_body_byte_exact(store: Store) -> None:
    first, second = source_file(), source_file(version=5) + "\r\n\ttrailing \u00e9\n"
    msgs = reads(first, second)
    maker = StubMaker(store, EstimateCounter(), scope="proxy")
    made = stub_of(maker, msgs, 5)
    assert made is not None and made.base
    wire = maker.stubbed(msgs[5], made, "read_file", Earlier(msgs, 5))
    assert store.read(short_ref(made.digest), "proxy") == second
    assert store.read(short_ref(made.base), "proxy") == first  # the body it names, too
    assert expand(store, [*msgs[:5], wire], "proxy") == msgs


def test_a_delta_stub_is_smaller_than_the_plain_stub(store: Store) -> None:
    msgs = reads(source_file(), source_file(version=5))
    maker = StubMaker(store, EstimateCounter(), scope="proxy")
    delta = stub_of(maker, msgs, 5)
    plain = maker.message_stub(msgs[5], "read_file")
    assert delta is not None and delta.base
    assert delta.stub_tokens < plain.stub_tokens
    assert len(delta.stub) < len(plain.stub)


def test_unrelated_content_gets_the_plain_stub(store: Store) -> None:
    logs = "\n".join(f"log entry {i}: status=ok latency={i * 3}ms" for i in range(80))
    msgs = reads(source_file(), logs)
    maker = StubMaker(store, EstimateCounter(), scope="proxy")
    made = stub_of(maker, msgs, 5)
    assert made == maker.message_stub(msgs[5], "read_file")
    assert made is not None and not made.base and "\ngist: " in made.stub


def test_the_same_body_read_again_gets_its_own_plain_stub(store: Store) -> None:
    msgs = reads(source_file(), source_file())
    maker = StubMaker(store, EstimateCounter(), scope="proxy")
    assert stub_of(maker, msgs, 5) == maker.message_stub(msgs[5], "read_file")


def test_with_delta_stubs_off_a_near_duplicate_gets_the_plain_stub(store: Store) -> None:
    msgs = reads(source_file(), source_file(version=5))
    maker = StubMaker(store, EstimateCounter(), scope="proxy", deltas=False)
    assert stub_of(maker, msgs, 5) == maker.message_stub(msgs[5], "read_file")


def test_a_near_duplicate_further_back_than_the_lookback_gets_the_plain_stub(
    store: Store,
) -> None:
    fillers = [f"short answer {i}" for i in range(40)]
    msgs = reads(source_file(), *fillers, source_file(version=5))
    maker = StubMaker(store, EstimateCounter(), scope="proxy")
    last = len(msgs) - 1
    assert stub_of(maker, msgs, last) == maker.message_stub(msgs[last], "read_file")


def test_the_similarity_test_on_a_large_body_stays_bounded(store: Store) -> None:
    big = source_file(functions=8000)  # 16,000 lines, ~300 KB
    msgs = reads(*[source_file(version=v, functions=8000) for v in range(12)], big)
    maker = StubMaker(store, EstimateCounter(), scope="proxy")
    last = len(msgs) - 1
    # CPU time of this thread, not the wall clock: the bound holds whatever the machine's load
    started = time.thread_time()
    made = stub_of(maker, msgs, last)
    first_call = time.thread_time() - started
    assert made is not None and made.base
    # 8 candidates shaped and one diffed, each linear: well under a second of CPU
    assert first_call < 10.0
    again = time.thread_time()
    assert stub_of(maker, msgs, last) == made  # decided once per content and candidates
    assert time.thread_time() - again < first_call


def test_a_re_read_file_is_sent_as_a_delta_stub_and_the_wire_expands_back_exactly(
    store: Store,
) -> None:
    bodies = [source_file(version=t) if t % 4 == 0 else f"ok {t}" for t in range(40)]
    msgs = reads(*bodies)
    pipe = Pipeline(store, ProxySettings(), EstimateCounter())
    deltas = []
    for k in range(3, len(msgs) + 1, 2):
        result = pipe.rewrite(msgs[:k], 8192)
        assert expand(store, result.messages) == msgs[:k]
        deltas += [
            m["content"]
            for m in result.messages
            if m["role"] == "tool" and "\nsame as the " in str(m["content"])
        ]
    assert deltas
    for stub in deltas:  # each names an earlier body the store holds
        said = stub.split("\nsame as the ", 1)[1].split("\n", 1)[0]
        base = "ctx:sha256:" + said.split("ctx:sha256:", 1)[1].split(" ", 1)[0]
        assert store.read(base).startswith("def step_0(value):")


def test_with_delta_stubs_off_the_pipeline_sends_no_delta_stub(store: Store) -> None:
    bodies = [source_file(version=t) if t % 4 == 0 else f"ok {t}" for t in range(40)]
    msgs = reads(*bodies)
    pipe = Pipeline(store, ProxySettings(delta_stubs=False), EstimateCounter())
    for k in range(3, len(msgs) + 1, 2):
        result = pipe.rewrite(msgs[:k], 8192)
        assert not any("\nsame as the " in str(m["content"]) for m in result.messages)


def test_a_delta_stub_never_costs_more_than_the_plain_stub(store: Store) -> None:
    first = source_file(functions=60)
    lines = first.split("\n")
    many = "\n".join(
        f"    return value - {i}  # rewritten to subtract" if i % 10 == 1 else line
        for i, line in enumerate(lines)
    )
    msgs = reads(first, many)
    maker = StubMaker(store, EstimateCounter(), scope="proxy")
    made = stub_of(maker, msgs, 5, gain=1.0)
    plain = maker.message_stub(msgs[5], "read_file")
    assert made is not None
    assert made.stub_tokens <= plain.stub_tokens
    assert made.base  # still a delta stub: where the changes start, the rest counted
    assert "\n@@ -2 +2 @@\n" in made.stub and "more new lines\n" in made.stub


def test_a_parts_token_count_taken_a_message_at_a_time_equals_the_whole_transcripts() -> None:
    from offload.core.tokens import default_counter
    from offload.proxy.rewrite import transcript
    from offload.proxy.rewrite.stubs.parts import part_tokens

    counter = default_counter()
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "fix it (see below):\n\n"},
        {"role": "assistant", "content": "  ", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py\nb.py)\n\n## #3 not a header\n  "},
        {"role": "user", "content": "'s done? 123\n"},
        {"role": "assistant", "content": ""},
    ]  # fmt: skip
    text = transcript.render(messages, 7, "# conversation x, messages #7-#11").text
    assert part_tokens(counter, text) == counter.count(text)


class CountingCounter(EstimateCounter):
    """An estimate that remembers how many texts it was asked to count."""

    def __init__(self) -> None:
        self.asked = 0

    def count(self, text: str) -> int:
        self.asked += 1
        return super().count(text)


def test_shrunk_caches_keep_the_newest_contents_and_make_the_same_stubs_again(
    store: Store,
) -> None:
    counter = CountingCounter()
    maker = StubMaker(store, counter, scope="proxy", cache_size=64)
    outputs = [f"output {i}\n" + "\n".join(f"row {i}.{j} ok" for j in range(40)) for i in range(64)]
    msg = [
        {"role": "tool", "content": text, "tool_call_id": f"c{i}"} for i, text in enumerate(outputs)
    ]
    stubs = [maker.message_stub(m, "run") for m in msg]
    maker.shrink_caches(16)  # keep 64 // 16 = 4 of each
    asked = counter.asked
    assert maker.content_tokens(outputs[-1]) == estimate_tokens(outputs[-1])
    assert counter.asked == asked  # one of the newest: still cached
    assert [maker.message_stub(m, "run") for m in msg] == stubs  # made again, the same
    assert counter.asked > asked  # the older ones were counted again


def test_a_quiet_proxy_cuts_its_near_duplicate_shapes_too(store: Store) -> None:
    maker = StubMaker(store, CountingCounter(), scope="proxy")
    for i in range(1000):  # ~5 KB each, about a third of the bound in all
        maker._shapes.get(f"output {i}\n" + "\n".join(f"row {i}.{j} ok" for j in range(40)))
    held = len(maker._shapes)
    maker.shrink_caches(16)
    assert 0 < len(maker._shapes) < held
    assert maker._shapes._items.weight <= maker._shapes.max_bytes // 16


class TwiceCounter(EstimateCounter):
    """A counter unlike the store's own: what the entry's count follows shows through."""

    def count(self, text: str) -> int:
        return 2 * super().count(text)


def test_a_stubbed_message_is_stored_with_the_token_count_its_stub_states(store: Store) -> None:
    maker = StubMaker(store, TwiceCounter(), scope="proxy")
    text = "\n".join(f"log row {i}: all systems nominal" for i in range(300))
    msg = {"role": "tool", "content": text, "tool_call_id": "c1"}
    made = maker.message_stub(msg, "run")
    maker.stubbed(msg, made, "run")
    entry = store.resolve("ctx:sha256:" + made.digest, "proxy")
    assert entry.tokens == made.tokens == 2 * estimate_tokens(text)
    assert f"{made.tokens:,}" in made.stub or str(made.tokens) in made.stub
