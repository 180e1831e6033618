"""OpenAI Responses requests become equivalent chat-completions requests; what the proxy
cannot honour is refused with a message that says why."""

from __future__ import annotations

from typing import Any

import pytest

from offload.errors import InvalidInput
from offload.proxy.routes.responses import to_chat


def chat(body: dict[str, Any]) -> dict[str, Any]:
    """The chat request a Responses request becomes."""
    return to_chat(body).payload


TOOL = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    "strict": True,
}


def test_instructions_and_a_string_input_become_a_system_and_a_user_message() -> None:
    out = chat({"model": "m", "instructions": "be brief", "input": "hi"})
    assert out["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    assert out["model"] == "m" and "stream" not in out


def test_message_items_keep_their_roles_and_join_their_text_parts() -> None:
    items = [
        {"role": "developer", "content": "rules"},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "one"},
            {"type": "input_text", "text": "two"},
        ]},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "answer", "annotations": []},
        ]},
    ]  # fmt: skip
    assert chat({"input": items})["messages"] == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "one\ntwo"},
        {"role": "assistant", "content": "answer"},
    ]


def test_function_calls_join_their_answer_and_outputs_keep_the_call_id() -> None:
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "read a and b"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {"type": "function_call", "call_id": "call_a", "name": "read_file", "arguments": '{"path":"a"}'},
        {"type": "function_call", "call_id": "call_b", "name": "read_file", "arguments": '{"path":"b"}'},
        {"type": "function_call_output", "call_id": "call_a", "output": "A"},
        {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "B"}]},
    ]  # fmt: skip
    messages = chat({"input": items})["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assistant = messages[1]
    assert assistant["content"] == "ok"
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_a", "call_b"]
    assert assistant["tool_calls"][1]["function"] == {
        "name": "read_file",
        "arguments": '{"path":"b"}',
    }
    assert messages[2] == {"role": "tool", "tool_call_id": "call_a", "content": "A"}
    assert messages[3] == {"role": "tool", "tool_call_id": "call_b", "content": "B"}


def test_a_function_call_without_text_opens_its_own_assistant_message() -> None:
    items = [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "x"},
        {"type": "function_call", "call_id": "c2", "name": "read_file", "arguments": "{}"},
    ]
    messages = chat({"input": items})["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[1]["content"] is None and messages[3]["tool_calls"][0]["id"] == "c2"


def test_flat_function_tools_take_chats_nested_shape_and_settings_carry_over() -> None:
    out = chat(
        {
            "input": "x",
            "tools": [TOOL],
            "tool_choice": {"type": "function", "name": "read_file"},
            "max_output_tokens": 64,
            "temperature": 0.2,
            "top_p": 0.9,
            "parallel_tool_calls": False,
            "store": True,
            "metadata": {"k": "v"},
            "stream": True,
        }
    )
    assert out["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "parameters": TOOL["parameters"],
                "description": "Read a file",
                "strict": True,
            },
        }
    ]
    assert out["tool_choice"] == {"type": "function", "function": {"name": "read_file"}}
    assert out["max_tokens"] == 64 and out["temperature"] == 0.2 and out["top_p"] == 0.9
    assert out["parallel_tool_calls"] is False
    assert out["stream"] is True and out["stream_options"] == {"include_usage": True}
    assert "store" not in out and "metadata" not in out


def test_a_tool_choice_without_tools_is_left_out() -> None:
    assert "tool_choice" not in chat({"input": "x", "tool_choice": "auto"})


def test_allowed_tools_narrows_the_tools_offered() -> None:
    other = {**TOOL, "name": "write_file"}
    choice = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "write_file"}]}  # fmt: skip
    out = chat({"input": "x", "tools": [TOOL, other], "tool_choice": choice})
    assert [t["function"]["name"] for t in out["tools"]] == ["write_file"]
    assert out["tool_choice"] == "required"


