"""The tests are self-contained: the data they read ships in tests/data, with its licences."""

from __future__ import annotations

import re
from pathlib import Path

from realparts import CATALOGS, TEST_DATA, TRACES

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
# ``Path(__file__).resolve().parents[k]``: a k past the file's depth in the repository
# names a directory outside it (where a development machine may keep data a clone lacks)
_PARENTS = re.compile(r"parents\[(\d+)\]")


def test_no_test_builds_a_path_above_the_repository() -> None:
    offenders = []
    for path in TESTS.rglob("*.py"):
        if "node_modules" in path.parts:
            continue
        deepest = len(path.relative_to(REPO).parts) - 1  # parents[deepest] is the repository
        for m in _PARENTS.finditer(path.read_text(encoding="utf-8")):
            if int(m.group(1)) > deepest:
                offenders.append(f"{path.relative_to(TESTS)}: {m.group(0)}")
    assert offenders == []


def test_the_data_the_tests_read_ships_inside_the_repository() -> None:
    for data in (TEST_DATA, TRACES, CATALOGS):
        assert data.resolve().is_relative_to(REPO / "tests" / "data"), data
        assert any(data.iterdir()), f"{data} is empty"


def test_every_vendored_data_file_is_named_in_the_data_readme_with_its_licence() -> None:
    readme = (TEST_DATA / "README.md").read_text(encoding="utf-8")
    licences = {p.name for d in (TRACES, CATALOGS) for p in d.glob("LICENSE.*")}
    for data in [*TRACES.glob("*.jsonl"), *CATALOGS.glob("*.json")]:
        row = next((line for line in readme.splitlines() if f"`{data.name}`" in line), "")
        assert row, f"{data.name} is not described in tests/data/README.md"
        named = set(re.findall(r"`(LICENSE\.[\w.-]+)`", row))
        assert named and named <= licences, f"{data.name}: its licence file is missing"
