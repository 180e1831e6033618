"""The dashboard's templates: package data, rendered with autoescaping on."""

from __future__ import annotations

from importlib import resources

from markupsafe import Markup

from offload.serve.markup import TEMPLATES, render


def test_the_templates_ship_as_package_data() -> None:
    folder = resources.files("offload.serve").joinpath("templates")
    assert {"dashboard.html", "plot.svg"} <= {p.name for p in folder.iterdir()}


def test_every_value_a_template_shows_is_escaped_unless_a_template_made_it() -> None:
    assert TEMPLATES.env.autoescape is True
    page = render("plot.svg", **_plot(title='<script>alert("x")</script>'))
    assert "<script>" not in page and "&lt;script&gt;" in page
    inner = Markup("<b>kept</b>")
    assert "<b>kept</b>" in render("plot.svg", **_plot(title="t", label=inner))


def _plot(title: str, label: str = "0") -> dict[str, object]:
    return {
        "plot_id": "p",
        "title": title,
        "width": 10,
        "height": 10,
        "left": 1,
        "right": 9,
        "grid": [{"y": "1.0", "ty": "5.0", "label": label}],
        "xlabels": [],
        "hlines": [],
        "rects": [],
        "polylines": [],
        "empty": None,
    }
