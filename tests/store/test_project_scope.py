"""Scopes across machines: with ``store.scope_by = "remote"`` every clone of one repository
(at any path, on any machine) names its scope by the shared remote; by default the path."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from offload.cli.main import main
from offload.config import StoreSettings
from offload.errors import ConfigError
from offload.store.paths import project_remote, project_scope
from realparts import git_repo

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@x",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@x",
}


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, env=GIT_ENV, capture_output=True)


def two_clones(tmp_path: Path) -> tuple[Path, Path]:
    """Two clones of one repository at different paths, with the remote spelt two ways."""
    upstream = git_repo(tmp_path / "upstream")
    first, second = tmp_path / "machine-a" / "work" / "proj", tmp_path / "machine-b" / "src" / "p"
    for clone, url in (
        (first, "git@github.com:acme/proj.git"),
        (second, "https://github.com/acme/proj"),
    ):
        clone.parent.mkdir(parents=True)
        git(tmp_path, "clone", "-q", str(upstream), str(clone))
        git(clone, "remote", "set-url", "origin", url)
    return first, second


def test_two_clones_share_a_scope_by_remote_and_not_by_path(tmp_path: Path) -> None:
    first, second = two_clones(tmp_path)
    (first / "deep" / "dir").mkdir(parents=True)
    assert project_scope(first / "deep" / "dir", "remote") == "github.com/acme/proj"
    assert project_scope(second, "remote") == "github.com/acme/proj"
    assert project_scope(first, "path") == str(first.resolve())
    assert project_scope(first) != project_scope(second)


def test_a_worktree_shares_its_repository_remote(tmp_path: Path) -> None:
    first, _ = two_clones(tmp_path)
    tree = tmp_path / "tree"
    git(first, "worktree", "add", "-q", str(tree))
    assert (tree / ".git").is_file()
    assert project_scope(tree, "remote") == "github.com/acme/proj"


def test_origin_wins_over_other_remotes(tmp_path: Path) -> None:
    first, _ = two_clones(tmp_path)
    git(first, "remote", "add", "aardvark", "git@example.org:fork/proj.git")
    assert project_remote(first) == "git@github.com:acme/proj.git"
    git(first, "remote", "remove", "origin")
    assert project_scope(first, "remote") == "example.org/fork/proj"


def test_a_repository_without_a_remote_falls_back_to_its_path(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "solo")
    assert project_remote(repo) is None
    assert project_scope(repo, "remote") == str(repo.resolve())
    plain = tmp_path / "plain"
    plain.mkdir()
    assert project_scope(plain, "remote") == str(plain.resolve())


def test_an_unreadable_git_config_falls_back_to_the_path(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "broken")
    (repo / ".git" / "config").write_bytes(b'[remote "origin"\n\turl = \xff\xfe nonsense')
    assert project_scope(repo, "remote") == str(repo.resolve())


def test_an_unknown_scope_naming_is_refused() -> None:
    with pytest.raises(ConfigError, match="scope_by"):
        StoreSettings(scope_by="hostname")


def test_the_cli_finds_from_one_clone_what_the_other_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = two_clones(tmp_path)
    monkeypatch.setenv("OFFLOAD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OFFLOAD_STORE__SCOPE_BY", "remote")
    monkeypatch.chdir(first)
    assert main(["add", "--json", "the frobnicator threshold is 42"]) == 0
    stored = json.loads(capsys.readouterr().out)
    monkeypatch.chdir(second)
    assert main(["search", "--json", "frobnicator threshold"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert [h["ref"] for h in hits] == [stored["ref"]]
    monkeypatch.setenv("OFFLOAD_STORE__SCOPE_BY", "path")
    assert main(["search", "--json", "frobnicator threshold"]) == 0
    assert json.loads(capsys.readouterr().out)["hits"] == []
