"""checkout_remote and offload(compress=true) against a real llama.cpp server (SmolLM2-135M)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from mcp_support import McpEnv

from realparts import INCIDENT_TEXT, LlamaServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LONG_TEXT = INCIDENT_TEXT


def model(server: LlamaServer) -> dict[str, Any]:
    return {
        "local_model.base_url": server.base_url,
        "local_model.distill_target_tokens": 48,
        "local_model.compress_target_tokens": 48,
        "local_model.retries": 0,
    }


def ref_of(text: str) -> str:
    m = re.search(r"ctx:sha256:[0-9a-f]{12}", text)
    assert m, text
    return m.group(0)


# the expansion guard's reasons: grown, cut off at the cap, or an echo of the input
GUARD_REFUSAL = re.compile("not shorter|stopped at its token cap|mostly a copy")


async def test_checkout_remote_returns_a_shorter_fenced_distillate(
    env: McpEnv, llama_server: LlamaServer
) -> None:
    async with env.connect(**model(llama_server)) as s:
        ref = ref_of(await s.ok("offload", content=LONG_TEXT, topic="incident"))
        res = await s.call("checkout_remote", ref=ref, focus="the root cause")
        before = env.store.resolve(ref)
    if res.is_error:  # a 135M model may fail the guard; then it must say so, not fall back
        assert GUARD_REFUSAL.search(res.text) and "<offload:body" not in res.text
        return
    head, _, rest = res.text.partition("\n")
    n_in, n_out = map(int, re.findall(r"~(\d+)", head)[:2])
    assert n_out < n_in
    assert rest.startswith("<offload:body:") and rest.endswith(">")
    assert before.status == "cold"  # distilling is not a checkout


async def test_checkout_remote_refuses_an_output_that_is_not_shorter(
    env: McpEnv, llama_server: LlamaServer
) -> None:
    async with env.connect(**model(llama_server)) as s:
        ref = ref_of(await s.ok("offload", content="ok", topic="tiny"))
        err = await s.fail("checkout_remote", ref=ref)
    assert GUARD_REFUSAL.search(err), err


async def test_offload_compress_stores_a_lossy_body_and_keeps_the_original(
    env: McpEnv, llama_server: LlamaServer
) -> None:
    async with env.connect(**model(llama_server)) as s:
        text = await s.ok("offload", content=LONG_TEXT, compress=True)
        ref = ref_of(text)
        entry = env.store.resolve(ref)
        original = await s.ok("retrieve", ref=ref)
    if "compress: ~" in text:
        assert entry.compressed and "lossy" in text
        assert LONG_TEXT in original
    else:
        assert "stored raw" in text and not entry.compressed
