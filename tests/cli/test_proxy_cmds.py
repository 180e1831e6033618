"""``offload replay``'s help: every mark its per-turn line can carry is explained."""

from __future__ import annotations

import itertools

import pytest

from cli.cli_support import run
from offload.proxy.rewrite.replay import Turn, render_turn


def turn(windowed: bool, emergency: bool, kept: bool) -> Turn:
    return Turn(
        run="run", turn=3, messages=7, client_tokens=900, wire_tokens=400, stubs_made=1,
        stubbed_messages=1, windowed=windowed, emergency=emergency, prefix_kept=kept,
        break_cause=None if kept else "windowing", ms=1.0,
    )  # fmt: skip


def test_replay_help_explains_each_flag_a_turn_line_can_show(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        run(capsys, "replay", "--help")
    help_text = capsys.readouterr().out
    for w, e, kept in itertools.product((True, False), repeat=3):
        flags = render_turn(turn(w, e, kept)).split("stubs +1")[1].split()[0]
        assert len(flags) == 3
        for mark in set(flags) - {"-"}:
            assert f"\n    {mark}  " in help_text, (mark, flags)
    assert "\n    W  " in help_text and "- it did not" in help_text
    assert "windowing" in help_text and "PROBLEM:" in help_text
