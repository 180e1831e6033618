"""The analysis caches' admission: a key is kept on its second offer, within a window."""

from __future__ import annotations

import pytest

from offload.core.text.memo import Memo, SeenTwice


def _exact(key: object) -> int:
    # ints hash to themselves: no mark shared by two of the keys used here
    assert isinstance(key, int)
    return key


def test_a_key_is_admitted_on_its_second_offer() -> None:
    door = SeenTwice(slots=1024, window=100, hash_of=_exact)
    assert [door.admit(7), door.admit(7), door.admit(7)] == [False, True, True]
    assert door.admit(8) is False


def test_the_marks_are_forgotten_after_the_window_of_first_sightings() -> None:
    door = SeenTwice(slots=1024, window=3, hash_of=_exact)
    assert door.admit(1) is False
    assert door.admit(2) is False
    assert door.admit(3) is False  # the third first sighting ends the window
    assert door.admit(1) is False  # met once more, but in a new window


def test_the_marks_table_must_be_a_power_of_two() -> None:
    with pytest.raises(ValueError, match="power of two"):
        SeenTwice(slots=1000)


def test_a_memo_keeps_only_what_it_met_twice() -> None:
    memo: Memo[int, str] = Memo(10, SeenTwice(slots=1024, window=100, hash_of=_exact))
    assert memo.keep(1, "one") is False
    assert memo.get(1) is None
    assert memo.keep(1, "one") is True
    assert memo.get(1) == "one"
    assert len(memo) == 1


def test_a_full_memo_starts_again_empty() -> None:
    memo: Memo[int, int] = Memo(3, SeenTwice(slots=1024, window=100, hash_of=_exact))
    for key in (1, 2, 3, 4, 1, 2, 3):
        memo.keep(key, key * 10)
    assert sorted(memo.data) == [1, 2, 3]
    memo.keep(4, 40)  # met before: kept, in a new dict
    assert memo.data == {4: 40}


def test_holding_gives_every_key_and_keeps_those_met_before() -> None:
    memo: Memo[int, int] = Memo(100, SeenTwice(slots=1024, window=100, hash_of=_exact))
    analysed: list[int] = []

    def analyse(key: int) -> int:
        analysed.append(key)
        return -key

    first = memo.holding({1, 2}, analyse)
    assert first == {1: -1, 2: -2} and memo.data == {}
    second = memo.holding({1, 2, 3}, analyse)
    assert second == {1: -1, 2: -2, 3: -3}
    assert memo.data == {1: -1, 2: -2}  # 3 met once: analysed, not kept
    third = memo.holding({1, 2}, analyse)
    assert third is memo.data  # all held: the cache itself, nothing analysed
    assert sorted(analysed) == [1, 1, 2, 2, 3]


def test_a_cleared_memo_forgets_its_values_and_its_marks() -> None:
    memo: Memo[int, int] = Memo(10, SeenTwice(slots=1024, window=100, hash_of=_exact))
    memo.keep(5, 50)
    memo.keep(5, 50)
    memo.clear()
    assert memo.get(5) is None
    assert memo.keep(5, 50) is False
