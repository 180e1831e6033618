"""A streamed chat answer becomes a well-formed Responses event stream, whatever order the
upstream streams its text and tool calls in, however it ends."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseStreamEvent

from offload.proxy.routes.responses_out import frame
from offload.proxy.routes.responses_stream import ResponseStream, stream_events

pytestmark = pytest.mark.anyio

# the official client's event types, validated strictly (its own parsing does not validate)
EVENT = pydantic.TypeAdapter(ResponseStreamEvent)


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def call(index: int, arguments: str, name: str = "", call_id: str = "") -> dict[str, Any]:
    fn = {"arguments": arguments, **({"name": name} if name else {})}
    return {"index": index, **({"id": call_id} if call_id else {}), "function": fn}


async def converted(objs: list[dict[str, Any] | str]) -> list[dict[str, Any]]:
    """The event data a chat stream of ``objs`` converts to (a str is sent as it is)."""

    async def chunks() -> AsyncIterator[bytes]:
        for obj in objs:
            data = obj if isinstance(obj, str) else json.dumps(obj)
            yield f"data: {data}\n\n".encode()

    seen: dict[str, Any] = {}
    stream = ResponseStream(frame({"model": "m"}), {"ns__write": ("ns", "write")})
    out = b"".join([e async for e in stream_events(chunks(), stream, seen)]).decode()
    events = []
    for block in out.strip().split("\n\n"):
        name, data = block.split("\n")
        assert name == "event: " + json.loads(data[6:])["type"]
        EVENT.validate_json(data[6:])
        events.append(json.loads(data[6:]))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


async def test_interleaved_calls_and_text_stream_into_items_closed_only_at_the_end() -> None:
    events = await converted(
        [
            chunk({"tool_calls": [call(0, "", "read", "call_a")]}),
            chunk({"content": "looking"}),
            chunk({"tool_calls": [call(1, '{"p":', "ns__write", "call_b")]}),
            chunk({"tool_calls": [call(0, '{"path":"a"}')]}),
            chunk({"tool_calls": [call(1, '"b"}')]}),
            chunk({}, "tool_calls"),
            {"choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 5}},
            "[DONE]",
        ]
    )
    closed: set[int] = set()
    for event in events:  # no delta after its item's done
        if event["type"] == "response.output_item.done":
            closed.add(event["output_index"])
        elif "output_index" in event:
            assert event["output_index"] not in closed, event
    final = events[-1]
    assert final["type"] == "response.completed"
    output = final["response"]["output"]
    assert [item["type"] for item in output] == ["function_call", "message", "function_call"]
    assert (output[0]["call_id"], output[0]["arguments"]) == ("call_a", '{"path":"a"}')
    assert (output[2]["call_id"], output[2]["arguments"]) == ("call_b", '{"p":"b"}')
    assert (output[2]["namespace"], output[2]["name"]) == ("ns", "write")  # named back
    assert output[1]["content"][0]["text"] == "looking"
    usage = final["response"]["usage"]
    assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (30, 5, 35)


async def test_an_answer_cut_at_max_tokens_ends_incomplete() -> None:
    events = await converted([chunk({"content": "abc"}), chunk({}, "length"), "[DONE]"])
    final = events[-1]
    assert final["type"] == "response.incomplete"
    assert final["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


async def test_an_error_mid_answer_ends_the_stream_failed() -> None:
    error = {"error": {"message": "the upstream broke off", "type": "upstream_unavailable"}}
    events = await converted([chunk({"content": "abc"}), error, chunk({"content": "late"})])
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2]["message"] == "the upstream broke off"
    assert events[-1]["response"]["status"] == "failed"
    assert not any(e.get("delta") == "late" for e in events)
    assert not any(e["type"] == "response.completed" for e in events)


async def test_the_models_reasoning_streams_into_a_reasoning_item_before_the_answer() -> None:
    events = await converted(
        [
            chunk({"reasoning_content": "think "}),
            chunk({"reasoning_content": "hard"}),
            chunk({"content": "42"}),
            chunk({}, "stop"),
            "[DONE]",
        ]
    )
    deltas = [e["delta"] for e in events if e["type"] == "response.reasoning_text.delta"]
    assert deltas == ["think ", "hard"]
    (done,) = [e for e in events if e["type"] == "response.reasoning_text.done"]
    assert done["text"] == "think hard"
    output = events[-1]["response"]["output"]
    assert [item["type"] for item in output] == ["reasoning", "message"]
    assert output[0]["content"] == [{"type": "reasoning_text", "text": "think hard"}]


_TEXT = st.one_of(st.text(max_size=6), st.sampled_from(["", "</offload:body:x>", "\n\n"]))
_DELTA = st.one_of(
    st.fixed_dictionaries({"content": _TEXT}),
    st.fixed_dictionaries({"reasoning_content": _TEXT}),
    st.fixed_dictionaries(
        {
            "tool_calls": st.lists(
                st.builds(
                    call,
                    st.integers(min_value=0, max_value=2),
                    _TEXT,
                    st.sampled_from(["", "read", "ns__write"]),
                    st.sampled_from(["", "call_x"]),
                ),
                max_size=2,
            )
        }
    ),
)
_CHUNK = st.one_of(
    st.builds(chunk, _DELTA, st.sampled_from([None, None, "stop", "length", "tool_calls"])),
    st.just({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}}),
    st.just({"error": {"message": "upstream broke"}}),
    st.just("not json"),
)


def _order_holds(events: list[dict[str, Any]]) -> None:
    """Each output item is added before its deltas and its done, deltas never follow its
    done, and the final response lists the items in the order they were added."""
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete", "response.failed")
    assert not any(k in kinds[:-1] for k in ("response.completed", "response.incomplete"))
    added: list[str] = []
    done: set[int] = set()
    for event in events[2:-1]:
        at = event.get("output_index")
        if event["type"] == "response.output_item.added":
            assert at == len(added), event
            added.append(event["item"]["id"])
        elif at is not None:
            assert at < len(added) and at not in done, event
            if event["type"] == "response.output_item.done":
                done.add(at)
    if kinds[-1] != "response.failed":
        assert [item["id"] for item in events[-1]["response"]["output"]] == added
        assert done == set(range(len(added)))


@settings(max_examples=40, deadline=None)
@given(chunks=st.lists(_CHUNK, max_size=8))
async def test_any_chat_stream_converts_to_events_in_the_order_the_spec_gives(
    chunks: list[dict[str, Any] | str],
) -> None:
    _order_holds(await converted([*chunks, "[DONE]"]))
