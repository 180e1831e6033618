"""Message helpers: where paging may end, and the role a range stub takes."""

from __future__ import annotations

from typing import Any

import pytest

from offload.errors import ConfigError
from offload.proxy.rewrite.messages import is_page_boundary, range_role, wants_alternation
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
