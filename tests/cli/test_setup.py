"""``offload setup CLIENT`` and ``offload status`` against each client's fixture configs.

Each client is tried on a fresh home (no config yet), on a home whose config already holds
other servers, providers and comments (``tests/data/clients/CLIENT/existing``), and on a
malformed config (``.../malformed``). The real home is never touched: ``--config-dir``.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from mcp.client.streamable_http import streamable_http_client

import loopback
from mcp import Client
from offload.cli.main import main
from offload.core.client_edits import dig, without
from offload.core.clients import CLIENTS
from realparts import MCP_INIT, TEST_DATA
from serving import ServeProcess

ACCEPT = {"Accept": "application/json, text/event-stream"}

FIXTURES = TEST_DATA / "clients"
ALL = sorted(CLIENTS)


def files_of(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes)."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def parsed(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return json.loads(text)
    if path.suffix == ".toml":
        return tomllib.loads(text)
    return yaml.safe_load(text)


def entry(client: str, root: Path, what: str) -> Any:
    """The entry offload wrote for ``what`` ("mcp"/"provider") in the client's config."""
    (file,) = [f for f in CLIENTS[client].files if f.what == what]
    doc = parsed(root / file.path)
    if isinstance(doc, list):
        return next((x for x in doc if x.get(file.at[0]) == file.at[1]), None)
    return dig(doc, file.at)


def without_offload(client: str, root: Path) -> dict[str, Any]:
    """Each config's document with offload's entries taken out."""
    out: dict[str, Any] = {}
    for file in CLIENTS[client].files:
        doc = out.get(file.path, parsed(root / file.path))
        if isinstance(doc, list):
            out[file.path] = [x for x in doc if x.get(file.at[0]) != file.at[1]]
        else:
            out[file.path] = without(doc, file.at)
    return out


def setup(
    capsys: pytest.CaptureFixture[str], home: Path, root: Path, *args: str
) -> tuple[int, str, str]:
    code = main(["setup", *args, "--config-dir", str(root), "--home", str(home)])
    out, err = capsys.readouterr()
    return code, out, err


def existing(client: str, tmp_path: Path) -> Path:
    root = tmp_path / "cfg"
    shutil.copytree(FIXTURES / client / "existing", root)
    return root


