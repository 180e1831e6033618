"""An upstream's answer holding a number that is not finite (``NaN``, ``Infinity``, a
``1e999`` past a float's range: Python's ``json`` reads them all) is read as what it is,
no JSON, on the routes that convert a chat answer: it was written on to the client as
``NaN`` or ``Infinity``, which is not JSON and which the client's parser refuses. The
OpenAI chat route, which rewrites nothing in such an answer, passes it on byte for byte."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from proxy.routes.odd_upstream import OddUpstream, ask

CONVERTING = ["/v1/messages", "/v1/responses"]
CHOICE = '{"index": 0, "message": {"role": "assistant", "content": "Fridays."}, '
#: What the upstream answers (events when it starts ``data:``, else a whole body).
ANSWERS = {
    "NaN in a whole answer's usage": '{"choices": ['
    + CHOICE
    + '"finish_reason": "stop"}], "usage": {"prompt_tokens": NaN, "completion_tokens": 2}}',
    "Infinity in a whole answer's logprobs": '{"choices": ['
    + CHOICE
    + '"logprobs": {"content": [{"token": "F", "logprob": -Infinity}]}, '
    + '"finish_reason": "stop"}]}',
    "1e999 in a whole answer's timings": '{"choices": ['
    + CHOICE
    + '"finish_reason": "stop"}], "timings": {"predicted_per_second": 1e999}}',
    "NaN in a whole answer's tool call arguments": '{"choices": [{"index": 0, "message": '
    + '{"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": '
    + '{"name": "rotate", "arguments": {"days": NaN}}}]}, "finish_reason": "tool_calls"}]}',
    "Infinity in a whole answer's tool call arguments as text": '{"choices": [{"index": 0, '
    + '"message": {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", '
    + '"function": {"name": "rotate", "arguments": "{\\"days\\": Infinity}"}}]}, '
    + '"finish_reason": "tool_calls"}]}',
    "NaN in a streamed event": 'data: {"choices": [{"index": 0, "delta": {"content": "Fri"}}]}'
    '\n\ndata: {"choices": [], "usage": {"prompt_tokens": NaN, "completion_tokens": 1}}'
    "\n\ndata: [DONE]\n\n",
}


def _strict(text: str) -> None:
    """``text`` is JSON as a client reads it: no word a number is not, no number past a
    float's range."""

    def refuse(word: str) -> Any:
        raise AssertionError(f"{word} is not JSON: {text[:300]}")

    def finite(number: str) -> float:
        assert math.isfinite(float(number)), text[:300]
        return float(number)

    json.loads(text, parse_constant=refuse, parse_float=finite)


@pytest.mark.parametrize("answer", list(ANSWERS))
@pytest.mark.parametrize("route", CONVERTING)
@pytest.mark.parametrize("stream", [True, False])
def test_a_number_that_is_not_finite_from_the_upstream_never_reaches_the_client(
    odd_upstream: tuple[OddUpstream, str], odd_proxy: str, answer: str, route: str, stream: bool
) -> None:
    resp = ask(odd_upstream[0], odd_proxy, ANSWERS[answer], route, stream)
    assert resp.status_code != 500 and "internal proxy error" not in resp.text, resp.text[:300]
    if not resp.headers.get("content-type", "").startswith("text/event-stream"):
        _strict(resp.text)
        return
    for line in resp.text.splitlines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            _strict(line[5:])


@pytest.mark.parametrize("answer", list(ANSWERS))
def test_the_chat_route_passes_the_upstreams_answer_byte_for_byte_not_finite_numbers_and_all(
    odd_upstream: tuple[OddUpstream, str], odd_proxy: str, answer: str
) -> None:
    # by design (docs/security.md): nothing rewritten, the client reads what the upstream
    # wrote, as if it asked the upstream itself
    stream = ANSWERS[answer].startswith("data:")
    resp = ask(odd_upstream[0], odd_proxy, ANSWERS[answer], "/v1/chat/completions", stream)
    assert resp.status_code == 200
    assert resp.content == ANSWERS[answer].encode()
