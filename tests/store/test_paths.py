"""Reading files by path: confined to roots, text only, size-limited, clear errors."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from offload.errors import BinaryFile, NotAFile, OutsideRoots, TooLarge
from offload.store.paths import open_confined, project_root, read_text_file


def test_a_text_file_inside_the_root_is_read(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    got = read_text_file("a.txt", [tmp_path], max_bytes=100)
    assert got.text == "hello\n" and got.path == (tmp_path / "a.txt").resolve()


def test_a_symlink_escaping_the_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "secret.txt").write_text("secret")
    (root / "link.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(OutsideRoots, match="symlink"):
        read_text_file("link.txt", [root], max_bytes=100)


def test_dot_dot_cannot_leave_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(OutsideRoots):
        read_text_file("../x.txt", [root], max_bytes=100)


@pytest.mark.parametrize(
    ("content", "error", "message"),
    [
        (b"\x00\x01binary", BinaryFile, "binary"),
        (b"caf\xe9 latin-1", BinaryFile, "not UTF-8"),
        (b"x" * 200, TooLarge, "limit"),
    ],
)
def test_files_that_are_not_small_utf8_text_are_refused_naming_the_path(
    tmp_path: Path, content: bytes, error: type[Exception], message: str
) -> None:
    (tmp_path / "f.dat").write_bytes(content)
    with pytest.raises(error, match=message) as info:
        read_text_file("f.dat", [tmp_path], max_bytes=100)
    assert "f.dat" in str(info.value)


def test_missing_files_and_directories_are_not_files(tmp_path: Path) -> None:
    with pytest.raises(NotAFile, match="no such file"):
        read_text_file("nope.txt", [tmp_path], max_bytes=100)
    (tmp_path / "d").mkdir()
    with pytest.raises(NotAFile, match="not a regular file"):
        read_text_file("d", [tmp_path], max_bytes=100)


def test_the_project_root_is_the_nearest_git_directory(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert project_root(tmp_path / "a" / "b") == tmp_path.resolve()


def test_a_file_larger_than_its_reported_size_is_still_capped() -> None:
    # /proc files report size 0 yet hold more: like a file growing between stat and read
    status = Path("/proc/self/status")
    assert status.stat().st_size == 0 and len(status.read_bytes()) > 200
    with pytest.raises(TooLarge, match="over the 200-byte limit"):
        read_text_file(status, [Path("/proc").resolve()], max_bytes=200)


def test_a_path_with_a_nul_byte_is_refused_clearly(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("x")
    with pytest.raises(NotAFile, match="NUL byte"):
        read_text_file("a\x00b", [tmp_path], max_bytes=100)


@pytest.mark.parametrize(
    "path",
    ["a" * 300, "a" * 300 + "/b.txt", "dir/" + "é" * 200, "~no-such-user-here/x", "a\ud800b"],
)
def test_a_path_no_filesystem_can_name_is_refused_in_one_line(tmp_path: Path, path: str) -> None:
    # a component over 255 bytes, an unknown ~user, a lone surrogate: each an OSError,
    # RuntimeError or UnicodeEncodeError from the filesystem calls before
    with pytest.raises(NotAFile) as caught:
        read_text_file(path, [tmp_path], max_bytes=100)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 300


# A name checked inside the roots can be swapped before it is opened: open_confined is given
# the name as the check resolved it, and judges what it opens.


def test_a_name_swapped_for_a_link_out_of_the_roots_after_the_check_is_not_read(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "secret.txt").write_text("secret")
    (root / "a.txt").symlink_to(tmp_path / "secret.txt")  # was a file when checked
    with pytest.raises(NotAFile, match="is a symlink now"):
        open_confined(root / "a.txt", "a.txt", [root])


def test_a_directory_swapped_for_a_link_out_of_the_roots_after_the_check_is_not_read(
    tmp_path: Path,
) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "a.txt").write_text("secret")
    (root / "sub").symlink_to(outside)  # was a directory inside the root when checked
    with pytest.raises(NotAFile, match="is a symlink now"):
        open_confined(root / "sub" / "a.txt", "sub/a.txt", [root])


# A child in a mount namespace of its own, /proc unmounted there, tries the swap above
_NO_PROC = """
import sys
from pathlib import Path
from offload.errors import PathError
from offload.store.paths import open_confined
root = Path(sys.argv[1])
assert not Path("/proc/self").exists()
try:
    open_confined(root / "sub" / "a.txt", "sub/a.txt", [root])
except PathError as exc:
    print("refused:", exc)
else:
    print("read")
"""


def test_a_directory_swapped_for_a_link_is_refused_where_proc_is_not_mounted(
    tmp_path: Path,
) -> None:
    # where the file opened lives was asked of /proc: without it the check was skipped
    unshare = shutil.which("unshare")
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "a.txt").write_text("secret")
    (root / "sub").symlink_to(outside)
    script = f'umount -l /proc && exec {shlex.quote(sys.executable)} -c "$0" "$1"'
    if unshare is None:
        pytest.skip("no unshare(1) to run a child without /proc")
    done = subprocess.run(
        [unshare, "--mount", "--propagation", "private", "sh", "-c", script, _NO_PROC, str(root)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0 and "refused" not in done.stdout:
        pytest.skip(f"cannot unmount /proc in a namespace here: {done.stderr.strip()[:200]}")
    assert done.stdout.startswith("refused:"), done.stdout + done.stderr


def test_a_name_swapped_for_a_fifo_is_refused_without_waiting_for_a_writer(
    tmp_path: Path,
) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(NotAFile, match="not a regular file"):
        open_confined(tmp_path / "pipe", "pipe", [tmp_path])
