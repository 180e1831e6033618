"""The shared bounded cache: what it keeps, in which order it forgets, and its bound."""

from __future__ import annotations

import threading

import pytest

from offload.core.lru import MISSING, Lru


def test_the_least_recently_used_item_goes_first_when_the_bound_is_passed() -> None:
    cache: Lru[str, int] = Lru(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" is now the newest
    cache.put("c", 3)
    assert "b" not in cache
    assert (cache.get("a"), cache.get("c")) == (1, 3)
    assert len(cache) == 2


def test_a_cached_none_is_told_apart_from_a_miss_by_the_default() -> None:
    cache: Lru[str, int | None] = Lru(4)
    cache.put("none", None)
    assert cache.get("none", MISSING) is None
    assert cache.get("other", MISSING) is MISSING


def test_weights_bound_the_total_and_an_item_heavier_than_the_bound_is_not_kept() -> None:
    cache: Lru[str, str] = Lru(10, weigh=len)
    assert cache.put("a", "abcd")
    assert cache.put("b", "efgh")
    assert cache.put("c", "ij")
    assert cache.weight == 10
    assert cache.put("d", "k")  # 11 > 10: "a" goes
    assert "a" not in cache and cache.weight == 7
    assert not cache.put("b", "x" * 11)  # too heavy: not kept, and the old "b" is gone too
    assert "b" not in cache and cache.weight == 3


def test_putting_a_key_again_replaces_its_value_and_weight() -> None:
    cache: Lru[str, str] = Lru(100, weigh=len)
    cache.put("a", "x" * 40)
    cache.put("a", "y" * 10)
    assert cache.get("a") == "y" * 10
    assert cache.weight == 10 and len(cache) == 1


def test_add_keeps_the_value_already_cached() -> None:
    cache: Lru[str, list[int]] = Lru(4)
    first = cache.add("k", [1])
    second = cache.add("k", [2])
    assert first is second == [1]


def test_shrink_keeps_the_newest_and_leaves_the_bound_as_it_was() -> None:
    cache: Lru[int, int] = Lru(100)
    for n in range(50):
        cache.put(n, n)
    cache.get(0)
    cache.shrink(3)
    assert sorted(k for k in range(50) if k in cache) == [0, 48, 49]
    for n in range(50, 200):
        cache.put(n, n)
    assert len(cache) == 100  # filled up to its own bound again


def test_pop_and_clear_forget_and_release_the_weight() -> None:
    cache: Lru[str, str] = Lru(100, weigh=len)
    cache.put("a", "abc")
    cache.put("b", "de")
    assert cache.pop("a") == "abc" and cache.pop("a") is None
    assert cache.weight == 2
    cache.clear()
    assert len(cache) == 0 and cache.weight == 0


def test_a_zero_bound_keeps_nothing_and_a_negative_one_is_refused() -> None:
    cache: Lru[str, int] = Lru(0)
    assert not cache.put("a", 1)
    assert len(cache) == 0
    with pytest.raises(ValueError, match="bound"):
        Lru(-1)


def test_threads_sharing_a_cache_never_pass_its_bound_or_lose_its_weight() -> None:
    cache: Lru[int, str] = Lru(500, weigh=len)
    start = threading.Barrier(4)

    def work(offset: int) -> None:
        start.wait()
        for n in range(2000):
            cache.put(offset + n % 300, "x" * (1 + n % 7))
            cache.get(offset + (n * 7) % 300)

    threads = [threading.Thread(target=work, args=(t * 1000,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.weight <= 500
    assert cache.weight == sum(len(cache.get(k) or "") for k in list(range(4000)) if k in cache)


def test_keys_list_the_least_recently_used_first() -> None:
    cache: Lru[str, int] = Lru(3)
    for key in "abc":
        cache.put(key, 0)
    cache.get("a")
    assert cache.keys() == ["b", "c", "a"]
