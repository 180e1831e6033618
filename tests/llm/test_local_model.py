"""The local model layer against a real llama.cpp server (SmolLM2-135M), plus its pure parts."""

from __future__ import annotations

import dataclasses
from typing import Any

import anyio
import pytest

from offload.config import LocalModelSettings
from offload.core.tokens import default_counter
from offload.errors import ModelNotConfigured, UpstreamError, UpstreamTimeout, UpstreamUnavailable
from offload.llm.bench import BenchRow, format_table, run_bench
from offload.llm.bench_samples import SAMPLES, BenchSample
from offload.llm.local_model import (
    CUT_OFF,
    ECHO,
    NOT_SHORTER,
    LocalModel,
    ModelResult,
    clean_output,
    render_messages,
    split_lines,
    with_budget,
)
from realparts import INCIDENT_TEXT, LlamaServer, free_port

pytestmark = pytest.mark.anyio

# long enough to compress, short enough for ~3 s of prompt processing
LONG_TEXT = (
    INCIDENT_TEXT.removesuffix("\n")
    + " The retry policy stays at\nthree attempts with exponential backoff starting at 30 seconds.\n"
)


def settings_for(base_url: str, **overrides: Any) -> LocalModelSettings:
    base = LocalModelSettings(
        base_url=base_url,
        compress_target_tokens=48,
        distill_target_tokens=48,
        timeout=60.0,
        retries=0,
        chunk_tokens=1500,
    )
    return dataclasses.replace(base, **overrides)


def assert_guard_invariant(result: ModelResult, source: str) -> None:
    counter = default_counter()
    assert result.input_tokens == counter.count(source)
    assert result.output_tokens == counter.count(result.text)
    if result.kept_raw:
        assert result.text == source
        assert result.reason
    else:
        assert result.output_tokens < result.input_tokens
        assert result.reason == ""
        assert "<think>" not in result.text


# --- real model -----------------------------------------------------------------------------


@pytest.mark.slow
async def test_compress_shortens_a_long_text_or_keeps_it_raw(llama_server: LlamaServer) -> None:
    async with LocalModel(settings_for(llama_server.base_url)) as model:
        result = await model.compress(LONG_TEXT)
    assert_guard_invariant(result, LONG_TEXT)
    assert result.calls == 1
    assert result.seconds > 0


@pytest.mark.slow
async def test_distill_with_a_focus_returns_fewer_tokens_than_its_input(
    llama_server: LlamaServer,
) -> None:
    async with LocalModel(settings_for(llama_server.base_url)) as model:
        try:
            result = await model.distill(LONG_TEXT, focus="why the job failed", strict=True)
        except UpstreamError as exc:
            # a 135M model often loops to its cap: that is refused, never passed on as a
            # distillate (the cut-off copy used to count as one)
            assert any(r in str(exc) for r in (CUT_OFF, ECHO, NOT_SHORTER)), exc
            return
    assert not result.kept_raw
    assert 0 < result.output_tokens < result.input_tokens


@pytest.mark.slow
async def test_a_model_that_expands_a_tiny_input_leaves_the_raw_text(
    llama_server: LlamaServer,
) -> None:
    async with LocalModel(settings_for(llama_server.base_url)) as model:
        result = await model.compress("ok")
    assert result.kept_raw
    assert result.text == "ok"
    assert result.reason in (NOT_SHORTER, CUT_OFF)  # it grew, or ran into its cap growing
    assert result.calls == 1


@pytest.mark.slow
async def test_strict_distill_raises_when_the_output_is_not_shorter(
    llama_server: LlamaServer,
) -> None:
    async with LocalModel(settings_for(llama_server.base_url)) as model:
        # "ok" cannot be said in fewer tokens: the model grows it or runs into its cap
        with pytest.raises(UpstreamError, match=r"not shorter|stopped at its token cap"):
            await model.distill("ok", strict=True)


@pytest.mark.slow
async def test_a_long_input_is_map_reduced_in_a_bounded_number_of_calls(
    llama_server: LlamaServer,
) -> None:
    settings = settings_for(llama_server.base_url, chunk_tokens=96, compress_target_tokens=32)
    async with LocalModel(settings, max_calls=4) as model:
        result = await model.compress(LONG_TEXT)
    assert_guard_invariant(result, LONG_TEXT)
    assert 2 <= result.calls <= 4


@pytest.mark.slow
async def test_summarize_messages_summarises_a_conversation(llama_server: LlamaServer) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Find why sync_invoices was OOM-killed and fix it."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"function": {"name": "read_log", "arguments": '{"job": "sync_invoices"}'}}
            ],
        },
        {"role": "tool", "name": "read_log", "content": LONG_TEXT},
    ]
    async with LocalModel(settings_for(llama_server.base_url)) as model:
        result = await model.summarize_messages(messages)
    assert_guard_invariant(result, render_messages(messages))
    assert result.calls == 1