@pytest.mark.parametrize("client", ALL)
def test_setup_on_a_fresh_home_writes_the_entries_and_revert_removes_them(
    client: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = tmp_path / "cfg", tmp_path / "home"
    root.mkdir()
    code, out, _ = setup(capsys, home, root, client)
    assert code == 0 and "undo with: offload setup" in out
    for what in {f.what for f in CLIENTS[client].files}:
        assert entry(client, root, what) is not None
    written = files_of(root)
    assert written and not any(".offload-backup-" in name for name in written)  # nothing to back up
    assert setup(capsys, home, root, client)[0:2] == (
        0,
        f"{client}: already wired, nothing to change\n",
    )
    assert files_of(root) == written  # idempotent, byte for byte
    code, out, _ = setup(capsys, home, root, client, "--revert")
    assert code == 0 and "removed" in out
    assert files_of(root) == {}


@pytest.mark.parametrize("client", ALL)
def test_setup_keeps_every_other_server_and_setting_and_revert_restores_the_bytes(
    client: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = existing(client, tmp_path), tmp_path / "home"
    before = files_of(root)
    docs_before = {f.path: parsed(root / f.path) for f in CLIENTS[client].files}
    assert setup(capsys, home, root, client)[0] == 0
    after = files_of(root)
    backups = {k: v for k, v in after.items() if ".offload-backup-" in k}
    assert sorted(v for v in backups.values()) == sorted(before.values())  # byte copies
    assert without_offload(client, root) == docs_before  # nothing else changed
    for what in {f.what for f in CLIENTS[client].files}:
        assert entry(client, root, what) is not None
    assert setup(capsys, home, root, client)[0] == 0
    assert files_of(root) == after  # a second run changes nothing, makes no backup
    assert setup(capsys, home, root, client, "--revert")[0] == 0
    restored = {k: v for k, v in files_of(root).items() if ".offload-backup-" not in k}
    assert restored == before


def test_comments_and_layout_of_toml_and_yaml_configs_survive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for client, name in (
        ("codex", ".codex/config.toml"),
        ("aider", ".aider.conf.yml"),
        ("llm", ".config/io.datasette.llm/extra-openai-models.yaml"),
    ):
        root = existing(client, tmp_path / client)
        old = (root / name).read_text(encoding="utf-8")
        assert setup(capsys, tmp_path / "home", root, client)[0] == 0
        new = (root / name).read_text(encoding="utf-8")
        kept = [line for line in old.splitlines() if line.startswith("#") or not line.strip()]
        assert all(line in new.splitlines() for line in kept)
        assert new.startswith(old.rstrip("\n").split("\n", 1)[0])


@pytest.mark.parametrize("client", ALL)
def test_a_malformed_config_is_refused_in_one_line_with_nothing_changed(
    client: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "cfg"
    shutil.copytree(FIXTURES / client / "malformed", root)
    before = files_of(root)
    code, out, err = setup(capsys, tmp_path / "home", root, client)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "nothing changed" in err and str(root) in err
    assert files_of(root) == before  # no partial write, no backup
    code, _, err = setup(capsys, tmp_path / "home", root, client, "--revert")
    assert code == 2 and "nothing to revert" in err


def test_dry_run_prints_the_diff_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = existing("cursor", tmp_path)
    before = files_of(root)
    code, out, _ = setup(capsys, tmp_path / "home", root, "cursor", "--dry-run", "--mcp", "http")
    assert code == 0 and files_of(root) == before
    assert f"--- {root}/.cursor/mcp.json" in out and '+    "offload": {' in out
    assert '+      "url": "http://127.0.0.1:8900/mcp"' in out
    assert "(dry run: nothing written)" in out


def test_http_mode_points_every_mcp_entry_at_the_serve_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "http://127.0.0.1:9911"
    expected = {
        "claude-code": {"type": "http", "url": f"{url}/mcp"},
        "cursor": {"url": f"{url}/mcp"},
        "codex": {"url": f"{url}/mcp"},
        "opencode": {"type": "remote", "url": f"{url}/mcp", "enabled": True},
    }
    for client, want in expected.items():
        root = tmp_path / client
        root.mkdir()
        assert setup(capsys, tmp_path / "home", root, client, "--mcp", "http", "--url", url)[0] == 0
        assert entry(client, root, "mcp") == want


def test_the_stdio_entry_starts_this_offload_on_the_same_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = tmp_path / "cfg", tmp_path / "home"
    root.mkdir()
    assert setup(capsys, home, root, "claude-code", "--only", "mcp")[0] == 0
    got = entry("claude-code", root, "mcp")
    assert got["type"] == "stdio" and Path(got["command"]).exists()
    assert got["args"][-3:] == ["mcp", "--home", str(home)]
    assert not (root / ".claude" / "settings.json").exists()  # --only mcp


def test_providers_point_at_the_proxy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = "http://127.0.0.1:9912"
    for client in ("claude-code", "opencode", "aider", "llm"):
        root = tmp_path / client
        root.mkdir()
        args = ("--only", "provider", "--url", url, "--model", "qwen")
        assert setup(capsys, tmp_path / "home", root, client, *args)[0] == 0
    assert entry("claude-code", tmp_path / "claude-code", "provider") == url
    assert dig(entry("opencode", tmp_path / "opencode", "provider"), ["options", "baseURL"]) == (
        f"{url}/v1"
    )
    assert entry("aider", tmp_path / "aider", "provider") == f"{url}/v1"
    assert entry("llm", tmp_path / "llm", "provider") == {
        "model_id": "offload",
        "model_name": "qwen",
        "api_base": f"{url}/v1",
    }


def test_a_client_without_that_entry_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = setup(capsys, tmp_path / "home", tmp_path, "aider", "--only", "mcp")
    assert code == 2 and "aider has no mcp entry" in err


def test_revert_refuses_when_the_file_was_edited_after_setup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = existing("codex", tmp_path), tmp_path / "home"
    assert setup(capsys, home, root, "codex")[0] == 0
    config = root / ".codex" / "config.toml"
    config.write_text(config.read_text() + 'model = "edited"\n')
    edited = files_of(root)
    code, _, err = setup(capsys, home, root, "codex", "--revert")
    assert code == 2 and "changed after offload setup wrote it" in err
    assert files_of(root) == edited


def test_status_names_the_store_the_upstream_and_which_clients_are_wired(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = tmp_path / "cfg", tmp_path / "home"
    root.mkdir()
    down = "http://127.0.0.1:9"  # the discard port: nothing listens
    assert setup(capsys, home, root, "cursor", "--mcp", "http", "--url", down)[0] == 0
    assert setup(capsys, home, root, "llm", "--url", "http://127.0.0.1:9999")[0] == 0
    shutil.copytree(FIXTURES / "codex" / "malformed", root, dirs_exist_ok=True)
    args = ["status", "--json", "--config-dir", str(root), "--home", str(home)]
    code = main([*args, "--upstream", down, "--url", down])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["store"]["ok"] and doc["store"]["path"] == str(home / "offload.db")
    assert doc["upstream"] == {"ok": False, "url": down, "error": doc["upstream"]["error"]}
    assert doc["serve"]["ok"] is False
    state = {(r["client"], r["what"]): r["wired"] for r in doc["clients"]}
    assert state[("cursor", "mcp")] == "yes"
    assert state[("llm", "provider")] == "other"  # wired to another proxy URL
    assert state[("codex", "mcp")] == "unreadable"
    assert state[("claude-code", "mcp")] == "no"


TOKEN = "s3cret-setup-token-5d41402abc4b2a76"
# where each client's http entry carries static headers, as the client documents it
HEADER_KEYS = {"claude-code": "headers", "cursor": "headers", "opencode": "headers"}
HEADER_KEYS["codex"] = "http_headers"  # Codex ignores `headers` on a server table


def token_home(tmp_path: Path) -> Path:
    """A store home whose offload.toml sets [mcp] bearer_token."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "offload.toml").write_text(f'[mcp]\nbearer_token = "{TOKEN}"\n')
    return home


@pytest.mark.parametrize("client", sorted(HEADER_KEYS))
def test_with_a_bearer_token_the_http_entry_sends_it_and_only_its_owner_may_read_the_file(
    client: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, root = token_home(tmp_path), tmp_path / "cfg"
    root.mkdir()
    url = "http://127.0.0.1:9913"
    shown = [setup(capsys, home, root, client, "--mcp", "http", "--url", url, "--dry-run")]
    shown.append(setup(capsys, home, root, client, "--mcp", "http", "--url", url, "--json"))
    assert all(code == 0 for code, _, _ in shown)
    assert "Bearer <[mcp] bearer_token>" in shown[0][1]  # the diff says where it goes
    got = entry(client, root, "mcp")
    assert got[HEADER_KEYS[client]] == {"Authorization": f"Bearer {TOKEN}"}
    assert got["url"] == f"{url}/mcp"
    (file,) = [f for f in CLIENTS[client].files if f.what == "mcp"]
    assert (root / file.path).stat().st_mode & 0o777 == 0o600
    shown.append(setup(capsys, home, root, client, "--revert"))
    assert all(TOKEN not in out + err for _, out, err in shown)


def test_an_existing_config_that_now_holds_the_token_is_made_private_and_stdio_is_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = token_home(tmp_path)
    stdio_root, http_root = existing("cursor", tmp_path / "a"), existing("cursor", tmp_path / "b")
    for root in (stdio_root, http_root):
        (root / ".cursor" / "mcp.json").chmod(0o644)
    assert setup(capsys, home, stdio_root, "cursor")[0] == 0
    assert setup(capsys, home, http_root, "cursor", "--mcp", "http")[0] == 0
    assert "headers" not in entry("cursor", stdio_root, "mcp")  # stdio has no HTTP to guard
    assert (stdio_root / ".cursor" / "mcp.json").stat().st_mode & 0o777 == 0o644
    assert (http_root / ".cursor" / "mcp.json").stat().st_mode & 0o777 == 0o600
    # written again (another URL): the backup of the file holding the token is private too
    assert (
        setup(capsys, home, http_root, "cursor", "--mcp", "http", "--url", "http://[::1]:1")[0] == 0
    )
    backups = sorted((http_root / ".cursor").glob("mcp.json.offload-backup-*"))
    modes = {TOKEN in p.read_text(): p.stat().st_mode & 0o777 for p in backups}
    assert len(backups) == 2 and modes == {False: 0o644, True: 0o600}
    args = ["status", "--json", "--config-dir", str(http_root), "--home", str(home)]
    assert main([*args, "--url", "http://[::1]:1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert TOKEN not in json.dumps(doc)
    assert {(r["client"], r["what"]): r["wired"] for r in doc["clients"]}[
        ("cursor", "mcp")
    ] == "yes"


def http_entry(client: str, root: Path) -> tuple[str, dict[str, str]]:
    """The URL and headers an http MCP entry tells its client to use."""
    got = entry(client, root, "mcp")
    return got["url"], dict(got.get(HEADER_KEYS[client], {}))


@pytest.mark.slow  # a real offload serve process (seconds of CPU)
@pytest.mark.anyio
async def test_a_client_built_from_each_written_config_lists_the_tools_of_a_guarded_serve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # one home, as a user has it: serve and setup read the token from its offload.toml
    serve = ServeProcess(tmp_path)
    home = token_home(tmp_path)
    assert serve.home == home
    serve.start()
    try:
        for client in sorted(HEADER_KEYS):
            root = tmp_path / client
            root.mkdir()
            args = (client, "--mcp", "http", "--url", serve.url)
            assert setup(capsys, home, root, *args)[0] == 0
            url, headers = http_entry(client, root)
            assert headers == {"Authorization": f"Bearer {TOKEN}"}
            async with (
                httpx2.AsyncClient(headers=headers, timeout=30) as http,
                Client(streamable_http_client(url, http_client=http)) as mcp,
            ):
                names = {t.name for t in (await mcp.list_tools()).tools}
            assert {"offload", "search", "read"} <= names, client
            bare = loopback.post(url, json=MCP_INIT, headers=ACCEPT, timeout=10)
            assert bare.status_code == 401, client
    finally:
        serve.stop()
    assert TOKEN not in serve.log_text()


def test_a_symlinked_config_is_written_through_and_revert_restores_its_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # dotfiles kept in a repository: the client's config is a link into it
    root, home = existing("codex", tmp_path), tmp_path / "home"
    config = root / ".codex" / "config.toml"
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    target = dotfiles / "codex.toml"
    config.rename(target)
    config.symlink_to(target)
    before = target.read_bytes()
    assert setup(capsys, home, root, "codex")[0] == 0
    assert config.is_symlink() and config.resolve() == target
    assert target.read_bytes() != before and "offload" in target.read_text()
    assert setup(capsys, home, root, "codex", "--revert")[0] == 0
    assert config.is_symlink() and config.resolve() == target
    assert target.read_bytes() == before


def test_a_dangling_symlinked_config_is_created_through_and_revert_leaves_the_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = tmp_path / "cfg", tmp_path / "home"
    (root / ".codex").mkdir(parents=True)
    target = tmp_path / "dotfiles-codex.toml"
    config = root / ".codex" / "config.toml"
    config.symlink_to(target)
    assert setup(capsys, home, root, "codex")[0] == 0
    assert config.is_symlink() and "offload" in target.read_text()
    assert setup(capsys, home, root, "codex", "--revert")[0] == 0
    assert config.is_symlink() and not target.exists()
