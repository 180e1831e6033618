"""An upstream's answer of any shape is converted or reported, never a failed request:
the Anthropic and Responses routes read it field by field (an upstream may put a number
where a list goes), whole or streamed, and its token figures bound what is counted."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.responses import Response as ResponseObject
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import loopback
from offload.proxy.routes.answers import text_of
from offload.proxy.routes.anthropic import stream_events as anthropic_events
from offload.proxy.routes.responses_out import frame, response_object
from offload.store.store import Store
from proxy.proxy_servers import proxy_for, serving

ROUTES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses": {"input": "hi", "tools": [{"type": "function", "name": "f"}]},
    "/v1/messages": {
        "model": "m",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}],
    },
}


def answer(message: Any = None, *, usage: Any = None, choices: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": "x", "object": "chat.completion"}
    out["choices"] = choices if choices is not None else [{"index": 0, "message": message}]
    if usage is not None:
        out["usage"] = usage
    return out


ODD_ANSWERS = [
    answer({"role": "assistant", "content": None, "tool_calls": 5}),
    answer({"role": "assistant", "content": None, "tool_calls": "abc"}),
    answer({"role": "assistant", "tool_calls": [{"id": {}, "function": {"arguments": {"a": 1}}}]}),
    answer({"role": "assistant", "content": [{"type": "text", "text": "parts"}]}),
    answer(choices="abc"),
    answer(choices=[5]),
    answer({"role": "assistant", "content": "x"}, usage={"prompt_tokens": "abc"}),
    answer({"role": "assistant", "content": "x"}, usage={"prompt_tokens": 10**30}),
    answer(choices=True),  # the chat route's own count of the answer failed on it
    answer({"role": "assistant", "content": "half an emoji \ud83d"}),  # not encodable
    [1, 2],
    None,
]


@pytest.fixture(scope="module")
def odd_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], str]]:
    """A proxy in front of an upstream that answers whatever ``told["body"]`` holds."""
    told: dict[str, Any] = {"body": None, "stream": b"", "status": 200, "models": b"{}"}

    async def chat(request: Request) -> Response:
        if json.loads(await request.body()).get("stream"):
            return Response(told["stream"], media_type="text/event-stream")
        body = json.dumps(told["body"])
        return Response(body, told["status"], media_type="application/json")

    async def props(request: Request) -> Response:
        return JSONResponse({"default_generation_settings": {"n_ctx": 4096}})

    async def models(request: Request) -> Response:
        return Response(told["models"], media_type="application/json")

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/props", props),
            Route("/v1/models", models),
        ]
    )
    with (
        serving(app) as upstream,
        Store(tmp_path_factory.mktemp("odd") / "o.db") as store,
        proxy_for(upstream.url, store) as (proxy, _),
    ):
        yield told, proxy.url


@pytest.mark.parametrize("body", ODD_ANSWERS)
def test_an_odd_whole_answer_is_converted_on_every_route_not_a_500(
    odd_proxy: tuple[dict[str, Any], str], body: Any
) -> None:
    told, url = odd_proxy
    told["body"] = body
    for route, request in ROUTES.items():
        resp = loopback.post(url + route, json=request)
        assert resp.status_code in (200, 502), (route, resp.text)
        assert "internal proxy error" not in resp.text, route
    stats = loopback.get(url + "/api/stats").json()["live"]["counters"]
    assert stats["prompt_tokens"] < 10**12  # a figure past belief is not counted


def sse(*objs: Any) -> bytes:
    return b"".join(
        b"data: " + (o if isinstance(o, bytes) else json.dumps(o).encode()) + b"\n\n" for o in objs
    )


ODD_STREAMS = [
    sse({"choices": 5}, b"[DONE]"),
    sse({"choices": [{"delta": "x"}]}, b"[DONE]"),
    sse({"choices": [{"index": 0, "delta": {"tool_calls": 5}}]}, b"[DONE]"),
    sse({"choices": [{"index": 0, "delta": {"content": {"a": 1}}}]}, b"[DONE]"),
    sse(b'{"choices": [{"index": 0, "delta": {"content": "half \\ud83d"}}]}', b"[DONE]"),
    sse({"choices": [], "error": "half \ud83d"}, b"[DONE]"),  # its error event failed
]


@pytest.mark.parametrize("stream", ODD_STREAMS)
def test_an_odd_stream_ends_as_each_routes_stream_ends_not_cut_off(
    odd_proxy: tuple[dict[str, Any], str], stream: bytes
) -> None:
    told, url = odd_proxy
    told["stream"] = stream
    ends = {
        "/v1/chat/completions": ("[DONE]",),
        "/v1/responses": ("response.completed", "response.failed"),
        "/v1/messages": ("message_stop", "event: error"),
    }
    for route, request in ROUTES.items():
        resp = loopback.post(url + route, json={**request, "stream": True})
        assert resp.status_code == 200, (route, resp.text)
        assert any(end in resp.text for end in ends[route]), (route, resp.text[-300:])


def test_an_upstream_error_whose_message_holds_a_lone_surrogate_keeps_its_status_and_shape(
    odd_proxy: tuple[dict[str, Any], str],
) -> None:
    told, url = odd_proxy
    told["body"], told["status"] = {"error": {"message": "bad \ud83d", "type": "x"}}, 400
    try:
        for route, request in ROUTES.items():
            resp = loopback.post(url + route, json=request)
            assert resp.status_code == 400, (route, resp.text)
            assert "bad \ud83d" in resp.text or "bad \\ud83d" in resp.text, route
    finally:
        told["status"] = 200


def test_an_odd_answer_still_makes_a_response_object_the_official_client_reads() -> None:
    base = frame({"model": "m"})
    for body in ODD_ANSWERS:
        obj = response_object(base, body if isinstance(body, dict) else {}, {})
        pydantic.TypeAdapter(ResponseObject).validate_python(obj)


def test_answer_text_is_a_string_as_it_is_parts_joined_anything_else_its_json() -> None:
    assert text_of("x") == "x" and text_of(None) == ""
    assert text_of([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]) == "ab"
    assert text_of({"a": 1}) == '{"a": 1}' and text_of(5) == "5"


async def chunks_of(data: bytes) -> AsyncIterator[bytes]:
    yield data


@pytest.mark.anyio
async def test_anthropic_usage_counts_input_tokens_without_the_cached_ones() -> None:
    # Anthropic's input_tokens exclude cache_read_input_tokens (a client adds the two);
    # chat's prompt_tokens include the cached ones
    usage = {"prompt_tokens": 100, "completion_tokens": 4}
    last = {"choices": [], "usage": {**usage, "prompt_tokens_details": {"cached_tokens": 90}}}
    data = sse({"choices": [{"index": 0, "delta": {"content": "hi"}}]}, last, b"[DONE]")
    seen: dict[str, Any] = {}
    out = b"".join([e async for e in anthropic_events(chunks_of(data), "m", seen, 100)])
    events = [json.loads(line[6:]) for line in out.decode().splitlines() if line[:6] == "data: "]
    closing = next(e for e in events if e["type"] == "message_delta")
    assert closing["usage"] == {
        "output_tokens": 4,
        "input_tokens": 10,
        "cache_read_input_tokens": 90,
    }


# Any answer an upstream may give: chat's shape with anything in its fields
_ANY = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False),
        st.text(max_size=8),
        st.sampled_from(["stop", "length", "tool_calls", "\ud83d", "</offload:body:x>"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_CALL = st.fixed_dictionaries(
    {},
    optional={
        "index": _ANY,
        "id": _ANY,
        "type": _ANY,
        "function": st.one_of(
            _ANY, st.fixed_dictionaries({}, optional={"name": _ANY, "arguments": _ANY})
        ),
    },
)
_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "role": _ANY,
        "content": _ANY,
        "reasoning_content": _ANY,
        "tool_calls": st.one_of(_ANY, st.lists(_CALL, max_size=3)),
    },
)
_USAGE = st.one_of(
    _ANY,
    st.fixed_dictionaries(
        {},
        optional={
            k: _ANY
            for k in ("prompt_tokens", "completion_tokens", "prompt_tokens_details", "total")
        },
    ),
)
_CHOICE = st.fixed_dictionaries(
    {}, optional={"index": _ANY, "message": _FIELDS, "delta": _FIELDS, "finish_reason": _ANY}
)
ANSWERS = st.fixed_dictionaries(
    {},
    optional={
        "choices": st.one_of(_ANY, st.lists(_CHOICE, max_size=2)),
        "usage": _USAGE,
        "timings": _ANY,
        "error": _ANY,
    },
)


@settings(max_examples=8, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(whole=ANSWERS, chunks=st.lists(ANSWERS, max_size=4))
def test_any_answer_whole_or_streamed_is_converted_on_every_route(
    odd_proxy: tuple[dict[str, Any], str], whole: dict[str, Any], chunks: list[dict[str, Any]]
) -> None:
    told, url = odd_proxy
    told["body"] = whole
    told["stream"] = sse(*chunks, b"[DONE]")
    ends = {
        "/v1/chat/completions": "[DONE]",
        "/v1/responses": "event: response.",
        "/v1/messages": "event: ",
    }
    for route, request in ROUTES.items():
        for stream in (False, True):
            resp = loopback.post(url + route, json={**request, "stream": stream})
            assert "internal proxy error" not in resp.text, (route, stream, resp.text[:300])
            assert resp.status_code in (200, 502), (route, stream, resp.text[:300])
            if stream and resp.status_code == 200:
                assert ends[route] in resp.text, (route, resp.text[-300:])


@pytest.mark.parametrize(
    ("listing", "kept"),
    [
        (b'{"data": [{"id": "m", "name": "half \\ud83d"}]}', "half \\ud83d"),
        (b'{"data": [{"id": "m", "score": NaN}]}', "NaN"),
    ],
)
def test_an_odd_model_listing_is_answered_with_or_without_the_context_size_never_a_500(
    odd_proxy: tuple[dict[str, Any], str], listing: bytes, kept: str
) -> None:
    told, url = odd_proxy
    told["models"] = listing
    for path in ("/v1/models", "/models"):
        resp = loopback.get(url + path)
        assert resp.status_code == 200 and kept in resp.text, (path, resp.text)
