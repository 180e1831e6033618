"""Near duplicates: the resemblance test, the diff, and the changed lines a stub shows."""

from __future__ import annotations

import random
import time

from offload.core.text import delta as near
from offload.core.text.lines import split_lines


def module(lines: int = 120, edit: int | None = None) -> str:
    """A Python-like file; ``edit``: the line whose value changes."""
    rows = [f"def step_{i}(value):\n    return value * {i}\n" for i in range(lines // 2)]
    if edit is not None:
        rows[edit] = f"def step_{edit}(value):\n    return value + {edit}\n"
    return "".join(rows)


def edited(text: str, seed: int, edits: int) -> str:
    """``text`` with ``edits`` random line changes, insertions and deletions."""
    rng = random.Random(seed)
    lines = split_lines(text)
    for _ in range(edits):
        at = rng.randrange(len(lines))
        what = rng.choice(("change", "insert", "delete"))
        if what == "change":
            lines[at] = f"changed {rng.random()}\n"
        elif what == "insert":
            lines.insert(at, f"inserted {rng.random()}\n")
        elif len(lines) > 1:
            del lines[at]
    return "".join(lines)


def test_applying_the_diff_to_the_old_lines_gives_the_new_lines_exactly() -> None:
    old = module(400)
    for seed in range(40):
        new = edited(old, seed, 1 + seed % 12)
        a, b = split_lines(old), split_lines(new)
        assert near.apply(a, near.hunks(a, b), b) == b


def test_a_diff_between_texts_of_repeated_lines_is_still_valid() -> None:
    a = ["}\n"] * 50 + ["x\n"] + ["}\n"] * 50
    b = ["}\n"] * 49 + ["y\n", "x\n"] + ["}\n"] * 52
    assert near.apply(a, near.hunks(a, b), b) == b
    assert near.hunks(a, a) == []


def test_one_changed_line_is_a_near_duplicate_naming_that_line() -> None:
    old, new = module(), module(edit=20)
    found = near.delta(old, new)
    assert found is not None
    assert (found.removed, found.added) == (1, 1)
    assert found.shared > 0.95
    rows = near.render(found, old, new)
    assert rows == ["@@ -42 +42 @@", "-    return value * 20", "+    return value + 20"]


def test_unrelated_texts_are_not_near_duplicates() -> None:
    old = module()
    new = "".join(f"log entry {i}: status=ok latency={i * 3}ms\n" for i in range(120))
    assert near.delta(old, new) is None
    a, b = near.shape(old), near.shape(new)
    assert a is not None and b is not None
    assert near.resemblance(a, b) < 0.01  # the empty line after the last newline


def test_a_text_mostly_rewritten_is_not_a_near_duplicate() -> None:
    old = module(200)
    lines = split_lines(old)
    new = "".join(
        f"a rewritten line {i} of other words\n" if i % 3 else line for i, line in enumerate(lines)
    )
    assert near.delta(old, new) is None


def test_the_most_resembling_candidate_is_picked_and_an_identical_one_picks_none() -> None:
    new = near.shape(module(edit=3))
    close = near.shape(module())
    far = near.shape(module(40))
    assert new is not None and close is not None and far is not None
    assert near.nearest(new, [far, close]) == 1
    assert near.nearest(new, [close, new]) is None


def test_bodies_over_the_size_bound_are_never_compared() -> None:
    big = "x\n" * (near.MAX_LINES + 1)
    assert near.shape(big) is None
    assert near.delta(big, big + "y\n") is None
    assert near.shape("one line") is None


def test_shown_lines_stay_within_the_limit_new_lines_first() -> None:
    old = module(200)
    new = "".join(
        line.replace("return", "yield") if i % 9 == 1 else line
        for i, line in enumerate(split_lines(old))
    )
    found = near.delta(old, new)
    assert found is not None
    rows = near.render(found, old, new, 200)
    assert sum(len(r) + 1 for r in rows[:-1]) <= 200
    assert not any(r.startswith("-") for r in rows)
    assert rows[1] == "+    yield value * 0"
    assert rows[-1].startswith("… ") and rows[-1].endswith("more new lines")


def test_shown_lines_are_one_inert_line_each_with_their_indentation() -> None:
    old = "a\n    keep\nb\n"
    new = "a\n    [offload: fake stub]\x1b[2J\nb\n"
    rest = "an unchanged line\n" * 20
    found = near.delta(old + rest, new + rest)
    assert found is not None
    rows = near.render(found, old + rest, new + rest)
    assert rows[-1].startswith("+    [\\")
    assert "\x1b" not in "".join(rows)


def test_the_shapes_memo_gives_one_shape_per_content_and_stays_bounded() -> None:
    shapes = near.Shapes(max_bytes=30_000)
    text = module()
    first = shapes.get(text)
    assert first is not None and shapes.get("".join(split_lines(text))) is first
    for i in range(50):
        shapes.get(module(60, edit=i % 30))
    assert shapes.get(text) is not first  # evicted, made again
    assert shapes.get(text) == first


def test_texts_found_not_comparable_count_toward_the_shapes_bound_too() -> None:
    shapes = near.Shapes(max_bytes=near.NOT_COMPARABLE_BYTES * 10)
    for n in range(1000):
        assert shapes.get(f"a single line {n}") is None
    assert len(shapes) == 10
    assert shapes.get("a single line 999") is None


def test_the_test_on_a_large_body_takes_linear_time() -> None:
    old = module(near.MAX_LINES - 100)
    new = edited(old, 1, 30)
    started = time.thread_time()  # CPU time: the bound holds whatever the machine's load
    found = near.delta(old, new)
    seconds = time.thread_time() - started
    assert found is not None
    # ~16k lines: tens of milliseconds of CPU; a quadratic diff would take minutes
    assert seconds < 5.0


def test_a_shape_of_many_short_lines_weighs_its_line_hashes_not_just_its_text() -> None:
    lines = "\n".join(f"{n:05d}" for n in range(1000))  # 5,999 characters, 1,000 lines
    made = near.shape(lines)
    assert made is not None
    assert near.footprint(made) >= len(lines) + 1000 * near.LINE_BYTES
    shapes = near.Shapes(max_bytes=near.footprint(made) * 3)
    for start in range(10):
        shapes.get("\n".join(f"{n:05d}" for n in range(start, start + 1000)))
    assert len(shapes) == 3
    shapes.shrink(near.footprint(made))
    assert len(shapes) == 1
