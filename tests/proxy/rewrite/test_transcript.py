"""Paged-out messages as a transcript, and the entries the proxy stores for them."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offload.config import ProxySettings
from offload.core.hashing import text_hash
from offload.core.tokens import EstimateCounter
from offload.proxy.rewrite import transcript
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.stubs import message_stubs
from offload.proxy.rewrite.stubs.expand import expand, is_range_stub
from offload.proxy.rewrite.stubs.message_stubs import StubMaker
from offload.store.models import Filters
from offload.store.store import Store

Msgs = list[dict[str, Any]]


def call(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": cid,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def tool_run() -> Msgs:
    return [
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [call("c1", "bash", {"command": "ls src"})],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "bash", "content": "main.py\nutil.py"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("c2", "edit", {"path": "src/util.py", "text": "x"})],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "edited"},
    ]


def test_a_transcript_has_a_header_per_message_then_its_text_as_lines() -> None:
    got = transcript.render(tool_run(), 5, "# title")
    rows = got.text.split("\n")
    assert rows[0] == "# title"
    assert rows[got.lines[0] - 1] == "## #5 assistant · calls bash"
    assert rows[got.lines[1] - 1] == "## #6 tool · bash (id c1)"
    assert rows[got.lines[1]] == "main.py" and rows[got.lines[1] + 1] == "util.py"
    assert rows[got.lines[3] - 1] == "## #8 tool · (id c2)"


def test_each_tool_call_is_listed_with_its_key_argument_line_and_answer() -> None:
    got = transcript.render(tool_run(), 5)
    rows = got.text.split("\n")
    first, second = got.calls
    assert (first.name, first.key, first.result) == ("bash", "ls src", "main.py\nutil.py")
    assert rows[first.line - 1].startswith("-> call bash(id c1): ")
    assert (second.name, second.key, second.result) == ("edit", "src/util.py", "edited")


def test_line_breaks_in_call_arguments_ids_and_names_keep_every_line_number_true() -> None:
    # pretty-printed arguments (or a hostile call id) made a row of several lines: every
    # message and call after it was pointed at the wrong line
    fn = {"name": "write\nfile", "arguments": '{\n  "path": "a.py"\n}'}
    call: dict[str, Any] = {"id": "c\nx", "type": "function", "function": fn}
    msgs: list[dict[str, Any]] = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c\nx", "content": "done"},
        {"role": "user", "content": "next"},
    ]
    got = transcript.render(msgs, 3)
    rows = got.text.split("\n")
    assert [rows[at - 1][:6] for at in got.lines] == ["## #3 ", "## #4 ", "## #5 "]
    assert rows[got.calls[0].line - 1].startswith("-> call write")
    assert rows[got.lines[2]] == "next"


def test_the_contents_list_names_each_distinct_call_once_within_the_limit() -> None:
    msgs = tool_run() + tool_run()
    rows = transcript.contents(transcript.render(msgs, 0).calls, 4)
    assert [title.split(" →")[0] for _, title in rows] == ["bash ls src", "edit src/util.py"]


def test_topic_and_summary_name_the_task_the_tools_and_the_files() -> None:
    topic, summary = transcript.describe(tool_run(), "Fix the\nbug", 5)
    assert topic.startswith("conversation #5-#8:")
    assert "task: Fix the bug" in summary
    assert "tools: bash×1, edit×1" in summary
    assert "src/util.py" in summary
    assert "\n" not in topic + summary


@given(st.text(max_size=300))
def test_untrusted_text_becomes_one_line_without_offload_markers(text: str) -> None:
    line = transcript.one_line(text, 80)
    assert "\n" not in line and "\r" not in line and len(line) <= 80
    assert "[offload:" not in line.lower() and "<offload:body" not in line.lower()
    assert "</offload:body" not in line.lower()


# -- what the pipeline stores ------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as s:
        yield s


def long_session(turns: int) -> Msgs:
    msgs: Msgs = [
        {"role": "system", "content": "You are a careful agent."},
        {"role": "user", "content": "Investigate the service logs."},
    ]
    for t in range(turns):
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call(f"c{t}", "read_log", {"path": f"logs/{t}.log"})],
            }
        )
        body = "\n".join(f"entry {t}.{i} status=ok code=ZEBRA{t}X{i}" for i in range(30))
        msgs.append({"role": "tool", "tool_call_id": f"c{t}", "name": "read_log", "content": body})
    return msgs


def paged(store: Store, scope: str = "/work/project") -> tuple[Pipeline, Msgs, Msgs]:
    pipe = Pipeline(store, ProxySettings(), EstimateCounter(), scope=scope)
    msgs = long_session(40)
    wire = pipe.rewrite(msgs, 4096).messages
    return pipe, msgs, wire


def test_a_paged_range_is_searchable_by_its_words_and_lands_on_the_line(store: Store) -> None:
    _, _, wire = paged(store)
    assert any(is_range_stub(m) for m in wire)
    hits = store.search("ZEBRA3X17", Filters(scope="/work/project"), limit=3)
    assert hits, "the paged-out tool output is found in the pipeline's scope"
    hit = hits[0]
    assert hit.entry.source.startswith("proxy:"), "it lies in a paged-out part"
    body = store.body(hit.entry).split("\n")
    assert "ZEBRA3X17" in body[hit.match_line - 1]
    assert any(row.startswith("## #") for row in body[: hit.match_line])


def test_every_stub_still_resolves_to_the_exact_messages(store: Store) -> None:
    _, msgs, wire = paged(store)
    assert expand(store, wire) == msgs


def test_paged_entries_carry_a_topic_and_a_summary_and_show_in_peek(store: Store) -> None:
    paged(store)
    entries = store.entries(Filters(scope="/work/project"), limit=100)
    assert entries and all(e.topic and e.summary for e in entries)
    assert store.peek("/work/project")["entries"] == len(entries)
    part = next(e for e in entries if e.source.startswith("proxy:"))
    assert "read_log" in part.summary and "logs/" in part.summary


def test_the_range_stub_lists_its_calls_and_the_exact_read_and_search_calls(store: Store) -> None:
    _, _, wire = paged(store)
    stub = next(m["content"] for m in wire if is_range_stub(m))
    rows = stub.split("\n")
    assert any(r.startswith("contents: L") and "read_log logs/" in r for r in rows)
    # a small window (4096): the read and search calls of the proxy's tools, and the CLI
    assert any(r.startswith('read: offload_read(ref="ctx:sha256:') for r in rows)
    assert any(r.startswith('search: offload_search(query="…")') for r in rows)


def test_content_stored_under_another_scope_is_stored_in_this_one_too(store: Store) -> None:
    text = "an old proxy stored QUOKKA42 under its own scope"
    digest = text_hash(text)
    StubMaker(store, EstimateCounter(), scope="proxy").ensure_stored(text, digest, source="proxy")
    StubMaker(store, EstimateCounter(), scope="/p").ensure_stored(text, digest, source="proxy")
    assert store.search("QUOKKA42", Filters(scope="/p"), limit=1)


def range_parts(store: Store, ref: str) -> list[dict[str, Any]]:
    """The stored parts along a range stub's chain, newest first."""
    docs: list[dict[str, Any]] = []
    cursor: str | None = ref
    while cursor is not None:
        docs.append(json.loads(store.body(store.resolve(cursor), original=True)))
        cursor = docs[-1]["earlier"]
    return docs