@pytest.mark.slow
async def test_an_answer_slower_than_the_timeout_is_upstream_timeout(
    llama_server: LlamaServer,
) -> None:
    settings = settings_for(llama_server.base_url, timeout=0.001, retries=1)
    async with LocalModel(settings) as model:
        with pytest.raises(UpstreamTimeout):
            await model.compress(LONG_TEXT)


@pytest.mark.slow
async def test_bench_measures_ratio_latency_and_fact_retention(llama_server: LlamaServer) -> None:
    sample = BenchSample(
        "short-log",
        LONG_TEXT,
        ("sync_invoices", "137", "batch-07", "48,000", "sync_invoices_rows_total"),
    )
    seen: list[tuple[int, int]] = []
    rows = await run_bench(
        settings_for(llama_server.base_url), [sample], progress=lambda d, t: seen.append((d, t))
    )
    assert len(rows) == 1
    assert seen == [(0, 1), (1, 1)]  # a progress bar's steps: before, and after the sample
    row = rows[0]
    assert row.error == ""
    assert row.sample == "short-log"
    assert row.facts_total == 5
    assert 0 <= row.facts_kept <= 5
    assert row.ratio == pytest.approx(row.output_tokens / row.input_tokens)
    assert row.seconds > 0
    assert "short-log" in format_table(rows)


# --- no model -------------------------------------------------------------------------------


async def test_an_unconfigured_model_raises_model_not_configured() -> None:
    async with LocalModel(LocalModelSettings()) as model:
        assert not model.configured
        with pytest.raises(ModelNotConfigured, match="base_url"):
            await model.compress(LONG_TEXT)
        with pytest.raises(ModelNotConfigured):
            await model.distill(LONG_TEXT, strict=True)
    with pytest.raises(ModelNotConfigured):
        await run_bench(LocalModelSettings())


async def test_a_model_nobody_listens_for_is_upstream_unavailable_after_retries() -> None:
    settings = settings_for(f"http://127.0.0.1:{free_port()}", retries=1)
    async with LocalModel(settings) as model:
        with pytest.raises(UpstreamUnavailable, match="cannot reach upstream"):
            await model.compress(LONG_TEXT)


async def test_with_budget_returns_the_fallback_when_the_work_is_too_slow() -> None:
    never = anyio.Event()
    cancelled = False

    async def slow() -> str:
        nonlocal cancelled
        try:
            await never.wait()
        except anyio.get_cancelled_exc_class():
            cancelled = True
            raise
        return "model"

    assert await with_budget(slow(), 0.01, lambda: "gist") == "gist"
    assert cancelled


async def test_with_budget_returns_the_result_when_in_time_and_falls_back_on_model_errors() -> None:
    async def fast() -> str:
        return "model"

    assert await with_budget(fast(), 5.0, lambda: "gist") == "model"
    async with LocalModel(LocalModelSettings()) as model:
        fallback = ModelResult("gist", False, "extractive", 1, 1, 0, 0.0)
        assert await with_budget(model.compress("x"), 5.0, lambda: fallback) is fallback
        with pytest.raises(ModelNotConfigured):
            await with_budget(model.compress("x"), 5.0, lambda: fallback, on_error=False)


def test_clean_output_drops_think_blocks_and_repeated_lines() -> None:
    raw = "<think>plan it</think>\nThe settings.\n\n\nThe settings.\nport 8900\n<think>unfinished"
    assert clean_output(raw) == "The settings.\n\nport 8900"


def test_split_lines_keeps_every_character_and_respects_the_size() -> None:
    counter = default_counter()
    text = LONG_TEXT + "x" * 2000 + "\n" + LONG_TEXT
    pieces = split_lines(text, 64, counter.count)
    assert "".join(pieces) == text
    assert all(counter.count(p) <= 64 * 1.5 for p in pieces)
    assert len(pieces) > 3


def test_render_messages_includes_text_parts_and_tool_calls() -> None:
    text = render_messages(
        [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"function": {"name": "grep", "arguments": '{"q": "x"}'}}],
            },
        ]
    )
    assert text == 'user: hi\nassistant: [calls grep({"q": "x"})]'


def test_every_bench_sample_contains_its_facts_and_is_one_to_three_kilobytes() -> None:
    assert len(SAMPLES) == 5
    for sample in SAMPLES:
        assert all(fact in sample.text for fact in sample.facts), sample.name
        assert 1000 <= len(sample.text.encode()) <= 3072, sample.name


def test_format_table_shows_each_row_and_a_total() -> None:
    rows = [
        BenchRow("a", 100, 25, 0.25, 1.5, 3, 4, 1),
        BenchRow("b", 100, 120, 1.2, 2.0, 4, 4, 1),
        BenchRow("c", 50, 0, 0.0, 0.1, 0, 4, 0, error="HTTP 500"),
    ]
    table = format_table(rows).splitlines()
    assert table[0].split()[:2] == ["sample", "in"]
    assert "expanded" in table[3]
    assert "error: HTTP 500" in table[4]
    assert table[-1].split()[:4] == ["total", "200", "145", "0.72"]
    assert "7/8" in table[-1]
