"""The in-memory copies are owed a release only when no search runs and none has for the
set time, and once per quiet spell."""

from __future__ import annotations

from offload.store.search.memory.idle import SearchIdle


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_copies_are_let_go_only_after_the_set_time_without_a_search() -> None:
    clock = Clock()
    idle = SearchIdle(30.0, clock)
    assert not idle.quiet()  # nothing searched yet: nothing held
    with idle.searching():
        clock.now += 100
        assert not idle.quiet()  # a search is running
    clock.now += 29
    assert not idle.quiet()
    clock.now += 1
    assert idle.quiet()
    with idle.paused() as quiet:
        assert quiet
    assert not idle.quiet()  # released once per quiet spell
    with idle.searching():
        pass
    clock.now += 30
    assert idle.quiet()


def test_nothing_is_let_go_while_a_search_runs_nor_when_idle_time_is_off() -> None:
    clock = Clock()
    idle = SearchIdle(30.0, clock)
    with idle.searching(), idle.paused() as quiet:
        assert not quiet
    off = SearchIdle(0.0, clock)
    with off.searching():
        pass
    clock.now += 10_000
    assert not off.quiet()