@pytest.mark.slow
def test_page_outs_merge_into_few_large_parts_that_restore_byte_for_byte(store: Store) -> None:
    pipe = Pipeline(store, ProxySettings(), EstimateCounter(), scope="/work/project")
    msgs = long_session(60)
    wire: Msgs = []
    for k in range(4, len(msgs) + 1, 2):  # turn by turn: many page-outs
        wire = pipe.rewrite(msgs[:k], 2048).messages
    stub = next(m["content"] for m in wire if is_range_stub(m))
    ref = stub.split("\n", 1)[0].rsplit("stored as ", 1)[1].rstrip("]")
    parts = range_parts(store, ref)
    page_outs = store.count(Filters(scope="/work/project", source_prefix="proxy:"))
    assert page_outs > 3 and len(parts) == 1, "every page-out so far fits one merged part"
    assert parts[0]["first"] == 2 and parts[0]["messages"] == msgs[2 : parts[0]["last"] + 1]
    assert expand(store, wire) == msgs


def test_a_paged_message_is_found_once_however_often_its_range_grew(store: Store) -> None:
    pipe = Pipeline(store, ProxySettings(), EstimateCounter(), scope="/work/project")
    msgs = long_session(60)
    wires: list[Msgs] = []
    for k in range(4, len(msgs) + 1, 2):  # turn by turn: many page-outs, each merged
        wires.append(pipe.rewrite(msgs[:k], 2048).messages)
    parts = Filters(scope="/work/project", source_prefix="proxy:")
    assert store.count(parts) > 3
    found = 0
    for t in range(60):
        code = f"ZEBRA{t}X7"
        hits = [h for h in store.search(code, parts, limit=20) if code in h.text]
        assert len(hits) <= 1, (code, [h.entry.id for h in hits])
        found += len(hits)
    assert found > 20  # the paged ones, each once
    # every stub each wire carried still restores its messages byte for byte
    for k, wire in zip(range(4, len(msgs) + 1, 2), wires, strict=True):
        assert expand(store, wire) == msgs[:k]


def test_a_part_stops_taking_in_earlier_parts_at_the_merge_size(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(message_stubs, "MERGE_BYTES", 6000)
    pipe = Pipeline(store, ProxySettings(), EstimateCounter(), scope="/work/project")
    msgs = long_session(60)
    wire: Msgs = []
    for k in range(4, len(msgs) + 1, 2):
        wire = pipe.rewrite(msgs[:k], 2048).messages
    stub = next(m["content"] for m in wire if is_range_stub(m))
    ref = stub.split("\n", 1)[0].rsplit("stored as ", 1)[1].rstrip("]")
    parts = range_parts(store, ref)
    assert len(parts) > 1
    for newer, older in itertools.pairwise(parts):
        assert older["last"] + 1 == newer["first"]  # contiguous, no message twice
    assert expand(store, wire) == msgs
