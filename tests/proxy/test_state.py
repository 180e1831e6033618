"""The proxy's shared state: what a quiet proxy gives back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from offload.config import ProxySettings
from offload.core.tokens import EstimateCounter
from offload.proxy import state as proxy_state
from offload.proxy.state import ProxyState
from offload.store.store import Store
from proxy.proxy_servers import serving


@pytest.fixture
def tokenize_root() -> Iterator[str]:
    """A model server's root whose /tokenize gives a token a word."""

    async def tokenize(request: Request) -> Response:
        text = json.loads(await request.body())["content"]
        return JSONResponse({"tokens": list(range(len(text.split())))})

    with serving(Starlette(routes=[Route("/tokenize", tokenize, methods=["POST"])])) as server:
        yield server.url


def test_a_quiet_proxy_cuts_its_token_counts_to_the_newest_and_a_busy_one_keeps_them(
    tmp_path: Path, tokenize_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        state = ProxyState(ProxySettings(upstream=f"{tokenize_root}/v1"), store)
        monkeypatch.setattr(proxy_state, "CACHE_SHARE", state.counter.cache_size // 5)
        try:
            for i in range(40):
                state.counter.count(f"tool output {i} " + "row " * i)
            state.release_ended()  # a request was just rewritten: not quiet
            assert state.counter.cache_len() == 40
            state.last_request -= proxy_state.CACHES_QUIET_S
            state.release_ended()
            assert state.counter.cache_len() == 5
        finally:
            state.counter.close()
