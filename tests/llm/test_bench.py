"""``models bench`` figures against a scripted endpoint: the token cap
does not bound the ratio, an answer at the cap is flagged, and a retry is a call."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from offload.config import LocalModelSettings
from offload.core.tokens import default_counter
from offload.llm.bench import format_table, run_bench
from offload.llm.bench_samples import SAMPLES
from scripted_model import Answers, scripted_model

pytestmark = pytest.mark.anyio
SAMPLE = SAMPLES[0]


@pytest.fixture
def model_server() -> Iterator[tuple[Answers, str]]:
    with scripted_model() as served:
        yield served


def _settings(url: str, **more: object) -> LocalModelSettings:
    base: dict[str, object] = {"base_url": url, "compress_target_tokens": 64, "retries": 0}
    return LocalModelSettings(**{**base, **more})  # type: ignore[arg-type]


async def test_a_model_that_expands_its_input_shows_a_ratio_above_one(
    model_server: tuple[Answers, str],
) -> None:
    answers, url = model_server
    # half again as long, no line repeated (repeated lines are dropped as a loop)
    lines = SAMPLE.text.splitlines()
    answers.content = SAMPLE.text + "\n" + "\n".join(f"again, {x}" for x in lines[::2])
    (row,) = await run_bench(_settings(url), [SAMPLE])
    n_in = default_counter().count(SAMPLE.text)
    # the cap left room for twice the input: a target-sized cap would have cut this answer
    assert answers.asked[0]["max_tokens"] == 2 * n_in
    assert row.error == "" and not row.cut_off
    assert row.ratio > 1.4 and row.ratio == pytest.approx(row.output_tokens / row.input_tokens)
    assert "expanded" in format_table([row])


async def test_an_answer_that_stops_at_its_cap_is_flagged_as_a_lower_bound(
    model_server: tuple[Answers, str],
) -> None:
    answers, url = model_server
    answers.content, answers.finish = SAMPLE.text[:200], "length"
    (row,) = await run_bench(_settings(url), [SAMPLE])
    assert row.cut_off and row.error == ""
    assert "stopped at its cap (ratio is a lower bound)" in format_table([row])


async def test_a_timeout_and_its_retry_count_as_two_calls(
    model_server: tuple[Answers, str],
) -> None:
    answers, url = model_server
    answers.content, answers.hang = "short", 1
    (row,) = await run_bench(_settings(url, timeout=0.5, retries=1), [SAMPLE])
    assert row.error == ""
    assert (row.calls, row.retries) == (2, 1)
    table = format_table([row]).splitlines()
    assert "1 of the calls retried" in table[2]
    assert table[-1].split()[6] == "2" and "1 retries" in table[-1]


async def test_a_sample_whose_every_attempt_timed_out_still_counts_its_calls(
    model_server: tuple[Answers, str],
) -> None:
    answers, url = model_server
    answers.hang = 2
    (row,) = await run_bench(_settings(url, timeout=0.5, retries=1), [SAMPLE])
    assert "no answer within" in row.error
    assert (row.calls, row.retries) == (2, 1)
