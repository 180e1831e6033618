"""Fixtures of the proxy's route tests: the odd upstream (``odd_upstream.py``) on loopback,
and a proxy in front of it with its memory tools offered and without."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from offload.store.store import Store
from proxy.proxy_servers import proxy_for, serving
from proxy.routes.odd_upstream import OddUpstream, odd_app


@pytest.fixture(scope="module")
def odd_upstream() -> Iterator[tuple[OddUpstream, str]]:
    """The odd upstream on loopback: (what it answers, to set; its URL)."""
    state = OddUpstream()
    with serving(odd_app(state)) as server:
        yield state, server.url


@pytest.fixture(scope="module", params=["on", "off"])
def odd_proxy(
    request: pytest.FixtureRequest,
    odd_upstream: tuple[OddUpstream, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """The proxy's URL in front of the odd upstream, its memory tools offered or not."""
    path = tmp_path_factory.mktemp("odd") / "offload.db"
    with Store(path) as store, proxy_for(odd_upstream[1], store, retrieval=request.param) as (s, _):
        yield s.url
