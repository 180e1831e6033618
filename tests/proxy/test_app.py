"""The proxy's HTTP behaviour over real loopback sockets, in front of a scripted upstream.

The scripted upstream makes pace, cancellation and error answers deterministic; the
real-llama tests in ``test_e2e_llama.py`` prove the same paths against llama.cpp.
"""

from __future__ import annotations

import gzip
import itertools
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import loopback
from offload.core.text import analysis, gist
from offload.proxy.rewrite.stubs import expand, message_stubs
from offload.store.store import Store
from proxy.proxy_servers import (
    Scripted,
    proxy_for,
    scripted_upstream,
    serving,
)
from proxy.rewrite.test_recall import ask, session
from realparts import ServerThread, free_port, wait_until

CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "hello there"}]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A fresh store file."""
    with Store(tmp_path / "offload.db") as s:
        yield s


@pytest.fixture
def upstream() -> Iterator[tuple[Scripted, ServerThread]]:
    """The scripted upstream on loopback."""
    state = Scripted()
    with serving(scripted_upstream(state)) as server:
        yield state, server
    state.release.set()


@pytest.fixture
def proxy(upstream: tuple[Scripted, ServerThread], store: Store) -> Iterator[tuple[Scripted, str]]:
    """The real proxy in front of the scripted upstream: (upstream state, proxy URL)."""
    state, server = upstream
    with proxy_for(server.url, store) as (proxy_server, _settings):
        yield state, proxy_server.url


def test_malformed_json_is_a_400_in_the_openai_error_shape(proxy: tuple[Scripted, str]) -> None:
    state, url = proxy
    resp = loopback.post(
        url + CHAT, content=b"{not json", headers={"content-type": "application/json"}
    )
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["type"] == "invalid_request_error" and "malformed JSON" in err["message"]
    assert state.requests == []


@pytest.mark.parametrize("route", [CHAT, "/v1/messages"])
def test_json_nested_past_the_stack_is_a_400_not_an_internal_error(
    proxy: tuple[Scripted, str], route: str
) -> None:
    state, url = proxy
    deep = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    resp = loopback.post(url + route, content=deep, headers={"content-type": "application/json"})
    assert resp.status_code == 400
    assert "nested too deeply" in resp.text
    assert state.requests == []


@pytest.mark.parametrize(
    ("route", "word"), [(CHAT, "NaN"), ("/v1/messages", "Infinity"), ("/v1/responses", "NaN")]
)
def test_nan_and_infinity_are_refused_with_a_400_on_every_json_route(
    proxy: tuple[Scripted, str], route: str, word: str
) -> None:
    # Python's json reads NaN; the Responses route echoed it and could not encode its answer
    state, url = proxy
    body = '{"model": "m", "max_tokens": 8, "temperature": ' + word + ', "input": "hi",'
    body += ' "messages": [{"role": "user", "content": "hi"}]}'
    resp = loopback.post(url + route, content=body, headers={"content-type": "application/json"})
    assert resp.status_code == 400, resp.text
    assert f"{word} is not a JSON number" in resp.text
    assert state.requests == []


_PLAIN = json.dumps({"model": "m", "max_tokens": 8, "input": "hi", "messages": HELLO}).encode()
_GZIPPED = gzip.compress(_PLAIN)


@pytest.mark.parametrize("route", [CHAT, "/v1/messages", "/v1/responses"])
@pytest.mark.parametrize(
    "body",
    [_GZIPPED, _GZIPPED[:-8], _GZIPPED[: len(_GZIPPED) // 2], _PLAIN],
    ids=["whole", "without-its-trailer", "cut-mid-member", "plain-json-labelled-gzip"],
)
def test_a_body_in_a_content_coding_is_refused_in_one_line_and_nothing_goes_upstream(
    proxy: tuple[Scripted, str], store: Store, route: str, body: bytes
) -> None:
    # a gzip body was refused as text that is not UTF-8; plain JSON labelled gzip was
    # rewritten, stored and sent upstream still labelled gzip
    state, url = proxy
    headers = {"content-type": "application/json", "content-encoding": "gzip"}
    resp = loopback.post(url + route, content=body, headers=headers)
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert err["message"].startswith("request body in Content-Encoding 'gzip': the proxy reads")
    assert "\n" not in err["message"]
    assert state.requests == [] and store.count() == 0


def test_a_lone_surrogate_is_refused_before_it_can_poison_the_sessions_figures(
    proxy: tuple[Scripted, str],
) -> None:
    # it became the session's title: /api/stats and every later flush of the figures failed
    state, url = proxy
    body = b'{"messages": [{"role": "user", "content": "hi \\ud800"}]}'
    resp = loopback.post(url + CHAT, content=body, headers={"content-type": "application/json"})
    assert resp.status_code == 400, resp.text
    assert "lone UTF-16 surrogate" in resp.json()["error"]["message"]
    assert state.requests == []
    assert loopback.get(url + "/api/stats").status_code == 200


def test_surrogate_pairs_and_an_escaped_backslash_before_u_are_text(
    proxy: tuple[Scripted, str],
) -> None:
    state, url = proxy
    body = b'{"messages": [{"role": "user", "content": "\\ud83c\\udf89 and \\\\ud800"}]}'
    resp = loopback.post(url + CHAT, content=body, headers={"content-type": "application/json"})
    assert resp.status_code == 200, resp.text
    assert state.requests[-1]["body"]["messages"][0]["content"] == "\U0001f389 and \\ud800"


def test_an_unknown_role_is_refused_without_reaching_the_upstream(
    proxy: tuple[Scripted, str],
) -> None:
    state, url = proxy
    resp = loopback.post(url + CHAT, json={"messages": [{"role": "wizard", "content": "x"}]})
    assert resp.status_code == 400
    assert "wizard" in resp.json()["error"]["message"]
    assert state.requests == []


def test_an_unreachable_upstream_is_a_502_in_the_openai_error_shape(store: Store) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with proxy_for(dead, store, n_ctx=4096) as (server, _):
        resp = loopback.post(server.url + CHAT, json={"messages": HELLO})
        streamed = loopback.post(server.url + CHAT, json={"messages": HELLO, "stream": True})
    for r in (resp, streamed):
        assert r.status_code == 502
        assert r.json()["error"]["type"] == "upstream_unavailable"


def test_an_upstream_slower_than_the_timeout_is_a_504_in_the_openai_error_shape(
    upstream: tuple[Scripted, ServerThread], store: Store
) -> None:
    state, server = upstream
    with proxy_for(server.url, store, n_ctx=4096, timeout_s=0.5) as (proxy_server, _):
        resp = loopback.post(
            proxy_server.url + CHAT, json={"messages": HELLO, "model": "hold"}, timeout=30
        )
    assert resp.status_code == 504
    assert resp.json()["error"]["type"] == "upstream_timeout"
    # the proxy gave up on the upstream request: its connection was closed
    wait_until(state.cancelled.is_set, 10, what="upstream request abandoned")


def test_an_upstream_4xx_is_passed_through_unchanged(proxy: tuple[Scripted, str]) -> None:
    state, url = proxy
    raw = b'{"error":{"code":401,"message":"bad key","type":"authentication_error"}}'
    state.answer = (401, raw)
    for stream in (False, True):
        resp = loopback.post(url + CHAT, json={"messages": HELLO, "stream": stream})
        assert resp.status_code == 401
        assert resp.content == raw


def test_authorization_is_forwarded_and_never_logged(
    proxy: tuple[Scripted, str], caplog: pytest.LogCaptureFixture
) -> None:
    state, url = proxy
    secret = "sk-test-0123456789abcdef"
    with caplog.at_level(logging.DEBUG):
        resp = loopback.post(
            url + CHAT, json={"messages": HELLO}, headers={"Authorization": f"Bearer {secret}"}
        )
    assert resp.status_code == 200
    assert state.requests[-1]["headers"]["authorization"] == f"Bearer {secret}"
    assert secret not in caplog.text


def test_a_non_streaming_answer_comes_back_byte_for_byte_and_is_counted(
    proxy: tuple[Scripted, str],
) -> None:
    state, url = proxy
    resp = loopback.post(url + CHAT, json={"messages": HELLO, "max_tokens": 4})
    assert resp.status_code == 200
    assert resp.json()["choices"][0]["message"]["content"] == "hello"
    assert state.requests[-1]["body"]["max_tokens"] == 4
    stats = loopback.get(url + "/api/stats").json()
    assert stats["live"]["counters"]["requests"] == 1
    assert stats["live"]["counters"]["prompt_tokens"] == 10


def test_stream_chunks_reach_the_client_before_the_upstream_finishes(
    proxy: tuple[Scripted, str],
) -> None:
    state, url = proxy
    body = {"messages": HELLO, "stream": True, "model": "slow"}
    with loopback.stream("POST", url + CHAT, json=body, timeout=10) as resp:
        chunks = resp.iter_raw()
        first = next(chunks)
        # the upstream is still holding the rest back: the proxy did not buffer
        assert b"first" in first and not state.finished.is_set()
        state.release.set()
        rest = b"".join(chunks)
    assert rest.rstrip().endswith(b"data: [DONE]")
    assert b'"cache_n": 7' in rest
    wait_until(
        lambda: loopback.get(url + "/api/stats").json()["live"]["counters"]["cached_tokens"] == 7,
        5,
        what="stream usage counted",
    )


def test_a_client_that_disconnects_mid_stream_cancels_the_upstream(
    proxy: tuple[Scripted, str],
) -> None:
    state, url = proxy
    body = {"messages": HELLO, "stream": True, "model": "hold"}
    with loopback.stream("POST", url + CHAT, json=body, timeout=10) as resp:
        assert b"first" in next(resp.iter_raw())
    wait_until(state.cancelled.is_set, 10, what="upstream stream cancelled")
    assert not state.finished.is_set()


def test_a_client_that_disconnects_before_a_non_streaming_answer_cancels_the_upstream(
    proxy: tuple[Scripted, str],
) -> None:
    state, url = proxy
    with pytest.raises(httpx.ReadTimeout):
        loopback.post(url + CHAT, json={"messages": HELLO, "model": "hold"}, timeout=0.5)
    wait_until(state.cancelled.is_set, 10, what="upstream request cancelled")


def test_a_single_message_larger_than_n_ctx_is_never_forwarded_raw(
    proxy: tuple[Scripted, str],
) -> None:
    state, url = proxy
    marker = "UNIQUE-MARKER-7f3a"
    dump = " ".join(f"{marker}-{i}" for i in range(6000))  # 6000 tokens > n_ctx 4096
    messages = [{"role": "user", "content": dump}, {"role": "user", "content": "summarise"}]
    resp = loopback.post(url + CHAT, json={"messages": messages})
    assert resp.status_code == 200
    wire = json.dumps(state.requests[-1]["body"]["messages"])
    assert f"{marker}-5999" not in wire
    assert loopback.get(url + "/api/stats").json()["live"]["counters"]["stubs_made"] >= 1


def test_a_session_whose_tokenize_answers_no_tokens_is_still_windowed(
    proxy: tuple[Scripted, str],
) -> None:
    # an upstream answering {"tokens": []} to every /tokenize made each text 0 tokens:
    # the session never reached the high water and went upstream whole, however long
    state, url = proxy
    state.tokenize_answer = b'{"tokens": []}'
    words = " ".join(f"w{j}" for j in range(120))
    messages = [{"role": "system", "content": "You are a helpful agent."}]
    for i in range(40):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append({"role": role, "content": f"turn {i} marker-{i}-osprey {words}"})
    messages.append({"role": "user", "content": "what now?"})
    resp = loopback.post(url + CHAT, json={"messages": messages})
    assert resp.status_code == 200
    wire = json.dumps(state.requests[-1]["body"]["messages"])
    assert "marker-5-osprey" not in wire  # paged out, as with a counting upstream
    live = loopback.get(url + "/api/stats").json()["live"]
    assert live["counters"]["windowed"] >= 1


def test_a_huge_message_is_gisted_once_and_each_distinct_piece_stemmed_once(
    proxy: tuple[Scripted, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the work bound in operations, not seconds: 6,000 distinct words of few pieces
    analysis.clear_caches()
    stems: list[str] = []
    gists: list[int] = []
    stem = analysis._stem

    def counted_stem(piece: str) -> str:
        stems.append(piece)
        return stem(piece)

    def counted_gist(text: str, max_chars: int = 280) -> str:
        gists.append(len(text))
        return gist.gist(text, max_chars)

    monkeypatch.setattr(analysis, "_stem", counted_stem)
    monkeypatch.setattr(message_stubs, "gist", counted_gist, raising=True)
    state, url = proxy
    dump = " ".join(f"BULK-MARKER-9c2e-{i}" for i in range(6000))
    messages = [{"role": "user", "content": dump}, {"role": "user", "content": "summarise"}]
    assert loopback.post(url + CHAT, json={"messages": messages}).status_code == 200
    assert "BULK-MARKER-9c2e-5999" not in json.dumps(state.requests[-1]["body"]["messages"])
    assert sum(1 for n in gists if n >= len(dump)) == 1
    # each distinct hump about twice at most (BULK, MARKER, 9, c, 2, e and 6,000 numbers:
    # analysed when first met, again when met twice and kept; a chunk boundary inside a
    # word adds a few pieces), not once per word it is in (~42,000)
    assert len(stems) <= 2 * 6006 + 100


def test_models_advertise_the_upstream_context_size_and_the_alias(
    upstream: tuple[Scripted, ServerThread], store: Store
) -> None:
    state, server = upstream
    state.n_ctx = 3072
    with proxy_for(server.url, store, model_alias="offload-local") as (proxy_server, _):
        listing = loopback.get(proxy_server.url + "/v1/models").json()
    ids = [m["id"] for m in listing["data"]]
    assert ids == ["offload-local", "scripted"]
    assert all(m["context_length"] == 3072 for m in listing["data"])
    assert all(m["meta"]["n_ctx"] == 3072 for m in listing["data"])


def test_other_paths_pass_through_to_the_upstream(proxy: tuple[Scripted, str]) -> None:
    _state, url = proxy
    assert loopback.get(url + "/props").json()["default_generation_settings"]["n_ctx"] == 4096
    tokens = loopback.post(url + "/tokenize", json={"content": "a b c"}).json()["tokens"]
    assert tokens == [0, 1, 2]
    assert loopback.get(url + "/nowhere").status_code == 404


def test_a_foreign_host_or_origin_is_refused(proxy: tuple[Scripted, str]) -> None:
    state, url = proxy
    rebound = loopback.post(url + CHAT, json={"messages": HELLO}, headers={"Host": "evil.example"})
    assert rebound.status_code == 403
    cross = loopback.get(url + "/api/stats", headers={"Origin": "http://evil.example"})
    assert cross.status_code == 403
    port = url.rsplit(":", 1)[1]
    served = loopback.get(url + "/api/stats", headers={"Origin": f"http://localhost:{port}"})
    assert served.status_code == 200
    assert state.requests == []


def test_the_proxy_compares_an_origin_as_the_mcp_routes_do(proxy: tuple[Scripted, str]) -> None:
    _state, url = proxy
    port = url.rsplit(":", 1)[1]

    def status(origin: str) -> int:
        return loopback.get(url + "/api/stats", headers={"Origin": origin}).status_code

    assert status(f"HTTP://LOCALHOST:{port}/") == 200
    assert status(f"http://[::1]:{port}") == 200
    for other in ("null", f"http://localhost:{port}/x", f"http://u@localhost:{port}"):
        assert status(other) == 403, other


@pytest.mark.parametrize(
    "host",
    [
        "[::1]evil.example",
        "[::1]evil.example:80",
        "[::1]:80x",
        "[::1",
        "127.0.0.1:abc",
        "127.0.0.1:0",
        "127.0.0.1:65536",
        "localhost:80:80",
    ],
)
def test_a_host_that_only_starts_with_a_loopback_name_or_has_no_valid_port_is_refused(
    proxy: tuple[Scripted, str], host: str
) -> None:
    url = proxy[1]
    refused = loopback.get(url + "/api/stats", headers={"Host": host})
    assert refused.status_code == 403
    port = url.rsplit(":", 1)[1]
    for ours in (f"[::1]:{port}", f"LOCALHOST:{port}", "127.0.0.1"):
        assert loopback.get(url + "/api/stats", headers={"Host": ours}).status_code == 200


def test_a_page_on_another_local_port_cannot_post_through_the_proxy(
    proxy: tuple[Scripted, str],
) -> None:
    state, url = proxy
    # the simple request a page at localhost:3000 may send without a CORS preflight
    other_port = loopback.post(
        url + CHAT,
        content=json.dumps({"messages": HELLO}).encode(),
        headers={"Origin": "http://localhost:3000", "Content-Type": "text/plain"},
    )
    assert other_port.status_code == 403
    assert "Origin not allowed" in other_port.json()["error"]["message"]
    assert state.requests == []


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded"],
)
def test_a_simple_request_content_type_is_refused_on_json_routes(
    proxy: tuple[Scripted, str], content_type: str
) -> None:
    state, url = proxy
    port = url.rsplit(":", 1)[1]
    for path, shape in (
        (CHAT, "openai"),
        ("/v1/messages", "anthropic"),
        ("/v1/responses", "openai"),
    ):
        refused = loopback.post(
            url + path,
            content=json.dumps({"messages": HELLO}).encode(),
            headers={"Origin": f"http://127.0.0.1:{port}", "Content-Type": content_type},
        )
        assert refused.status_code == 415
        body = refused.json()
        if shape == "anthropic":
            assert body["type"] == "error"
        assert "application/json" in body["error"]["message"]
    assert state.requests == []


def test_the_bearer_token_guards_the_proxys_own_endpoints_only(
    upstream: tuple[Scripted, ServerThread], store: Store
) -> None:
    _state, server = upstream
    with proxy_for(server.url, store, bearer_token="t0ken") as (proxy_server, _):
        url = proxy_server.url
        assert loopback.get(url + "/metrics").status_code == 401
        assert (
            loopback.get(url + "/api/stats", headers={"Authorization": "Bearer nope"}).status_code
            == 401
        )
        ok = loopback.get(url + "/metrics", headers={"Authorization": "Bearer t0ken"})
        assert ok.status_code == 200 and "offload_proxy_requests_total" in ok.text
        # model routes carry the upstream's key in Authorization: not ours to check
        chat = loopback.post(
            url + CHAT, json={"messages": HELLO}, headers={"Authorization": "Bearer sk-x"}
        )
        assert chat.status_code == 200


def test_counters_survive_a_restart_of_the_proxy(
    upstream: tuple[Scripted, ServerThread], store: Store
) -> None:
    _state, server = upstream
    with proxy_for(server.url, store) as (proxy_server, _):
        for _ in range(3):
            assert (
                loopback.post(proxy_server.url + CHAT, json={"messages": HELLO}).status_code == 200
            )
    with proxy_for(server.url, store) as (proxy_server, _):
        stats = loopback.get(proxy_server.url + "/api/stats").json()
    assert stats["live"]["counters"]["requests"] == 0
    assert stats["cumulative"]["counters"]["requests"] == 3


def test_a_request_resent_after_a_restart_of_the_proxy_counts_as_reused_not_a_break(
    upstream: tuple[Scripted, ServerThread], store: Store
) -> None:
    _state, server = upstream
    chat = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hello there"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "what next?"},
    ]
    with proxy_for(server.url, store) as (proxy_server, _):
        assert loopback.post(proxy_server.url + CHAT, json={"messages": chat}).status_code == 200
    with proxy_for(server.url, store) as (proxy_server, _):  # the same wire, byte for byte
        assert loopback.post(proxy_server.url + CHAT, json={"messages": chat}).status_code == 200
        stats = loopback.get(proxy_server.url + "/api/stats").json()
    live = stats["live"]["counters"]
    assert live["requests"] == 1 and live["prefix_breaks"] == 0
    assert live["reused_tokens"] == live["wire_tokens"] > 0


def test_the_anthropic_messages_shape_is_converted_both_ways(proxy: tuple[Scripted, str]) -> None:
    state, url = proxy
    body = {
        "model": "claude-x",
        "max_tokens": 8,
        "system": "be brief",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }
    resp = loopback.post(url + "/v1/messages", json=body)
    assert resp.status_code == 200
    msg = resp.json()
    assert msg["type"] == "message" and msg["content"] == [{"type": "text", "text": "hello"}]
    assert msg["stop_reason"] == "end_turn" and msg["usage"]["input_tokens"] == 10
    sent = state.requests[-1]["body"]
    assert sent["messages"][0] == {"role": "system", "content": "be brief"}
    with loopback.stream("POST", url + "/v1/messages", json={**body, "stream": True}) as sresp:
        text = "".join(sresp.iter_text())
    events = [line[7:] for line in text.splitlines() if line.startswith("event: ")]
    assert events[0] == "message_start" and events[-1] == "message_stop"
    deltas = [
        json.loads(line[6:])["delta"].get("text", "")
        for line in text.splitlines()
        if line.startswith("data: ") and '"content_block_delta"' in line
    ]
    assert "".join(deltas) == "first 0 1 2"
    data = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    # the prompt's size reaches a client's context meter: the proxy's count of the wire at
    # the start, the upstream's own (7 of its 10 tokens from its cache) at the end; as
    # Anthropic's API counts them, input_tokens are the ones not read from the cache (a
    # client adds the two: 10, where 10 + 7 overstated the prompt by its cached part)
    assert data[0]["message"]["usage"]["input_tokens"] > 0
    closing = next(d for d in data if d["type"] == "message_delta")
    assert closing["usage"] == {
        "output_tokens": 0,
        "input_tokens": 3,
        "cache_read_input_tokens": 7,
    }


@pytest.mark.parametrize("refuses", [True, False])
def test_the_wire_alternates_roles_when_the_upstream_template_demands_it(
    store: Store, refuses: bool
) -> None:
    template = (
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant') }}"
        if refuses
        else "{% for message in messages %}<|im_start|>{{ message.role }}{% endfor %}"
    )
    state = Scripted(n_ctx=2048, chat_template=template)
    messages: list[dict[str, str]] = [{"role": "user", "content": "start"}]
    with serving(scripted_upstream(state)) as up, proxy_for(up.url, store) as (proxy, _):
        assert (
            loopback.get(proxy.url + "/api/stats").json()["upstream"]["alternate_roles"] is refuses
        )
        for t in range(30):
            resp = loopback.post(proxy.url + CHAT, json={"messages": messages})
            assert resp.status_code == 200
            messages += [
                {"role": "assistant", "content": f"answer {t} " + "detail " * 40},
                {"role": "user", "content": f"question {t} " + "context " * 40},
            ]
    wire = state.requests[-1]["body"]["messages"]
    roles = [m["role"] for m in wire]
    assert any(m["content"].startswith("[offload: ") for m in wire)  # it was windowed
    if refuses:
        assert all(a != b for a, b in itertools.pairwise(roles)), roles


@pytest.mark.parametrize("stream", [True, False])
def test_the_answer_is_counted_while_the_client_reads_it_not_on_the_next_turn(
    proxy: tuple[Scripted, str], stream: bool
) -> None:
    state, url = proxy
    messages = [{"role": "user", "content": "count me please"}]
    resp = loopback.post(url + CHAT, json={"messages": messages, "stream": stream})
    assert resp.status_code == 200
    answer = "first 0 1 2" if stream else "hello"  # what the scripted upstream answers
    wait_until(lambda: answer in state.tokenized, 10, what="the answer counted")
    calls = state.tokenize_calls
    follow_up = [
        *messages,
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "and now this"},
    ]
    assert loopback.post(url + CHAT, json={"messages": follow_up}).status_code == 200
    # before forwarding, only the new message was counted (the follow-up's own answer is
    # counted afterwards, in the background, and may land in the list at any time)
    forwarded_at = state.requests[-1]["tokenized_before"]
    assert state.tokenized[calls:forwarded_at] == ["and now this"]


def _main_turns(
    store: Store, turns: int, side: list[dict[str, str]] | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A tool-using conversation through a real proxy, ``side`` sent before its last turn:
    (the wire of the turn before ``side``, the wire of the last turn)."""
    state = Scripted(n_ctx=2048)
    tools = [{"type": "function", "function": {"name": "shell", "parameters": {}}}]
    messages: list[dict[str, str]] = list(OPENING)
    with serving(scripted_upstream(state)) as up, proxy_for(up.url, store) as (proxy, _):
        for t in range(turns):
            if t == turns - 1 and side is not None:
                resp = loopback.post(proxy.url + CHAT, json={"messages": side, "max_tokens": 16})
                assert resp.status_code == 200
                assert state.requests[-1]["body"]["messages"] == side  # served as sent
            resp = loopback.post(proxy.url + CHAT, json={"messages": messages, "tools": tools})
            assert resp.status_code == 200
            messages += [
                {"role": "assistant", "content": f"answer {t} " + "detail " * 40},
                {"role": "user", "content": f"question {t} " + "context " * 40},
            ]
    return state.requests[-3 if side else -2]["body"]["messages"], state.requests[-1]["body"][
        "messages"
    ]


