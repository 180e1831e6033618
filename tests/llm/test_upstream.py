"""The upstream client against a real llama.cpp server (and a port with nothing on it)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from offload.core.http.sse import iter_sse_events, stream_stats, stream_text
from offload.errors import UpstreamTimeout, UpstreamUnavailable
from offload.llm.upstream import UpstreamClient, UpstreamHTTPError, split_base_url
from realparts import LlamaServer, free_port

pytestmark = pytest.mark.anyio

HELLO = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0}


def test_a_base_url_with_or_without_v1_gives_the_same_root_and_api() -> None:
    assert split_base_url("http://127.0.0.1:8080") == (
        "http://127.0.0.1:8080",
        "http://127.0.0.1:8080/v1",
    )
    assert split_base_url("http://127.0.0.1:8080/v1/") == (
        "http://127.0.0.1:8080",
        "http://127.0.0.1:8080/v1",
    )


async def test_a_port_with_nothing_listening_is_upstream_unavailable() -> None:
    async with UpstreamClient(f"http://127.0.0.1:{free_port()}") as client:
        assert await client.health() is False
        with pytest.raises(UpstreamUnavailable, match="cannot reach upstream"):
            await client.chat(HELLO)
        with pytest.raises(UpstreamUnavailable):
            async for _ in client.stream_chat(HELLO):
                pass


async def test_an_upstream_error_never_shows_the_password_of_the_base_url() -> None:
    base = f"http://agent:hunter2@127.0.0.1:{free_port()}"
    async with UpstreamClient(base) as client:
        with pytest.raises(UpstreamUnavailable) as info:
            await client.chat(HELLO)
    assert "hunter2" not in str(info.value) and "agent:***@127.0.0.1" in str(info.value)
    told = str(UpstreamHTTPError(401, '{"error": "no"}', base + "/v1/chat/completions"))
    assert "hunter2" not in told and "HTTP 401" in told


@pytest.mark.slow
async def test_a_chat_completion_returns_content_and_usage(llama_server: LlamaServer) -> None:
    async with UpstreamClient(llama_server.base_url) as client:
        assert await client.health() is True
        answer = await client.chat(HELLO)
    assert answer["object"] == "chat.completion"
    assert isinstance(answer["choices"][0]["message"]["content"], str)
    assert answer["usage"]["completion_tokens"] <= 8
    assert answer["usage"]["prompt_tokens"] > 0


@pytest.mark.slow
async def test_a_streamed_chat_decodes_to_text_with_usage_in_the_last_chunk(
    llama_server: LlamaServer,
) -> None:
    payload = {**HELLO, "stream_options": {"include_usage": True}}
    async with UpstreamClient(llama_server.base_url + "/v1") as client:
        chunks = [chunk async for chunk in client.stream_chat(payload)]
    events = list(iter_sse_events(chunks))
    assert events[-1].is_done
    last = events[-2].json()
    assert last["usage"]["completion_tokens"] == len(
        [
            e
            for e in events[:-2]
            if e.json()["choices"] and e.json()["choices"][0]["delta"].get("content")
        ]
    )
    stats = stream_stats(events)
    assert stats.usage == last["usage"]
    assert (
        stats.timings is not None
        and stats.timings["predicted_n"] == last["usage"]["completion_tokens"]
    )
    assert stream_text(events).strip()


@pytest.mark.slow
async def test_tokenize_counts_tokens_exactly(llama_server: LlamaServer) -> None:
    async with UpstreamClient(llama_server.base_url) as client:
        one = await client.tokenize("hello")
        many = await client.tokenize("hello " * 50)
        assert await client.tokenize("") == 0
    assert one is not None and many is not None
    assert one >= 1
    assert 45 <= many <= 60  # SmolLM2's BPE: one token per " hello"
    assert client.tokenize_supported


@pytest.mark.slow
async def test_n_ctx_is_read_from_props_and_an_overflow_is_an_http_400_with_body(
    start_llama: Callable[[int], LlamaServer],
) -> None:
    server = start_llama(512)
    async with UpstreamClient(server.base_url) as client:
        props = await client.props()
        assert props is not None and props["total_slots"] == 1
        assert await client.n_ctx() == 512
        too_long = {"messages": [{"role": "user", "content": "word " * 800}], "max_tokens": 4}
        with pytest.raises(UpstreamHTTPError) as caught:
            await client.chat(too_long)
    err = caught.value
    assert err.status == 400
    assert err.error_type == "exceed_context_size_error"
    body = err.json()
    assert body["error"]["n_ctx"] == 512
    assert body["error"]["n_prompt_tokens"] > 512
    assert "exceed_context_size_error" in str(err)


@pytest.mark.slow
async def test_an_upstream_without_tokenize_or_props_answers_none_and_stops_asking(
    llama_server: LlamaServer,
) -> None:
    # a path prefix the server does not serve: every llama extra answers 404 there
    async with UpstreamClient(llama_server.base_url + "/nothing-here") as client:
        assert await client.tokenize("hello") is None
        assert client.tokenize_supported is False
        assert await client.props() is None
        assert await client.n_ctx() is None


@pytest.mark.slow
async def test_a_streamed_http_error_is_raised_with_status_and_body(
    start_llama: Callable[[int], LlamaServer],
) -> None:
    server = start_llama(512)
    payload = {"messages": [{"role": "user", "content": "word " * 800}], "max_tokens": 4}
    async with UpstreamClient(server.base_url) as client:
        with pytest.raises(UpstreamHTTPError) as caught:
            async for _ in client.stream_chat(payload):
                pass
    assert caught.value.status == 400
    assert caught.value.error_type == "exceed_context_size_error"


@pytest.mark.slow
async def test_an_answer_slower_than_the_timeout_is_upstream_timeout(
    llama_server: LlamaServer,
) -> None:
    async with UpstreamClient(llama_server.base_url, timeout=0.001) as client:
        with pytest.raises(UpstreamTimeout, match="did not answer in time"):
            await client.chat({**HELLO, "max_tokens": 64})


@pytest.mark.slow
async def test_the_api_key_is_sent_but_never_shown(llama_server: LlamaServer) -> None:
    client = UpstreamClient(llama_server.base_url, api_key="sk-secret-123")
    async with client:
        answer = await client.chat(HELLO)  # llama-server without --api-key ignores it
        assert answer["choices"]
    assert "sk-secret" not in repr(client)


async def test_a_url_with_a_control_character_is_not_healthy() -> None:
    # found by the CLI fuzz: `offload status --upstream $'\x1f'` raised httpx.InvalidURL
    async with UpstreamClient("\x1f") as client:
        assert await client.health() is False
