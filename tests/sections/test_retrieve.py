"""The retrieve tool: definitions in three formats, the handler, and a real MCP round trip."""

from __future__ import annotations

import json

import pytest

from mcp import Client
from offload.sections import (
    Sections,
    anthropic_tool,
    input_schema,
    mcp_tool,
    openai_tool,
)

TEXT = "".join(f"line {i}: value {i * i}\n" for i in range(1, 401))


def test_the_tool_is_defined_alike_in_openai_anthropic_and_mcp_formats() -> None:
    oa = openai_tool("Fetch")
    an = anthropic_tool("Fetch")
    mc = mcp_tool("Fetch")
    assert oa["type"] == "function" and oa["function"]["name"] == "Fetch"
    assert oa["function"]["parameters"] == input_schema()
    assert an["name"] == "Fetch" and an["input_schema"] == input_schema()
    assert mc.name == "Fetch" and mc.input_schema == input_schema()
    assert input_schema()["required"] == ["reference"]
    assert oa["function"]["description"] == an["description"] == mc.description
    json.dumps([oa, an])  # plain JSON, ready to send


def test_the_handler_returns_the_original_in_a_trust_fence(sections: Sections) -> None:
    built = sections.section("Data", TEXT, max_tokens=200)
    assert built.reference is not None
    answer = sections.retriever().handle({"reference": built.reference})
    assert not answer.is_error
    assert answer.text.startswith("<offload:body:")
    assert f'ref="{built.reference}" topic="Data"' in answer.text
    assert TEXT in answer.text


def test_the_handler_reads_a_line_range_and_accepts_openai_json_arguments(
    sections: Sections,
) -> None:
    built = sections.section("Data", TEXT, max_tokens=200)
    args = json.dumps({"reference": built.reference, "start_line": 10, "end_line": 12})
    answer = sections.retriever().handle(args)
    assert answer.text.startswith("lines 10-12 of 400\n<offload:body:")
    assert "line 10: value 100\nline 11: value 121\nline 12: value 144\n<" in answer.text
    assert "line 13:" not in answer.text


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "reference is required"),
        ({"reference": "ctx:sha256:" + "0" * 64}, "no entry matches"),
        ({"reference": "ctx:sha256:zz"}, "invalid arguments"),
        ({"reference": "x", "path": "/etc/passwd"}, "unknown path"),
        ("not json", "not a JSON object"),
    ],
)
def test_bad_calls_answer_an_error_that_says_what_to_do(
    sections: Sections, arguments: object, message: str
) -> None:
    answer = sections.retriever().handle(arguments)  # type: ignore[arg-type]
    assert answer.is_error
    assert message in answer.text


def test_a_reference_that_names_nothing_points_the_model_at_the_prompt_not_at_tools_it_lacks(
    sections: Sections,
) -> None:
    answer = sections.retriever()("ctx:sha256:" + "0" * 64)
    assert answer.is_error
    assert answer.text == (
        f"no entry matches 'ctx:sha256:{'0' * 64}'. Use a reference exactly as shown in the prompt."
    )


def test_a_line_range_outside_the_text_is_an_error(sections: Sections) -> None:
    built = sections.section("Data", TEXT, max_tokens=200)
    answer = sections.retriever()(built.reference or "", start_line=401)
    assert answer.is_error and "outside the text (lines 1-400)" in answer.text


@pytest.mark.anyio
async def test_the_mcp_tool_answers_through_the_real_mcp_client(sections: Sections) -> None:
    built = sections.section("Data", TEXT, max_tokens=200)
    server = sections.retriever().mcp_server()
    async with Client(server) as client:
        tools = (await client.list_tools()).tools
        assert [t.name for t in tools] == ["RetrieveContext"]
        assert tools[0].input_schema["required"] == ["reference"]
        result = await client.call_tool(
            "RetrieveContext", {"reference": built.reference, "start_line": 400}
        )
        assert not result.is_error
        text = result.content[0].text  # type: ignore[union-attr]
        assert "line 400: value 160000" in text and "line 399" not in text
        missing = await client.call_tool("RetrieveContext", {"reference": "ctx:sha256:deadbeef"})
        assert missing.is_error
        assert "no entry matches" in missing.content[0].text  # type: ignore[union-attr]


def test_a_reference_to_another_scope_is_refused_without_its_text(sections: Sections) -> None:
    from offload.sections.retrieve import Retriever

    other = sections.store.put("team a's roadmap, private", scope="teamA").entry
    for retriever in (sections.retriever(), Retriever(sections.store)):
        answer = retriever.handle({"reference": other.full_ref})
        assert answer.is_error and "another scope" in answer.text
        assert "roadmap" not in answer.text
        # the model has this one tool: no flag of the CLI, MCP or serve to reach it
        assert "all-scopes" not in answer.text and "all_scopes" not in answer.text
    every = Retriever(sections.store, scope=None).handle({"reference": other.full_ref})
    assert not every.is_error and "team a's roadmap" in every.text
