"""A newcomer's first commands, as the README writes them, from a fresh clone.

The repository is cloned into an empty directory (no data directory beside it,
no ``.venv``); the README's install command is parsed from the README itself (so the two
cannot drift) and run as written, and ``offload serve`` must answer. In the same clone
the package builds as a wheel and an sdist ready for PyPI, and the README's test command
runs a fast subset (not the whole suite again, recursively).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import httpx
import pytest

from realparts import child_env, free_port, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[1]


def readme_block(readme: str, needle: str) -> str:
    """The one ``sh`` block of the README whose text contains ``needle``."""
    blocks: list[str] = re.findall(r"^```sh\n(.*?)^```", readme, flags=re.M | re.S)
    found = [b.strip() for b in blocks if needle in b]
    assert len(found) == 1, f"expected one README sh block with {needle!r}, got {found}"
    return found[0]


def install_command() -> str:
    """The README's install-and-serve command."""
    return readme_block((REPO / "README.md").read_text(encoding="utf-8"), "offload serve")


def test_the_readme_names_one_install_command_and_the_test_command() -> None:
    command = install_command()
    assert "\n" not in command and command.endswith("offload serve")
    assert "pip install ." in command and "venv" in command  # never the system pip
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert readme_block(readme, "scripts/test") == "./scripts/test"
    assert "git clone" in readme


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """HEAD of this repository cloned into an empty directory, nothing beside it."""
    if shutil.which("git") is None:
        pytest.fail("git is needed to clone the repository", pytrace=False)
    where = tmp_path_factory.mktemp("fresh") / "offload"
    subprocess.run(["git", "clone", "-q", str(REPO), str(where)], check=True)
    assert [p.name for p in where.parent.iterdir()] == ["offload"]  # nothing beside it
    assert not (where / ".venv").exists()
    return where


def clean_env(home: Path) -> dict[str, str]:
    """No virtual environment of ours leaks into the child; a private store."""
    env = child_env(home)
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(sys.prefix)
    )
    return env


def test_the_readme_install_command_runs_offload_serve_from_a_fresh_clone(
    clone: Path, tmp_path: Path
) -> None:
    port = free_port()
    env = clean_env(tmp_path / "home") | {"OFFLOAD_PROXY__PORT": str(port)}
    log = tmp_path / "install.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["bash", "-c", install_command()],
            cwd=clone,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the shell and offload serve stop together
        )

    def answers() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/api/stats", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(lambda: answers() or proc.poll() is not None, 900, what="offload serve")
        assert proc.poll() is None, log.read_text(errors="replace")[-4000:]
        stats = httpx.get(f"http://127.0.0.1:{port}/api/stats", timeout=10).json()
        assert stats["store"]["path"] == str(tmp_path / "home" / "offload.db")
        assert stats["surfaces"]["mcp"]["mounted"] and stats["surfaces"]["proxy"]["mounted"]
        page = httpx.get(f"http://127.0.0.1:{port}/", timeout=10)
        assert page.status_code == 200 and "offload" in page.text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_the_package_builds_a_wheel_and_an_sdist_ready_for_pypi(
    clone: Path, tmp_path: Path
) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(clone)],
        check=True,
        capture_output=True,
        env=clean_env(tmp_path / "home"),
    )
    (wheel,) = dist.glob("offload-*.whl")
    (sdist,) = dist.glob("offload-*.tar.gz")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "offload/py.typed" in names and "offload/cli/main.py" in names
    assert not any(n.startswith("tests/") for n in names)
    for field in ("License-Expression: MIT", "License-File: LICENSE", "Requires-Python: >=3.11"):
        assert field in meta
    assert "Classifier: Programming Language :: Python :: 3.11" in meta
    assert "Description-Content-Type: text/markdown" in meta
    with tarfile.open(sdist) as tf:
        members = {m.name.split("/", 1)[1] for m in tf.getmembers() if "/" in m.name}
    assert {"LICENSE", "README.md", "pyproject.toml", "src/offload/__init__.py"} <= members


def test_the_readme_test_command_passes_a_fast_subset_in_the_fresh_clone(
    clone: Path, tmp_path: Path
) -> None:
    # the README's command with pytest arguments: lint and types of the whole clone, and
    # the fast tests that read the vendored data (not this suite again, recursively)
    subset = [
        "tests/core/text/test_lines.py",
        "tests/proxy/rewrite/test_replay.py",
        "tests/test_vendored_data.py",
    ]
    done = subprocess.run(
        ["./scripts/test", "-m", "not slow", "-q", "-p", "no:cacheprovider", *subset],
        cwd=clone,
        env=clean_env(tmp_path / "home") | {"CI": "true"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=1100,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert re.search(r"\b\d+ passed\b", done.stdout)
    assert "skipped" not in done.stdout
