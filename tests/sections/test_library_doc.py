"""The example in docs/library.md runs as written."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from sections.sections_workspace import REPO, generated_workspace


def test_the_library_example_builds_sections_and_answers_a_retrieve_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = (REPO / "docs" / "library.md").read_text(encoding="utf-8")
    example = re.search(r"```python\n(.*?)```", doc, re.S)
    assert example is not None
    code = example.group(1)
    assert len(code.strip().splitlines()) == 15
    agents = generated_workspace()["Project Instructions"]
    (tmp_path / "AGENTS.md").write_text(agents, encoding="utf-8")
    (tmp_path / "README.md").write_text("# Demo\nA small app.\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OFFLOAD_HOME", str(tmp_path / "home"))
    ref = "ctx:sha256:" + hashlib.sha256(agents.encode()).hexdigest()
    call = SimpleNamespace(
        id="call_1",
        function=SimpleNamespace(name="RetrieveContext", arguments=json.dumps({"reference": ref})),
    )
    scope: dict[str, object] = {"reply": SimpleNamespace(tool_calls=[call])}
    exec(compile(code, "docs/library.md", "exec"), scope)
    messages = scope["messages"]
    assert isinstance(messages, list)
    assert f'Original available via RetrieveContext(reference="{ref}")' in messages[0]["content"]
    assert "## README\n\n# Demo\nA small app.\n" in messages[0]["content"]
    assert messages[1]["tool_call_id"] == "call_1"
    assert agents in messages[1]["content"]