OPENING = [
    {"role": "system", "content": "You are the Acme coding agent."},
    {"role": "user", "content": "Fix the failing build."},
]


def test_a_side_request_beside_the_conversation_changes_nothing_of_its_wire(
    tmp_path: Path,
) -> None:
    """A harness's title request (same opening, no tools, one short question) is served as
    sent, and the conversation's next turn goes out exactly as it would have without it."""
    side = [*OPENING, {"role": "user", "content": "Title this conversation in 5 words."}]
    with Store(tmp_path / "alone.db") as alone, Store(tmp_path / "beside.db") as beside:
        before, expected = _main_turns(alone, 24, None)
        assert any(m["content"].startswith("[offload: ") for m in before)  # windowed
        _, got = _main_turns(beside, 24, side)
    assert got == expected


@pytest.mark.slow  # ~30 requests through the real proxy: a session long enough that the
# default band pages part of it out, so recall has something to bring back
def test_with_recall_every_request_upstream_starts_with_the_previous_one_but_its_notes(
    proxy: tuple[Scripted, str],
) -> None:
    state, url = proxy
    history = ask(session(32), "Who rotated the vault key, the pelican quartermaster?")
    history += [
        {"role": "assistant", "content": "The pelican quartermaster, at 03:14."},
        {"role": "user", "content": "Thanks. Anything else in the logs?"},
    ]
    points = [k for k, m in enumerate(history) if m["role"] == "assistant" and k > 2]
    for k in [*points, len(history)]:
        resp = loopback.post(url + CHAT, json={"messages": history[:k]})
        assert resp.status_code == 200
    sent = [r["body"]["messages"] for r in state.requests]
    assert any(expand.is_proxy_note(m) for m in sent[-2])  # recall fired on the question
    kept = 0
    for before, after in itertools.pairwise(sent):
        stable = list(before)
        while stable and expand.is_proxy_note(stable[-1]):
            stable.pop()  # a turn's recall block and loop note go last: the next drops them
        assert not any(expand.is_proxy_note(m) for m in stable)
        if json.dumps(after[: len(stable)]) == json.dumps(stable):
            kept += 1
    windowed = loopback.get(url + "/api/stats").json()["live"]["counters"]["windowed"]
    assert kept == len(sent) - 1 - windowed  # only windowing ever broke the history
    stats = loopback.get(url + "/api/stats").json()["live"]
    assert 0 < stats["counters"]["reused_tokens"] < stats["counters"]["wire_tokens"]
    assert (
        stats["kv_reuse_ratio"]
        == stats["counters"]["reused_tokens"] / (stats["counters"]["wire_tokens"])
    )
    assert stats["breaks"].get("recall", 0) >= 1
    metrics = loopback.get(url + "/metrics").text
    assert "offload_proxy_kv_reuse_ratio " in metrics
    assert 'cause="recall"' in metrics


