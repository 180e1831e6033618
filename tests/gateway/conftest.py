"""Gateway fixtures: a running gateway over real stdio upstreams, reached in-process."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the helpers sit next to the tests

from gateway_helpers import RawHttp, RunGateway, gateway_runner


@pytest.fixture
def run_gateway(tmp_path: Path) -> RunGateway:
    """Factory: ``async with run_gateway(servers, clients={}, **settings) as gw``."""
    return gateway_runner(tmp_path)


@pytest.fixture
def raw_http(tmp_path: Path) -> Iterator[list[RawHttp]]:
    """The raw HTTP upstreams a test starts (append them), stopped after it."""
    started: list[RawHttp] = []
    yield started
    for server in started:
        server.stop()
