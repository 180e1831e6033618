"""The tests are self-contained: the data they read ships in tests/data, with its licences."""

from __future__ import annotations

import re
from pathlib import Path

from realparts import CATALOGS, TEST_DATA, TRACES

TESTS = Path(__file__).resolve().parent

# the data directory a development machine keeps beside the checkout: a test must never
# build a path to it (``parents[3] / NAME``, a relative ``../NAME``, or its absolute path)
SIBLING = "shared"
OUTSIDE = re.compile(rf"""["']\.\./{SIBLING}|/\s*["']{SIBLING}["']|/work/{SIBLING}""")


def test_no_test_builds_a_path_to_the_shared_data_beside_the_checkout() -> None:
    offenders = [
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("*.py")
        if "node_modules" not in path.parts
        and path != Path(__file__).resolve()
        and OUTSIDE.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_every_vendored_data_file_is_named_in_the_data_readme_with_its_licence() -> None:
    readme = (TEST_DATA / "README.md").read_text(encoding="utf-8")
    licences = {p.name for d in (TRACES, CATALOGS) for p in d.glob("LICENSE.*")}
    for data in [*TRACES.glob("*.jsonl"), *CATALOGS.glob("*.json")]:
        row = next((line for line in readme.splitlines() if f"`{data.name}`" in line), "")
        assert row, f"{data.name} is not described in tests/data/README.md"
        named = set(re.findall(r"`(LICENSE\.[\w.-]+)`", row))
        assert named and named <= licences, f"{data.name}: its licence file is missing"
