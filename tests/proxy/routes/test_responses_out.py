"""A whole chat completion becomes the Responses object it stands for."""

from __future__ import annotations

import pydantic
from openai.types.responses import Response

from offload.proxy.routes.responses_out import frame, response_object


def completion(message: dict[str, object], finish: str = "stop") -> dict[str, object]:
    return {
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": 120,
            "completion_tokens": 9,
            "prompt_tokens_details": {"cached_tokens": 100},
            "completion_tokens_details": {"reasoning_tokens": 4},
        },
    }


def test_text_and_tool_calls_become_a_message_and_function_call_items() -> None:
    base = frame({"model": "m", "instructions": "be brief", "store": True, "metadata": {"a": "b"}})
    calls = [
        {"id": "call_9", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}},
        {"type": "function", "function": {"name": "g", "arguments": "{}"}},  # no id upstream
    ]
    out = response_object(
        base, completion({"content": "ok", "tool_calls": calls}, "tool_calls"), {}
    )
    assert out["object"] == "response" and out["status"] == "completed"
    assert out["instructions"] == "be brief" and out["metadata"] == {"a": "b"}
    assert out["store"] is False  # nothing is kept, whatever the client asked
    message, first, second = out["output"]
    assert message["content"][0] == {
        "type": "output_text",
        "text": "ok",
        "annotations": [],
        "logprobs": [],
    }
    assert (first["call_id"], first["name"], first["arguments"]) == ("call_9", "f", '{"x":1}')
    assert second["call_id"].startswith("call_") and second["call_id"] != "call_9"
    assert out["usage"] == {
        "input_tokens": 120,
        "input_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 0},
        "output_tokens": 9,
        "output_tokens_details": {"reasoning_tokens": 4},
        "total_tokens": 129,
    }


def test_an_answer_stopped_by_a_filter_is_incomplete_with_that_reason() -> None:
    out = response_object(frame({}), completion({"content": "partial"}, "content_filter"), {})
    assert out["status"] == "incomplete"
    assert out["incomplete_details"] == {"reason": "content_filter"}


def test_a_call_of_a_namespaced_function_names_its_namespace() -> None:
    fn = {"name": "agents__spawn", "arguments": "{}"}
    calls = [{"id": "c1", "type": "function", "function": fn}]
    namespaced = {"agents__spawn": ("agents", "spawn")}
    out = response_object(frame({}), completion({"tool_calls": calls}, "tool_calls"), namespaced)
    (item,) = out["output"]
    assert (item["namespace"], item["name"], item["call_id"]) == ("agents", "spawn", "c1")


def test_the_models_reasoning_comes_first_as_a_reasoning_item() -> None:
    message: dict[str, object] = {"content": "42", "reasoning_content": "think hard"}
    out = response_object(frame({"model": "m"}), completion(message), {})
    assert [item["type"] for item in out["output"]] == ["reasoning", "message"]
    assert out["output"][0]["content"] == [{"type": "reasoning_text", "text": "think hard"}]


def test_every_response_object_validates_as_the_official_clients_type() -> None:
    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    message: dict[str, object] = {"content": "ok", "reasoning_content": "r", "tool_calls": calls}
    body = {"model": "m", "instructions": "i", "tools": [{"type": "function", "name": "f"}]}
    out = response_object(frame(body), completion(message, "tool_calls"), {})
    parsed = pydantic.TypeAdapter(Response).validate_python(out)
    assert parsed.output_text == "ok" and parsed.usage is not None
