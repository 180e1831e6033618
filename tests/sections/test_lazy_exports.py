"""``from offload import Sections`` works, and ``import offload`` does not load it."""

from __future__ import annotations

import subprocess
import sys

import pytest

import offload


def test_importing_offload_does_not_load_the_sections_library() -> None:
    code = (
        "import sys, offload; print('offload.sections' in sys.modules, 'tiktoken' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    )
    assert out.stdout.split() == ["False", "False"]


def test_the_public_entry_points_resolve_lazily_from_the_top_package() -> None:
    from offload import Section, Sections, align, format_report, join, openai_tool
    from offload.sections import builder

    assert Sections is builder.Sections and Section is builder.Section and join is builder.join
    assert callable(align) and callable(format_report) and callable(openai_tool)
    assert "Sections" in dir(offload)


def test_an_unknown_top_level_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = offload.Nope
