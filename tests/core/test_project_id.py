"""A project's identity across machines is its git remote, whichever way it is spelt."""

from __future__ import annotations

import pytest

from offload.core.project_id import choose_remote, normalise_remote


@pytest.mark.parametrize(
    "url",
    [
        "git@github.com:a/b.git",
        "git@github.com:a/b",
        "https://github.com/a/b",
        "https://github.com/a/b.git",
        "https://github.com/a/b/",
        "https://GitHub.com/a/b",
        "ssh://git@github.com/a/b.git",
        "ssh://git@github.com:22/a/b",
        "git+ssh://git@github.com/a/b.git",
        "https://user:s3cret@github.com/a/b.git",
        "http://github.com:80/a/b",
        "github.com:a/b.git",
    ],
)
def test_every_spelling_of_one_remote_names_one_project(url: str) -> None:
    assert normalise_remote(url) == "github.com/a/b"


def test_credentials_in_a_remote_never_reach_the_identity() -> None:
    ident = normalise_remote("https://alice:ghp_TOKEN123@gitlab.example.com/team/repo.git")
    assert ident == "gitlab.example.com/team/repo"
    assert "TOKEN" not in (ident or "") and "alice" not in (ident or "")


def test_different_repositories_stay_apart() -> None:
    names = {
        normalise_remote(u)
        for u in (
            "git@github.com:a/b.git",
            "git@github.com:a/c.git",
            "git@gitlab.com:a/b.git",
            "https://github.com/a/b/c",
        )
    }
    assert len(names) == 4


def test_path_case_is_kept_but_host_case_is_not() -> None:
    assert normalise_remote("https://Example.COM/Team/Repo") == "example.com/Team/Repo"


def test_nested_groups_keep_their_whole_path() -> None:
    assert normalise_remote("git@gitlab.com:group/sub/proj.git") == "gitlab.com/group/sub/proj"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("/srv/git/proj.git", "file:/srv/git/proj"),
        ("file:///srv/git/proj.git", "file:/srv/git/proj"),
        ("file:///srv/git/my%20proj", "file:/srv/git/my proj"),
    ],
)
def test_a_local_path_remote_is_named_by_its_absolute_path(url: str, expected: str) -> None:
    assert normalise_remote(url) == expected


@pytest.mark.parametrize(
    "url",
    ["", "   ", "../proj.git", "proj", "https://github.com/", "https://github.com/a/../b",
     "git@github.com:a b", "https://github.com/a\x1b[2J"],
)  # fmt: skip
def test_a_remote_that_names_no_stable_place_gives_no_identity(url: str) -> None:
    assert normalise_remote(url) is None


def test_origin_is_preferred_then_the_first_remote_by_name() -> None:
    assert choose_remote({"upstream": "u", "origin": "o"}) == "o"
    assert choose_remote({"zeta": "z", "fork": "f"}) == "f"
    assert choose_remote({}) is None
