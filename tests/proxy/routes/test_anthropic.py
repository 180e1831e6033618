"""Anthropic Messages requests become equivalent OpenAI chat requests."""

from __future__ import annotations

import pytest

from offload.errors import InvalidInput
from offload.proxy.routes.anthropic import to_openai


def test_system_and_messages_map_to_openai_roles() -> None:
    out = to_openai(
        {
            "system": "be brief",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi"}],
        }
    )
    assert out["messages"][0] == {"role": "system", "content": "be brief"}
    assert out["messages"][1]["role"] == "user" and out["max_tokens"] == 8


def test_the_anthropic_user_id_names_the_session_as_openai_user() -> None:
    body = {
        "max_tokens": 8,
        "metadata": {"user_id": "agent-7"},
        "messages": [{"role": "user", "content": "hi"}],
    }
    assert to_openai(body)["user"] == "agent-7"
    del body["metadata"]
    assert "user" not in to_openai(body)


@pytest.mark.parametrize(
    "body",
    [
        {"max_tokens": 8, "messages": []},
        {"messages": [{"role": "user", "content": "hi"}]},
        {"max_tokens": 8, "messages": [{"role": "tool", "content": "x"}]},
        {
            "max_tokens": 8,
            "thinking": {"type": "enabled"},
            "messages": [{"role": "user", "content": "x"}],
        },
    ],
)
def test_malformed_requests_are_refused_clearly(body: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        to_openai(body)