def test_the_start_line_names_the_address_bound_and_warns_when_it_is_not_loopback(
    tmp_path: Path,
) -> None:
    from offload.config import load_settings
    from offload.proxy.app import banner

    def settings(host: str) -> Any:
        flags = {"proxy.host": host, "proxy.upstream": "http://u:pw@127.0.0.1:8080"}
        return load_settings(env={"OFFLOAD_HOME": str(tmp_path)}, flags=flags).proxy

    local = banner(settings("127.0.0.1"))
    assert local == "offload proxy on http://127.0.0.1:8900  (upstream http://u:***@127.0.0.1:8080)"
    head, warning = banner(settings("0.0.0.0")).split("\n")
    assert head.startswith("offload proxy on http://0.0.0.0:8900")
    assert warning.startswith("warning: listening on 0.0.0.0 (every interface), not loopback")
    assert "/v1" in warning and "/metrics, /api/stats (set [proxy] bearer_token)" in warning


def test_the_routes_without_v1_are_bounded_and_counted_like_the_v1_ones(
    proxy: tuple[Scripted, str],
) -> None:
    # a client given the base URL without /v1 posts /chat/completions: the same exchange
    state, url = proxy
    huge = [{"role": "user", "content": "word " * 20_000}]
    resp = loopback.post(url + "/chat/completions", json={"messages": huge})
    listing = loopback.get(url + "/models")
    stats = loopback.get(url + "/api/stats").json()
    assert resp.status_code == 200, resp.text
    sent = state.requests[-1]["body"]["messages"]
    assert len(json.dumps(sent)) < len(json.dumps(huge)) // 2  # stubbed, not forwarded raw
    assert stats["live"]["counters"]["requests"] == 1
    assert listing.status_code == 200 and "meta" in listing.json()["data"][0]


def test_tool_definitions_take_their_share_of_the_window_so_the_prompt_stays_under_it(
    proxy: tuple[Scripted, str],
) -> None:
    # a template renders the tools into the prompt beside the messages: 2,800 words of
    # messages fit the 4096 window alone, but not beside 1,500 words of tool definitions
    state, url = proxy
    words = " ".join(f"w{j}" for j in range(140))
    messages = [{"role": "system", "content": "You are a helpful agent."}]
    for i in range(20):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append({"role": role, "content": f"turn {i} marker-{i}-heron {words}"})
    messages.append({"role": "user", "content": "what now?"})
    description = " ".join(f"d{j}" for j in range(1500))
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": description,
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    resp = loopback.post(url + CHAT, json={"messages": messages, "tools": tools})
    assert resp.status_code == 200
    sent = state.requests[-1]["body"]
    prompt = sum(len(str(m.get("content") or "").split()) for m in sent["messages"])
    prompt += sum(len(json.dumps(t).split()) for t in sent.get("tools", []))
    assert prompt <= 0.85 * 4096
    live = loopback.get(url + "/api/stats").json()["live"]
    assert live["counters"]["windowed"] >= 1  # paged out to make the tools room
