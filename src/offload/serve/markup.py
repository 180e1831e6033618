"""The dashboard's markup: Jinja2 templates (package data under ``serve/templates``)
rendered through Starlette's ``Jinja2Templates``.

Autoescaping is on for every template, so every value a template shows (stored text,
client text, figures) is HTML-escaped unless it is markup another template made
(:class:`markupsafe.Markup`). Python computes the values and the geometry; the templates
hold the elements.
"""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup
from starlette.templating import Jinja2Templates

TEMPLATES = Jinja2Templates(
    env=Environment(
        loader=PackageLoader("offload.serve", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
)


def render(name: str, **context: Any) -> Markup:
    """The template ``name`` rendered with ``context``, as markup safe to embed."""
    return Markup(TEMPLATES.get_template(name).render(**context))