def test_a_json_schema_text_format_becomes_chats_response_format() -> None:
    fmt = {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "strict": True}
    out = chat({"input": "x", "text": {"format": fmt}})
    assert out["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True},
    }
    assert "response_format" not in chat({"input": "x", "text": {"format": {"type": "text"}}})


def test_the_user_or_else_the_prompt_cache_key_names_the_session() -> None:
    assert chat({"input": "x", "user": "u1", "prompt_cache_key": "k"})["user"] == "u1"
    assert chat({"input": "x", "prompt_cache_key": "k"})["user"] == "k"
    assert "user" not in chat({"input": "x"})


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"input": "x", "previous_response_id": "resp_1"}, "whole conversation in 'input'"),
        ({"input": "x", "conversation": "conv_1"}, "whole conversation in 'input'"),
        ({"input": "x", "background": True}, "background"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "'web_search' is not supported"),
        ({"input": "x", "tools": [{"type": "file_search"}]}, "only function tools"),
        ({"input": "x", "tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
            "input_image is not supported",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input_file is not supported",
        ),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "stored item"),
        ({"input": [{"type": "computer_call_output", "call_id": "c"}]}, "'computer_call_output'"),
        ({"input": []}, "'input'"),
        ({}, "'input'"),
        ({"input": [{"role": "tool", "content": "x"}]}, "role"),
        ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "call_id"),
        ({"input": "x", "max_output_tokens": "many"}, "max_output_tokens"),
        ({"input": "x", "instructions": ["a"]}, "instructions"),
    ],
)
def test_what_cannot_be_honoured_is_refused_with_a_reason(body: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        chat(body)
    assert says in str(caught.value)


def test_a_namespaces_functions_are_offered_by_their_full_name_and_called_back_so() -> None:
    namespace = {
        "type": "namespace",
        "name": "agents",
        "description": "sub-agents",
        "tools": [{**TOOL, "name": "spawn"}],
    }
    call = {"type": "function_call", "call_id": "c1", "namespace": "agents", "name": "spawn"}
    request = to_chat({"input": [call], "tools": [TOOL, namespace]})
    names = [t["function"]["name"] for t in request.payload["tools"]]
    assert names == ["read_file", "agents__spawn"]
    assert request.namespaced == {"agents__spawn": ("agents", "spawn")}
    sent_call = request.payload["messages"][0]["tool_calls"][0]
    assert sent_call["function"]["name"] == "agents__spawn"


def test_a_refused_web_search_says_how_codex_leaves_it_out() -> None:
    with pytest.raises(InvalidInput) as caught:
        to_chat({"input": "x", "tools": [{"type": "web_search", "external_web_access": False}]})
    assert 'web_search = "disabled"' in str(caught.value)


def fn(name: str) -> dict[str, Any]:
    return {"type": "function", "name": name, "parameters": {"type": "object"}}


def ns(name: str, *members: str) -> dict[str, Any]:
    return {"type": "namespace", "name": name, "tools": [fn(m) for m in members]}


@pytest.mark.parametrize(
    "tools",
    [
        [ns("a", "b__c"), ns("a__b", "c")],  # both a__b__c
        [fn("mcp__read"), ns("mcp", "read")],  # a plain function named as a namespaced one
        [ns("mcp", "read"), fn("mcp__read")],
    ],
)
def test_two_functions_a_namespace_would_offer_under_one_name_are_refused(
    tools: list[dict[str, Any]],
) -> None:
    # the upstream's call of that name was named back to the last one offered: the client
    # ran a function the model did not mean
    with pytest.raises(InvalidInput, match="both be offered as"):
        to_chat({"input": "hi", "tools": tools})


def test_plain_functions_and_distinct_namespaced_ones_pass() -> None:
    tools = [fn("read"), ns("mcp", "read", "write"), ns("git", "read")]
    names = [
        t["function"]["name"] for t in to_chat({"input": "x", "tools": tools}).payload["tools"]
    ]
    assert names == ["read", "mcp__read", "mcp__write", "git__read"]
