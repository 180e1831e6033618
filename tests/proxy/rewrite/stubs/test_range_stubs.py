"""Range stubs in a small window: one read call and one search call, the CLI beside."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from offload.config import ProxySettings
from offload.core.tokens import EstimateCounter
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.stubs.expand import expand, is_range_stub
from offload.proxy.rewrite.stubs.message_stubs import least_stub_tokens
from offload.store.store import Store

Msgs = list[dict[str, Any]]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as s:
        yield s


def paged_range_stub(store: Store, n_ctx: int) -> tuple[str, int]:
    """The text and tokens of the first range stub a long chat gets under ``n_ctx``."""
    pipe = Pipeline(store, ProxySettings(recall_ratio=0.0), EstimateCounter())
    msgs: Msgs = [{"role": "system", "content": "You help."}, {"role": "user", "content": "go"}]
    for t in range(400):
        msgs += [
            {"role": "assistant", "content": f"step {t}: " + "looked at the logs " * 20},
            {"role": "user", "content": f"result {t}: " + "the service answered ok " * 20},
        ]
        result = pipe.rewrite(msgs, n_ctx)
        ranges = [m for m in result.messages if is_range_stub(m)]
        if ranges:
            assert expand(store, result.messages) == msgs
            index = result.messages.index(ranges[0])
            return str(ranges[0]["content"]), pipe.stubs.tokens(result.messages[index])
    raise AssertionError("nothing was paged out")


def test_in_a_small_window_a_range_stub_names_one_read_and_one_search_call(
    store: Store,
) -> None:
    text, tokens = paged_range_stub(store, 4096)
    assert 'offload_read(ref="ctx:sha256:' in text and "offload cat ctx:sha256:" in text
    assert 'retrieve(ref="ctx:sha256:' in text  # the exact messages
    assert "offset=1" not in text and "search(queries=" not in text
    assert 'offload_search(query="' in text
    assert tokens >= least_stub_tokens(EstimateCounter())[1]


def test_in_a_full_window_a_range_stub_names_every_way_to_read_and_search(store: Store) -> None:
    text, _ = paged_range_stub(store, 8192)
    assert 'offset=1), offload_read(ref="ctx:sha256:' in text
    assert "search(queries=" in text and 'offload_search(query="' in text
