"""The dashboard's plot specs and their SVG: levels where the window puts them, values
clipped to the scale, nothing but escaped text from the figures."""

from __future__ import annotations

from typing import Any

from offload.serve import plots

WINDOW = {"high_water": 0.5, "target": 0.35, "ceiling": 0.85}


def turn(
    client: int, wire: int, *, prompt: int | None = None, cached: int | None = None
) -> dict[str, Any]:
    return {
        "at": 1.0,
        "client_tokens": client,
        "wire_tokens": wire,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "n_ctx": 1000,
    }


def test_occupancy_marks_n_ctx_and_the_window_levels_as_shares_of_it() -> None:
    spec = plots.occupancy_spec({"turns": [turn(400, 400), turn(9000, 450)]}, WINDOW, None)
    levels = {h["cls"]: h["y"] for h in spec["hlines"]}
    assert levels == {"n_ctx": 1000, "ceiling": 850, "high": 500, "target": 350}
    # the scale is the window's: the client's 9,000 tokens are clipped, not the axis
    assert spec["ymax"] < 2000
    svg = plots.svg(spec, plot_id="p", title="t")
    assert svg.count("data-level=") == 4 and 'data-points="2"' in svg


def test_occupancy_without_a_known_n_ctx_draws_no_levels() -> None:
    bare = dict(turn(10, 10), n_ctx=0)
    spec = plots.occupancy_spec({"turns": [bare]}, WINDOW, None)
    assert spec["hlines"] == []


def test_cache_bars_are_percent_of_the_prompt_and_skip_turns_without_figures() -> None:
    spec = plots.cache_spec({"turns": [turn(1, 1, prompt=200, cached=50), turn(1, 1)]})
    assert spec["bars"][0]["pts"] == [[1, 25.0]]
    assert plots.svg(spec, plot_id="c", title="t").count("<rect") == 1


def test_savings_are_cumulative_and_never_negative() -> None:
    spec = plots.savings_spec({"savings": [[1.0, 100, 40], [2.0, 10, 30], [3.0, 50, 0]]})
    assert spec["lines"][0]["pts"] == [[1.0, 60.0], [2.0, 60.0], [3.0, 110.0]]
    empty = plots.svg(plots.savings_spec({}), plot_id="s", title="t")
    assert "no proxied requests yet" in empty and "<polyline" not in empty


def test_titles_and_labels_are_escaped() -> None:
    svg = plots.svg(plots.savings_spec({}), plot_id='x"><script>', title="<b>t</b>")
    assert "<script>" not in svg and "<b>" not in svg and "&lt;b&gt;" in svg


def test_compact_numbers_on_the_axis() -> None:
    assert [plots.compact(v) for v in (7, 1234, 2_500_000)] == ["7", "1.2k", "2.5M"]
