"""An upstream's JSON nested past the interpreter's stack (a few KB of ``[[[[``) is read as
what it is, no JSON, on every route, streamed or whole, with the proxy's tools offered or
not: it was a 500 ``internal proxy error: RecursionError`` (a whole answer) or a stream
cut without a word, with a traceback in the log."""

from __future__ import annotations

import pytest

from proxy.routes.odd_upstream import REQUESTS, OddUpstream, ask

DEEP = "[" * 50_000 + "]" * 50_000
#: What the upstream answers: events (streamed) or a body (whole), each nested too deep.
ANSWERS = {
    "a streamed event": f'data: {{"usage": {DEEP}}}\n\ndata: {DEEP}\n\ndata: [DONE]\n\n',
    "a whole answer with tool calls": '{"choices": [{"message": {"tool_calls": ' + DEEP + "}}]}",
    "a whole error": '{"error": ' + DEEP + "}",
}


@pytest.mark.parametrize("answer", list(ANSWERS))
@pytest.mark.parametrize("route", list(REQUESTS))
@pytest.mark.parametrize("stream", [True, False])
def test_json_nested_past_the_stack_from_the_upstream_is_no_internal_error(
    odd_upstream: tuple[OddUpstream, str], odd_proxy: str, answer: str, route: str, stream: bool
) -> None:
    resp = ask(odd_upstream[0], odd_proxy, ANSWERS[answer], route, stream)
    assert resp.status_code != 500, resp.text[:300]
    assert "RecursionError" not in resp.text and "internal proxy error" not in resp.text
