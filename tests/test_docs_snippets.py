"""Every ``sh`` and ``python`` block of README.md and docs/*.md runs as written.

Each block runs in a fresh directory with a private store (``OFFLOAD_HOME``) and home
(``HOME``, so ``offload setup`` writes only there), the venv's ``offload`` first on
``PATH``, and the repository's ``tests`` and ``docs`` linked in (blocks that read
``tests/data/...`` find them; what they write stays in the temporary directory). A shell
block runs under ``bash -e -o pipefail``; a Python block in a fresh interpreter.

A block that cannot run in a test says so right above it, where a reader sees it::

    <!-- not-run: why (and which test runs it, if one does) -->

and one that takes seconds is marked ``<!-- slow: why -->`` (it runs in the slow tier).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from realparts import child_env

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(\w*)[ \t]*$")
_MARK = re.compile(r"<!-- (not-run|slow): (\S.*?) -->")
#: Blocks that cannot run here stay few: each one is a snippet nobody checks.
MAX_NOT_RUN = 16


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text, and its marker if any."""

    page: str
    line: int
    lang: str
    code: str
    mark: str  # "", "not-run" or "slow"
    reason: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(path: Path, root: Path = REPO) -> list[Block]:
    """The ``sh`` and ``python`` blocks of a Markdown page, with the marker above each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        if m.group(1) in ("sh", "python"):
            above = next((x for x in reversed(lines[:i]) if x.strip()), "")
            mark = _MARK.fullmatch(above.strip())
            found.append(
                Block(
                    str(path.relative_to(root)),
                    i + 1,
                    m.group(1),
                    "\n".join(lines[i + 1 : end]) + "\n",
                    mark.group(1) if mark else "",
                    mark.group(2) if mark else "",
                )
            )
        i = end + 1
    return found


ALL = [b for page in PAGES for b in blocks(page)]


def _params(mark: str) -> list[object]:
    marks = [pytest.mark.slow] if mark == "slow" else []
    return [pytest.param(b, id=b.id, marks=marks) for b in ALL if b.mark == mark]


def test_the_pages_have_blocks_to_run_and_few_that_do_not() -> None:
    runnable = [b for b in ALL if b.mark != "not-run"]
    not_run = [b.id for b in ALL if b.mark == "not-run"]
    assert {"sh", "python"} <= {b.lang for b in runnable}
    assert len(not_run) <= MAX_NOT_RUN, not_run


def test_a_marker_is_recognised_only_directly_above_a_block(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- not-run: needs a real client -->\n\n```sh\nclaude\n```\n\n"
        "<!-- not-run: far away -->\n\ntext\n\n```python\nprint(1)\n```\n",
        encoding="utf-8",
    )
    found = [(b.mark, b.reason, b.code) for b in blocks(page, tmp_path)]
    assert found == [
        ("not-run", "needs a real client", "claude\n"),
        ("", "", "print(1)\n"),
    ]


def run_block(block: Block, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    for name in ("tests", "docs"):
        (tmp_path / name).symlink_to(REPO / name)
    bin_dir = str(Path(sys.executable).parent)
    env = child_env(
        tmp_path / "store",
        {
            "HOME": str(tmp_path / "home"),
            "XDG_CONFIG_HOME": str(tmp_path / "home" / ".config"),
            "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        },
    )
    (tmp_path / "home").mkdir()
    if block.lang == "sh":
        argv = ["bash", "-e", "-o", "pipefail", "-c", block.code]
    else:
        argv = [sys.executable, "-c", block.code]
    return subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False
    )


@pytest.mark.parametrize("block", _params("") + _params("slow"))
def test_the_snippet_runs_as_written(block: Block, tmp_path: Path) -> None:
    done = run_block(block, tmp_path)
    assert done.returncode == 0, f"{block.id} exited {done.returncode}:\n{done.stderr[-3000:]}"


# `offload setup claude-code --dry-run   # or opencode, codex`: the comment says each name
# alternative takes the command as written in the first name's place
_ALTERNATIVES = re.compile(r"^offload (\S+) (\S+)((?: [^#\s]+)*)\s+# or ([\w-]+(?:, [\w-]+)*)\s*$")


def test_the_alternatives_a_comment_names_for_a_command_run_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from offload.cli.main import main

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("OFFLOAD_HOME", str(tmp_path / "store"))
    found = []
    for block in ALL:
        for line in block.code.splitlines() if block.lang == "sh" else []:
            m = _ALTERNATIVES.match(line)
            if m is None:
                continue
            for name in m.group(4).split(", "):
                argv = [m.group(1), name, *m.group(3).split()]
                code = main(argv)
                found.append((block.id, name))
                assert code == 0, f"{block.id}: offload {' '.join(argv)}: {capsys.readouterr().err}"
    assert found  # the quickstart names clients `offload setup` wires the same way
