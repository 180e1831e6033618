"""Per-turn figures: session titles, stub lines, and the bounded, persisted turn buffers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from offload.proxy.figures import turns
from offload.proxy.figures.metrics import NAMESPACE, SAVINGS_POINTS, Metrics, RequestRecord
from offload.store.store import Store

RANGE_STUB = (
    "[offload: 4 earlier messages from this conversation, #1-#4 (2 assistant, 2 user) — "
    "900 tokens, 12 lines, 3,000 bytes; stored as ctx:sha256:ab12cd34ef56]\ngist: earlier"
)
MESSAGE_STUB = (
    "[offload: tool output from bash:3 — 1,234 tokens, 88 lines, 5,012 bytes; "
    "stored as ctx:sha256:0123456789ab]\nread: read(...)"
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A fresh store file."""
    with Store(tmp_path / "offload.db") as s:
        yield s


def test_a_session_is_titled_by_its_first_user_message_that_is_not_a_stub() -> None:
    wire: list[dict[str, Any]] = [
        {"role": "system", "content": "you are helpful"},
        {"role": "user", "content": RANGE_STUB},
        {"role": "user", "content": [{"type": "text", "text": "  Fix the\n flaky   test"}]},
    ]
    assert turns.session_title(wire) == "Fix the flaky test"
    assert turns.session_title([{"role": "user", "content": "x" * 500}]).endswith("\u2026")
    assert len(turns.session_title([{"role": "user", "content": "x" * 500}])) == turns.TITLE_CHARS
    assert turns.session_title([{"role": "system", "content": "only"}]) == ""


def test_stub_lines_name_what_was_paged_and_stubbed_by_their_refs() -> None:
    wire = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": RANGE_STUB},
        {"role": "tool", "content": MESSAGE_STUB},
    ]
    lines = turns.stub_lines(wire)
    assert [turns.stub_ref(line) for line in lines] == [
        "ctx:sha256:ab12cd34ef56",
        "ctx:sha256:0123456789ab",
    ]
    assert all("\n" not in line for line in lines)
    many = [{"role": "tool", "content": MESSAGE_STUB}] * (turns.STUBS_KEPT + 5)
    assert len(turns.stub_lines(many)) == turns.STUBS_KEPT
    assert turns.stub_ref("no ref here") == ""


def test_stub_lines_name_the_stored_arguments_of_a_tool_call() -> None:
    args_stub = MESSAGE_STUB.replace("tool output from bash:3", "tool-call arguments of write")
    call = {
        "id": "c1",
        "type": "function",
        "function": {
            "name": "write_file",
            "arguments": json.dumps({"path": "a.py", "offload_stub": args_stub}),
        },
    }
    wire: list[dict[str, Any]] = [
        {"role": "user", "content": "write it"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    (line,) = turns.stub_lines(wire)
    assert "tool-call arguments of write" in line
    assert turns.stub_ref(line) == "ctx:sha256:0123456789ab"


def test_turns_are_bounded_per_session_and_survive_a_restart(store: Store) -> None:
    clock = iter(range(1, 10_000))
    m = Metrics(store, clock=lambda: float(next(clock)))
    for i in range(turns.TURNS_KEPT + 10):
        m.record(
            RequestRecord("s", client_tokens=100 + i, wire_tokens=50, n_ctx=4096, title="Fix it")
        )
    m.flush()
    again = Metrics(store)
    session = again.snapshot()["sessions"]["s"]
    assert session["title"] == "Fix it"
    assert len(session["turns"]) == turns.TURNS_KEPT
    assert session["turns"][-1]["client_tokens"] == 100 + turns.TURNS_KEPT + 9
    assert session["turns"][-1]["n_ctx"] == 4096


def test_recent_requests_are_newest_first_bounded_and_carry_their_stub_lines() -> None:
    m = Metrics()
    for i in range(turns.RECENT_KEPT + 3):
        m.record(RequestRecord(f"s{i % 2}", client_tokens=i, stubs=(MESSAGE_STUB[:40],)))
    recent = m.snapshot()["recent"]
    assert len(recent) == turns.RECENT_KEPT
    assert recent[0]["client_tokens"] == turns.RECENT_KEPT + 2
    assert recent[0]["session"] == "s0" and recent[0]["stubs"] == [MESSAGE_STUB[:40]]


def test_savings_over_time_merge_every_sessions_turns_in_time_order() -> None:
    now = [0.0]
    m = Metrics(clock=lambda: now[0])
    for i in range(6):
        now[0] = float(i)
        m.record(RequestRecord(f"s{i % 3}", client_tokens=10, wire_tokens=i))
    series = m.snapshot()["savings"]
    assert [row[0] for row in series] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert [row[2] for row in series] == [0, 1, 2, 3, 4, 5]
    assert SAVINGS_POINTS >= turns.TURNS_KEPT


def test_persisted_turns_that_are_not_turns_are_dropped(store: Store) -> None:
    store.put_state(
        NAMESPACE,
        "session:x",
        {"counters": {}, "last_seen": 1.0, "title": 7, "turns": ["junk", {"at": "no"}, {"at": 2}]},
    )
    session = Metrics(store).snapshot()["sessions"]["x"]
    assert session["title"] == ""
    assert [t["at"] for t in session["turns"]] == [2]
