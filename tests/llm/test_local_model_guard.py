"""The expansion guard against answers a real server can give: cut off at the token cap,
or an echo of the input (``tests/scripted_model.py`` gives them deterministically)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from offload.config import LocalModelSettings
from offload.core.tokens import EstimateCounter
from offload.errors import UpstreamError
from offload.llm.local_model import CUT_OFF, ECHO, LocalModel, is_echo
from scripted_model import Answers, scripted_model

TEXT = "\n".join(f"line {i}: the sync job read invoice batch {i} and wrote it" for i in range(40))


@pytest.fixture
def model_server() -> Iterator[tuple[Answers, str]]:
    with scripted_model() as served:
        yield served


def _model(url: str) -> LocalModel:
    settings = LocalModelSettings(base_url=url, compress_target_tokens=64, retries=0)
    return LocalModel(settings, counter=EstimateCounter())


@pytest.mark.anyio
async def test_an_answer_cut_off_at_the_cap_is_not_taken_for_a_compression(
    model_server: tuple[Answers, str],
) -> None:
    answers, url = model_server
    answers.content, answers.finish = "the sync job read invoice batches", "length"
    async with _model(url) as model:
        result = await model.compress(TEXT)
    assert result.kept_raw and result.text == TEXT
    assert result.reason == CUT_OFF


@pytest.mark.anyio
async def test_an_echo_of_the_input_is_not_taken_for_a_compression(
    model_server: tuple[Answers, str],
) -> None:
    answers, url = model_server
    answers.content = TEXT[:300]  # shorter than the input, but only its opening, copied
    async with _model(url) as model:
        result = await model.compress(TEXT)
        assert result.kept_raw and result.text == TEXT and result.reason == ECHO
        with pytest.raises(UpstreamError, match="mostly a copy"):
            await model.distill(TEXT, strict=True)


@pytest.mark.anyio
async def test_a_real_summary_that_finished_passes_the_guard(
    model_server: tuple[Answers, str],
) -> None:
    answers, url = model_server
    answers.content = "A sync job read 40 invoice batches and wrote each one."
    async with _model(url) as model:
        result = await model.compress(TEXT)
    assert not result.kept_raw and result.text == answers.content


def test_is_echo_needs_most_of_the_output_copied_from_the_input_s_start() -> None:
    assert is_echo("line 0: the  sync\njob read", "line 0: the sync job read invoice batch")
    assert not is_echo("The job read batches.", "line 0: the sync job read invoice batch")
    assert not is_echo("", "anything")
    # a summary that merely starts like its input is not an echo
    assert not is_echo("line 0 to 39: invoice batches synced", "line 0: the sync job read")
