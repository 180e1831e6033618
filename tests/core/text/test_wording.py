from __future__ import annotations

import pytest

from offload.core.text.wording import counted, plural


@pytest.mark.parametrize(
    ("n", "noun", "said"),
    [
        (1, "hit", "1 hit"),
        (0, "hit", "0 hits"),
        (2, "hit", "2 hits"),
        (1, "entry", "1 entry"),
        (3, "entry", "3 entries"),
        (2, "match", "2 matches"),
        (2, "day", "2 days"),
        (1, "orphan block", "1 orphan block"),
        (2, "orphan block", "2 orphan blocks"),
    ],
)
def test_a_count_of_one_takes_the_singular_and_any_other_the_plural(
    n: int, noun: str, said: str
) -> None:
    assert counted(n, noun) == said


def test_an_irregular_plural_is_given_and_thousands_may_be_grouped() -> None:
    assert counted(2, "child", "children") == "2 children"
    assert counted(1, "child", "children") == "1 child"
    assert counted(1024, "token", grouped=True) == "1,024 tokens"
    assert plural("scope") == "scopes"
