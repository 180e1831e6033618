"""Per-turn growth from assistant-message counts carried from the previous request."""

from __future__ import annotations

from typing import Any

from offload.proxy.rewrite.phases import growth_per_turn, turn_counts


def chat(n: int) -> list[dict[str, Any]]:
    roles = ["system", "user"] + ["assistant", "tool", "tool", "user"] * n
    return [{"role": r, "content": str(i)} for i, r in enumerate(roles)]


def test_turn_counts_extended_from_a_shorter_request_are_those_counted_whole() -> None:
    msgs = chat(6)
    whole = turn_counts(msgs)
    assert whole[0] == 0 and whole[-1] == 6 and len(whole) == len(msgs) + 1
    for known in range(len(msgs) + 1):
        assert turn_counts(msgs, turn_counts(msgs[:known])) == whole


def test_growth_per_turn_from_turn_counts_is_growth_walked_over_the_messages() -> None:
    msgs = chat(5)
    ct = [10 * (i % 7) + 3 for i in range(len(msgs))]
    turns = turn_counts(msgs)
    for since in range(len(msgs) + 1):
        assert growth_per_turn(msgs, ct, since, turns) == growth_per_turn(msgs, ct, since)
    # counts of another length (a stale record) are not used
    assert growth_per_turn(msgs, ct, 2, turns[:-1]) == growth_per_turn(msgs, ct, 2)
