"""Message helpers: where paging may end, and the role a range stub takes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from offload.errors import ConfigError
from offload.proxy.rewrite.messages import (
    content_text,
    is_page_boundary,
    message_tokens,
    range_role,
    wants_alternation,
)
from offload.proxy.rewrite.stubs.parts import RangeStub

Msgs = list[dict[str, Any]]

CHAT: Msgs = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "task"},
    {"role": "assistant", "content": "a1"},
    {"role": "user", "content": "u1"},
    {"role": "assistant", "content": "a2"},
    {"role": "user", "content": "u2"},
]
TOOLS: Msgs = [
    {"role": "user", "content": "task"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f"}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "out"},
    {"role": "assistant", "content": "done"},
    {"role": "user", "content": "next"},
]


def test_in_a_chat_paging_ends_only_before_a_user_message() -> None:
    assert [is_page_boundary(CHAT, i) for i in range(2, 7)] == [False, True, False, True, True]


def test_a_tool_call_and_its_answers_are_never_split() -> None:
    assert is_page_boundary(TOOLS, 1)  # an assistant tool call may start the kept part
    assert not is_page_boundary(TOOLS, 2)  # its answer stays with it
    assert is_page_boundary(TOOLS, 3)  # a reply after a tool answer may
    assert is_page_boundary(TOOLS, 4)


def test_a_range_stub_between_two_user_messages_takes_the_assistant_turn() -> None:
    assert range_role(CHAT, 2, 3) == "assistant"  # ... task | stub | u1 ...
    assert range_role(TOOLS, 1, 3) == "user"  # ... task | stub | assistant ...
    assert range_role(CHAT, 2, len(CHAT)) == "user"  # nothing after it


def test_a_range_stub_saved_before_roles_varied_loads_as_a_user_message() -> None:
    saved = {"first": 2, "last": 5, "ref": "ctx:sha256:ab", "label": "l", "text": "t", "tokens": 9}
    assert RangeStub.from_json(saved).message()["role"] == "user"
    stub = RangeStub(2, 5, "ctx:sha256:ab", "l", "t", 9, "assistant")
    assert RangeStub.from_json(stub.to_json()) == stub


GEMMA_LIKE = (
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
)


def test_alternation_follows_the_upstream_template_unless_set() -> None:
    assert wants_alternation("auto", GEMMA_LIKE)
    assert not wants_alternation("auto", "{% for message in messages %}<|im_start|>")
    assert not wants_alternation("auto")  # no template known (replay, or no /props)
    assert wants_alternation("always")
    assert not wants_alternation("never", GEMMA_LIKE)


def test_an_unknown_alternation_setting_is_refused() -> None:
    with pytest.raises(ConfigError, match="alternate_roles must be one of"):
        wants_alternation("sometimes")


def _as_rendered(enc: Any, msg: dict[str, Any]) -> int:
    """cl100k tokens of ``msg`` as ChatML renders it, its markers read as text (the way
    the benches measure the wire from the outside), tool calls as ``tojson`` writes them."""
    import json

    calls = json.dumps(msg["tool_calls"]) if msg.get("tool_calls") else ""
    text = f"<|im_start|>{msg['role']}\n{content_text(msg)}{calls}<|im_end|>\n"
    return len(enc.encode(text, disallowed_special=()))


def test_a_message_is_counted_at_no_fewer_tokens_than_its_template_renders() -> None:
    import tiktoken

    from offload.core.tokens import BPE_ENCODING, default_counter

    enc = tiktoken.get_encoding(BPE_ENCODING)
    counter = default_counter()
    for msg in [*CHAT, *TOOLS, {"role": "tool", "tool_call_id": "c", "content": "ok"}]:
        assert message_tokens(counter, msg) >= _as_rendered(enc, msg), msg


def test_a_recorded_agent_request_is_counted_within_two_percent_of_its_rendering() -> None:
    """Short messages dominate a tau-bench request: a count short of the template's
    markers undercounted it by ~11 %, and the wire overran the ceiling by as much."""
    import tiktoken

    from offload.core.tokens import BPE_ENCODING, default_counter
    from offload.proxy.rewrite.replay import load_runs

    enc = tiktoken.get_encoding(BPE_ENCODING)
    counter = default_counter()
    traces = Path(__file__).parents[2] / "data" / "traces"
    for name in ("taubench_gpt4o_airline.jsonl", "swe_agent_demos.jsonl"):
        msgs = load_runs(traces / name)[0].messages
        counted = sum(message_tokens(counter, m) for m in msgs)
        rendered = sum(_as_rendered(enc, m) for m in msgs)
        assert rendered <= counted <= rendered * 1.02, name
