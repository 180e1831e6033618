"""The extractive compressed form and the advertise line."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from offload.core.tokens import EstimateCounter, default_counter
from offload.sections import Budget, advertise, extractive
from sections.sections_workspace import REPO, generated_workspace

COUNTER = default_counter()


def test_text_within_budget_is_returned_as_is() -> None:
    assert extractive("# Title\nbody\n", Budget(max_tokens=50), COUNTER) == "# Title\nbody\n"


def test_the_compressed_form_keeps_headings_and_marks_omitted_lines() -> None:
    doc = "# Guide\n\n" + "".join(
        f"## Part {p}\n\n"
        + "".join(f"Detail {p}.{i} about the parser.\n" for i in range(30))
        + "\n"
        for p in range(5)
    )
    out = extractive(doc, Budget(max_tokens=120), COUNTER)
    assert COUNTER.count(out) <= 120
    for p in range(5):
        assert f"## Part {p}" in out
    assert "[… lines " in out
    kept = [line for line in out.splitlines() if line and not line.startswith("[…")]
    original = doc.splitlines()
    positions = [original.index(line) for line in kept]
    assert positions == sorted(positions)  # original order


def test_omitted_lines_are_named_exactly() -> None:
    lines = [f"row {i}" for i in range(1, 101)]
    out = extractive("\n".join(lines), Budget(max_chars=200), COUNTER)
    shown = out.splitlines()
    assert shown[0] == "row 1"
    for row in shown:
        if row.startswith("[… lines "):
            a, b = row[len("[… lines ") : -1].split("-")
            assert int(a) >= 2 and int(b) <= 100


def test_binding_instructions_and_errors_survive_compression() -> None:
    ws = generated_workspace()
    rules = extractive(ws["Project Instructions"], Budget(max_tokens=250), COUNTER)
    assert "You must never commit secrets" in rules
    log = extractive(ws["Export log"], Budget(max_tokens=200), COUNTER)
    assert "MemoryError: export_rows exceeded 2 GiB" in log


def test_json_gets_a_structural_preview_within_budget() -> None:
    data = json.dumps([{"id": i, "name": f"item {i}", "tags": ["a", "b"]} for i in range(500)])
    out = extractive(data, Budget(max_tokens=100), COUNTER)
    assert 0 < COUNTER.count(out) <= 100


def test_this_repository_readme_and_instructions_compress_within_budget() -> None:
    for path in (REPO / "README.md", REPO / "docs" / "contributing.md"):
        text = path.read_text(encoding="utf-8")
        out = extractive(text, Budget(max_tokens=100), COUNTER)
        assert COUNTER.count(out) <= 100
        if COUNTER.count(text) > 100:
            assert out.splitlines()[0] == text.splitlines()[0]


def test_the_advertise_line_names_section_sizes_tool_and_reference() -> None:
    line = advertise('Project "X"', 2310, 420, "ctx:sha256:ab", "RetrieveContext")
    assert line == (
        'Section "Project \\"X\\"" compressed (2,310 → 420 tokens). '
        'Original available via RetrieveContext(reference="ctx:sha256:ab").'
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.text(alphabet=st.characters(max_codepoint=0xD7FF), max_size=120), max_size=80),
    st.integers(min_value=1, max_value=300),
)
def test_any_text_compresses_within_its_budget_the_same_way_twice(
    rows: list[str], budget: int
) -> None:
    counter = EstimateCounter()
    text = "\n".join(rows)
    one = extractive(text, Budget(max_tokens=budget, max_chars=budget * 4), counter)
    assert one == extractive(text, Budget(max_tokens=budget, max_chars=budget * 4), counter)
    assert counter.count(one) <= budget and len(one) <= budget * 4
