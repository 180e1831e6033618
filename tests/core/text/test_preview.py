"""Previews and tables of contents: kinds, budgets, JSON structure, sections."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offload.core.text.lines import line_count, raw_lines
from offload.core.text.preview import (
    CUT_MARKER,
    Preview,
    TocEntry,
    contents,
    detect_kind,
    find_errors,
    preview,
    render_contents,
    sample_entries,
)
from offload.errors import InvalidInput
from realparts import CATALOGS

CATALOG = CATALOGS / "github-mcp-server.json"

MARKDOWN = """\
---
title: not a heading
---
# Overview
Offload keeps context lean.

## Install

```sh
# not a heading either
pip install offload
```

Usage
-----
Run [it](https://example.org).

### Details ###
"""

PYTHON = """\
import os
from pathlib import Path

# a comment, not a heading


def main() -> None:
    print(os.getcwd())


class Store:
    def get(self) -> None:
        pass


async def serve() -> None:
    pass
"""

LOG = """\
2026-07-15 10:58:01 INFO starting
2026-07-15 10:59:40 INFO ready
=== phase two ===
2026-07-15 11:00:02 WARN slow disk
2026-07-15 11:02:13 ERROR failed
Traceback (most recent call last):
  File "x.py", line 3, in <module>
    boom()
ValueError: boom went wrong
2026-07-15 12:00:00 INFO recovered
"""


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('{"a": 1}', "json"),
        ("[1, 2, 3]", "json"),
        ('"just a string"', "text"),
        ("{not json", "text"),
        (MARKDOWN, "markdown"),
        (PYTHON, "code"),
        (LOG, "log"),
        ("plain words\nmore words\n", "text"),
        ("", "text"),
    ],
)
def test_detect_kind_recognises_json_markdown_code_logs_and_text(text: str, kind: str) -> None:
    assert detect_kind(text) == kind


def test_a_small_text_previews_whole() -> None:
    result = preview("one\ntwo\n", max_bytes=100)
    assert result == Preview("one\ntwo\n", 2, 2, "text")
    assert result.complete


def test_a_text_preview_cuts_at_a_line_boundary() -> None:
    text = "".join(f"line number {i}\n" for i in range(1, 101))
    result = preview(text, max_bytes=100)
    assert result.text == "".join(f"line number {i}\n" for i in range(1, 8)).rstrip("\n")
    assert (result.end_line, result.total_lines, result.next_line) == (7, 100, 8)
    assert not result.cut_mid_line


def test_a_crlf_preview_drops_only_the_last_terminator() -> None:
    result = preview("a\r\nb\r\n" + "c" * 50, max_bytes=10)
    assert result.text == "a\r\nb"
    assert result.end_line == 2


def test_a_first_line_over_the_budget_is_cut_on_a_character_boundary_and_marked() -> None:
    text = "日本語" * 100 + "\nsecond line"
    result = preview(text, max_bytes=20)
    assert result.cut_mid_line
    assert result.text.endswith(CUT_MARKER)
    assert result.text == "日本語日本" + CUT_MARKER  # 15 bytes + 3-byte marker
    assert (result.end_line, result.next_line) == (1, 1)


def test_a_preview_refuses_a_zero_budget() -> None:
    with pytest.raises(InvalidInput, match="max_bytes"):
        preview("x", max_bytes=0)


def test_a_json_object_preview_lists_keys_with_types_and_sizes() -> None:
    value = {
        "name": "demo",
        "count": 3,
        "ok": True,
        "items": [{"id": i, "body": "x" * 40} for i in range(300)],
        "meta": {"a": 1, "b": 2},
        "notes": "n" * 2000,
    }
    result = preview(json.dumps(value, indent=2), max_bytes=1024)
    assert result.structural and result.kind == "json"
    assert result.end_line == 0 and result.next_line == 1
    assert len(result.text.encode()) <= 1024
    lines = result.text.splitlines()
    assert lines[0] == "JSON object with 6 keys:"
    assert '  "name": "demo"' in lines
    assert '  "count": 3' in lines
    assert '  "items": array of 300 objects' in lines
    assert '    [0] {"id":0,"body":"' + "x" * 40 + '"}' in lines
    assert '    [299] {"id":299,"body":"' + "x" * 40 + '"}' in lines
    assert '  "meta": object, 2 keys: a, b' in lines
    assert any(line.startswith('  "notes": string, 2000 chars: "nnn') for line in lines)


def test_a_json_array_preview_shows_first_and_last_items() -> None:
    value = [{"n": i, "pad": "p" * 30} for i in range(500)]
    result = preview(json.dumps(value), max_bytes=512)
    assert result.text.splitlines()[:3] == [
        "JSON array of 500 objects:",
        '  [0] {"n":0,"pad":"' + "p" * 30 + '"}',
        '  [499] {"n":499,"pad":"' + "p" * 30 + '"}',
    ]


def test_a_json_preview_surfaces_items_that_look_like_errors() -> None:
    value = {
        "results": [{"ok": True, "v": "x" * 50} for _ in range(100)]
        + [{"status": 404, "path": "/missing"}]
        + [{"ok": True}] * 20
        + [{"level": "ERROR", "msg": "disk full"}, {"error": None, "fine": 1}],
        "job": {"exception": "Timeout"},
    }
    result = preview(json.dumps(value, indent=1), max_bytes=2048)
    assert "3 items that look like errors:" in result.text
    assert '  $.results[100] {"status":404,"path":"/missing"}' in result.text
    assert '  $.results[121] {"level":"ERROR","msg":"disk full"}' in result.text
    assert '  $.job {"exception":"Timeout"}' in result.text


def test_find_errors_counts_all_but_keeps_only_the_limit_and_skips_non_errors() -> None:
    value = [{"errors": ["e"]}, {"status": "500"}, {"status": 200}, {"error": ""}, {"s": 1}]
    found, count = find_errors(value, limit=1)
    assert count == 2
    assert found == [("$[0]", {"errors": ["e"]})]


def test_a_real_catalog_preview_fits_its_budget_and_names_the_tools_array() -> None:
    text = CATALOG.read_text(encoding="utf-8")
    result = preview(text)
    assert len(result.text.encode()) <= 2048
    assert result.text.startswith('JSON object with 1 key:\n  "tools": array of 117 objects\n')
    assert '    [0] {"annotations":' in result.text
    assert "    [116] " in result.text


def test_real_catalog_contents_point_at_the_lines_where_batches_start() -> None:
    text = CATALOG.read_text(encoding="utf-8")
    toc = contents(text)
    assert [(e.title.split(":")[0], e.level) for e in toc] == [
        ("tools", 1),
        ("tools 0-49", 2),
        ("tools 50-99", 2),
        ("tools 100-116", 2),
    ]
    tools = json.loads(text)["tools"]
    assert toc[1].title == f"tools 0-49: {tools[0]['name']} … {tools[49]['name']}"
    for entry in toc[1:]:
        assert raw_lines(text, entry.line, entry.line).strip() == "{"
        following = raw_lines(text, entry.line, min(entry.line + 400, line_count(text)))
        first = int(entry.title.split()[1].split("-")[0])
        assert f'"name": "{tools[first]["name"]}"' in following
    assert raw_lines(text, toc[0].line, toc[0].line).strip().startswith('"tools"')


def test_single_line_json_has_no_contents_rather_than_all_line_one() -> None:
    assert contents(json.dumps({"a": [1] * 200, "b": {"c": 1}})) == []


def test_multi_line_json_contents_give_each_top_level_key_its_line() -> None:
    text = '{\n  "alpha": 1,\n  "beta": {\n    "alpha": 2\n  },\n  "gamma": "x, {y}: [z]"\n}'
    assert contents(text) == [
        TocEntry(2, "alpha", 1),
        TocEntry(3, "beta", 1),
        TocEntry(6, "gamma", 1),
    ]


def test_a_large_multi_line_json_array_is_batched_by_fifty() -> None:
    text = json.dumps([{"id": f"n{i}"} for i in range(120)], indent=1)
    toc = contents(text)
    assert [e.title for e in toc] == ["items 0-49: n0 … n49", "items 50-99: n50 … n99",
                                      "items 100-119: n100 … n119"]  # fmt: skip
    assert [raw_lines(text, e.line, e.line + 1).split("\n")[1].strip() for e in toc] == [
        '"id": "n0"',
        '"id": "n50"',
        '"id": "n100"',
    ]


def test_markdown_contents_skip_front_matter_and_fenced_code() -> None:
    assert contents(MARKDOWN) == [
        TocEntry(4, "Overview", 1),
        TocEntry(7, "Install", 2),
        TocEntry(14, "Usage", 2),
        TocEntry(18, "Details", 3),
    ]


def test_code_contents_list_top_level_definitions_only() -> None:
    assert [(e.line, e.title) for e in contents(PYTHON)] == [
        (7, "def main() -> None"),
        (11, "class Store"),
        (16, "async def serve() -> None"),
    ]


def test_log_contents_mark_hour_changes_sections_and_tracebacks() -> None:
    assert [(e.line, e.title) for e in contents(LOG)] == [
        (1, "2026-07-15 10:00"),
        (3, "phase two"),
        (4, "2026-07-15 11:00"),
        (6, "Traceback: ValueError: boom went wrong"),
        (10, "2026-07-15 12:00"),
    ]


def test_plain_text_without_structure_has_no_contents() -> None:
    assert contents("just\nsome\nwords\n") == []
    assert contents("") == []


def test_contents_are_sampled_evenly_keeping_first_and_last() -> None:
    text = "\n".join(f"# Heading {i}\n\nbody" for i in range(100))
    toc = contents(text, max_entries=5)
    assert [e.title for e in toc] == [f"Heading {i}" for i in (0, 25, 50, 74, 99)]
    entries = [TocEntry(i, str(i)) for i in range(1, 11)]
    assert sample_entries(entries, 1) == entries[:1]
    assert contents(text, max_entries=0) == []


def test_render_contents_indents_by_level_relative_to_the_top() -> None:
    entries = [TocEntry(1, "Overview", 2), TocEntry(40, "Install", 3), TocEntry(90, "End", 2)]
    assert render_contents(entries) == (
        "## Contents\n- [L1] Overview\n  - [L40] Install\n- [L90] End\n"
    )
    assert render_contents([]) == ""


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=8) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=40,
)


@settings(max_examples=100, deadline=None)
@given(
    text=st.one_of(
        st.text(max_size=400),
        _JSON_VALUES.map(lambda v: json.dumps(v, ensure_ascii=False, indent=1)),
        _JSON_VALUES.map(json.dumps),
    ),
    max_bytes=st.integers(1, 300),
)
def test_a_preview_never_exceeds_its_budget_nor_splits_a_character(
    text: str, max_bytes: int
) -> None:
    result = preview(text, max_bytes)
    encoded = result.text.encode("utf-8")  # raises if a surrogate half slipped through
    assert len(encoded) <= max(max_bytes, len(CUT_MARKER.encode()))
    assert result.total_lines == line_count(text)
    if not result.structural and not result.cut_mid_line:
        assert text.startswith(result.text)
    if result.cut_mid_line:
        assert text.startswith(result.text.removesuffix(CUT_MARKER))


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=300), max_entries=st.integers(1, 10))
def test_contents_entries_are_in_range_ordered_and_capped(text: str, max_entries: int) -> None:
    toc = contents(text, max_entries)
    assert len(toc) <= max_entries
    assert all(1 <= e.line <= line_count(text) for e in toc)
    assert [e.line for e in toc] == sorted(e.line for e in toc)
    assert all("\n" not in e.title and "\r" not in e.title for e in toc)


@pytest.mark.parametrize("status", ["\u00b2", "9" * 5000, "-500", "\u0665\u0660\u0660"])
def test_a_status_that_int_cannot_read_is_no_error_and_breaks_no_preview(status: str) -> None:
    # str.isdigit() holds for "²" and for 5,000 nines; int() raises on both
    value = [{"status": status}, {"status": "503"}]
    assert find_errors(value, limit=5) == ([("$[1]", {"status": "503"})], 1)
    assert "look like errors" in preview(json.dumps(value * 200)).text
