"""``offload status``: each part in its row, a failing one included."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.cli_support import run


def test_status_reports_a_damaged_store_as_failing_in_its_table_not_a_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "offload.db").write_bytes(b"this is no SQLite file " * 2000)
    monkeypatch.setenv("OFFLOAD_HOME", str(home))
    code, out, _ = run(
        capsys, "status", "--upstream", "http://127.0.0.1:9", "--url", "http://127.0.0.1:9"
    )
    assert code == 1  # status's own code for a failing part
    assert out.startswith("store     FAILING")
    assert "is damaged" in out.splitlines()[0]


def test_a_provider_block_setup_wrote_for_another_url_is_still_probed_and_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Hermes's model block is no `offload` key: only setup's record tells it is offload's
    root, home = tmp_path / "cfg", tmp_path / "home"
    root.mkdir()
    elsewhere = "http://127.0.0.1:9999"
    wiring = ["--config-dir", str(root), "--home", str(home)]
    code, _, _ = run(capsys, "setup", "hermes", "--only", "provider", "--url", elsewhere, *wiring)
    assert code == 0
    down = "http://127.0.0.1:9"
    code, out, _ = run(capsys, "status", *wiring, "--upstream", down, "--url", down)
    lines = out.splitlines()
    assert f"client    hermes         provider  other      {root}/.hermes/config.yaml" in lines
    assert f"other     wired, but not as setup writes it for {down} and this offload " in out
    assert lines[-1] == (
        f"warning   hermes: its model requests go to {elsewhere}/v1, where nothing answers; "
        "start `offload serve`, or undo with `offload setup hermes --revert`"
    )


def test_a_model_block_the_user_wrote_themselves_is_not_probed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = tmp_path / "cfg", tmp_path / "home"
    (root / ".hermes").mkdir(parents=True)
    (root / ".hermes" / "config.yaml").write_text(
        "model:\n  provider: custom\n  base_url: http://127.0.0.1:9/v1\n  default: mine\n"
    )
    down = "http://127.0.0.1:9"
    wiring = ["--config-dir", str(root), "--home", str(home)]
    code, out, _ = run(capsys, "status", *wiring, "--upstream", down, "--url", down)
    assert code == 0
    assert "warning" not in out


def test_status_of_a_postgresql_store_names_its_url_without_the_password_not_a_sqlite_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "never-made"
    monkeypatch.setenv("OFFLOAD_HOME", str(home))
    # nothing listens on port 9: the store fails, and says where it is
    monkeypatch.setenv("OFFLOAD_STORE__URL", "postgresql://team:s3cret@127.0.0.1:9/offload")
    down = "http://127.0.0.1:9"
    code, out, _ = run(capsys, "status", "--upstream", down, "--url", down)
    assert code == 1
    first = out.splitlines()[0]
    assert first.startswith("store     FAILING  postgresql://team:***@127.0.0.1:9/offload  ")
    assert "s3cret" not in out and "offload.db" not in out
    assert not home.exists()
