"""offload: keep an LLM agent's context window lean without losing a byte."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# Lazy re-exports of the library surface (``from offload import Sections``); importing
# ``offload`` itself stays cheap because nothing below loads until first asked for.
_LAZY = {
    name: "offload.sections"
    for name in (
        "Sections",
        "Section",
        "BuiltSection",
        "join",
        "CutResult",
        "Retriever",
        "align",
        "align_prompts",
        "format_report",
        "openai_tool",
        "anthropic_tool",
        "mcp_tool",
    )
}


_LAZY.update({name: "offload.store" for name in ("open_store", "Store", "Filters")})


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'offload' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
