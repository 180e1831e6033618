"""``offload setup CLIENT`` and ``offload status`` against each client's fixture configs.

Each client is tried on a fresh home (no config yet), on a home whose config already holds
other servers, providers and comments (``tests/data/clients/CLIENT/existing``), and on a
malformed config (``.../malformed``). The real home is never touched: ``--config-dir``.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from mcp.client.streamable_http import streamable_http_client

import loopback
from mcp import Client
from offload.cli.main import main
from offload.cli.wiring.config_files import STATE, digest
from offload.core.clients.edits import dig, without
from offload.core.clients.jsonc import loads
from offload.core.clients.wiring import CLIENTS, current
from offload.core.tokens import EstimateCounter
from offload.store.store import Store
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
        return loads(text, str(path))  # Zed's and VS Code's comments and trailing commas
    if path.suffix == ".toml":
        return tomllib.loads(text)
    return yaml.safe_load(text)


def entry(client: str, root: Path, what: str) -> Any:
    """The entry offload wrote for ``what`` ("mcp"/"provider") in the client's config."""
    (file,) = [f for f in CLIENTS[client].files if f.what == what]
    return current(file, parsed(root / file.path))


def without_offload(client: str, root: Path) -> dict[str, Any]:
    """Each config's document with offload's entries taken out."""
    return strip(client, {f.path: parsed(root / f.path) for f in CLIENTS[client].files})


def strip(client: str, docs: dict[str, Any]) -> dict[str, Any]:
    """``docs`` (path -> document) without anything at the places offload writes."""
    out: dict[str, Any] = {}
    for file in CLIENTS[client].files:
        doc = out.get(file.path, docs[file.path])
        if file.match:
            items = dig(doc, file.at[:-1]) if file.at[:-1] else doc
            kept = [x for x in items if x.get(file.match) != file.at[-1]]
            doc = {**doc, file.at[0]: kept} if file.at[:-1] else kept
            out[file.path] = doc
        else:
            out[file.path] = without(doc, file.at)
    return out


def setup(
    capsys: pytest.CaptureFixture[str], home: Path, root: Path, *args: str
) -> tuple[int, str, str]:
    code = main(["setup", *args, "--config-dir", str(root), "--home", str(home)])
    out, err = capsys.readouterr()
    return code, out, err


def every(client: str) -> list[str]:
    """The flags that write every entry of ``client`` (the provider only when asked)."""
    return ["--provider"] if any(f.what == "provider" for f in CLIENTS[client].files) else []


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
    code, out, _ = setup(capsys, home, root, client, *every(client))
    assert code == 0 and "undo with: offload setup" in out
    for what in {f.what for f in CLIENTS[client].files}:
        assert entry(client, root, what) is not None
    written = files_of(root)
    assert written and not any(".offload-backup-" in name for name in written)  # nothing to back up
    assert setup(capsys, home, root, client, *every(client))[0:2] == (
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
    assert setup(capsys, home, root, client, *every(client))[0] == 0
    after = files_of(root)
    backups = {k: v for k, v in after.items() if ".offload-backup-" in k}
    assert sorted(v for v in backups.values()) == sorted(before.values())  # byte copies
    assert without_offload(client, root) == strip(client, docs_before)  # nothing else changed
    for what in {f.what for f in CLIENTS[client].files}:
        assert entry(client, root, what) is not None
    assert setup(capsys, home, root, client, *every(client))[0] == 0
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
        assert setup(capsys, tmp_path / "home", root, client, *every(client))[0] == 0
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
    code, out, err = setup(capsys, tmp_path / "home", root, client, *every(client))
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
    for client in ("claude-code", "opencode", "aider", "llm", "codex"):
        root = tmp_path / client
        root.mkdir()
        args = ("--only", "provider", "--url", url, "--model", "qwen")
        assert setup(capsys, tmp_path / "home", root, client, *args)[0] == 0
    assert entry("claude-code", tmp_path / "claude-code", "provider") == url
    assert dig(entry("opencode", tmp_path / "opencode", "provider"), ["options", "baseURL"]) == (
        f"{url}/v1"
    )
    assert entry("aider", tmp_path / "aider", "provider") == f"{url}/v1"
    assert entry("codex", tmp_path / "codex", "provider") == {
        "name": "offload proxy",
        "base_url": f"{url}/v1",
        "wire_api": "responses",
    }
    assert entry("llm", tmp_path / "llm", "provider") == {
        "model_id": "offload",
        "model_name": "qwen",
        "api_base": f"{url}/v1",
    }


def test_a_client_without_that_entry_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = setup(capsys, tmp_path / "home", tmp_path, "aider", "--only", "mcp")
    assert code == 2 and "aider has no MCP client; `offload setup aider --provider`" in err
    code, _, err = setup(capsys, tmp_path / "home", tmp_path, "cursor", "--only", "provider")
    assert code == 2 and "Cursor has no provider entry" in err


def test_revert_refuses_when_offloads_own_entry_was_edited_after_setup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = existing("codex", tmp_path), tmp_path / "home"
    assert setup(capsys, home, root, "codex")[0] == 0
    config = root / ".codex" / "config.toml"
    config.write_text(config.read_text() + 'model = "edited"\n')  # lands in offload's table
    edited = files_of(root)
    code, _, err = setup(capsys, home, root, "codex", "--revert")
    assert code == 2 and "the offload entry (mcp_servers.offload) changed after setup" in err
    assert files_of(root) == edited


def test_status_names_the_store_the_upstream_and_which_clients_are_wired(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = tmp_path / "cfg", tmp_path / "home"
    root.mkdir()
    down = "http://127.0.0.1:9"  # the discard port: nothing listens
    assert setup(capsys, home, root, "cursor", "--mcp", "http", "--url", down)[0] == 0
    assert setup(capsys, home, root, "llm", "--provider", "--url", "http://127.0.0.1:9999")[0] == 0
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
    assert doc["warnings"] == [
        f"cursor: its MCP entry points at {down}/mcp, where nothing answers; start `offload "
        "serve`, or undo with `offload setup cursor --revert`",
        "llm: its model requests go to http://127.0.0.1:9999/v1, where nothing answers; start "
        "`offload serve`, or undo with `offload setup llm --revert`",
    ]


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


def client_edit(path: Path) -> tuple[str, Any]:
    """Change ``path`` as its client might: a key of the user's own added, and (JSON) the
    whole file rewritten in another layout. Returns the key and its value."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        doc = loads(text, str(path))
        doc["userEdit"] = {"added": "by the client"}
        path.write_text(json.dumps(doc, indent=4) + "\n", encoding="utf-8")
        return "userEdit", {"added": "by the client"}
    if path.suffix == ".toml":
        path.write_text('user_edit = "by the client"\n' + text, encoding="utf-8")
        return "user_edit", "by the client"
    if isinstance(yaml.safe_load(text), list):  # llm's list of models
        path.write_text(text + "- model_id: user-added\n  api_base: http://x/v1\n")
        return "", {"model_id": "user-added", "api_base": "http://x/v1"}
    path.write_text(text + "user_edit: by the client\n", encoding="utf-8")
    return "user_edit", "by the client"


@pytest.mark.parametrize("client", ALL)
def test_dry_run_setup_a_client_edit_then_revert_leaves_only_the_clients_edit(
    client: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = existing(client, tmp_path), tmp_path / "home"
    before = files_of(root)
    code, out, _ = setup(capsys, home, root, client, *every(client), "--dry-run")
    assert code == 0 and "(dry run: nothing written)" in out
    assert files_of(root) == before  # nothing written, not even a record
    assert setup(capsys, home, root, client, *every(client))[0] == 0
    wired_once = files_of(root)
    assert setup(capsys, home, root, client, *every(client))[1].endswith(
        "already wired, nothing to change\n"
    )
    assert files_of(root) == wired_once  # idempotent
    paths = sorted({f.path for f in CLIENTS[client].files})
    edits = {p: client_edit(root / p) for p in paths}
    for f in CLIENTS[client].files:  # offload's entries survived the client's edit
        assert entry(client, root, f.what) is not None
    edited = files_of(root)
    code, out, _ = setup(capsys, home, root, client, "--revert", "--dry-run")
    assert code == 0 and "would take offload's entries out of" in out
    assert files_of(root) == edited
    # reverted from another store: the record is found beside the configs, not in the store
    code, out, err = setup(capsys, tmp_path / "another-home", root, client, "--revert")
    assert code == 0, err
    for p in paths:
        doc, (key, value) = parsed(root / p), edits[p]
        assert (doc.pop(key) if key else doc.pop()) == value  # the client's edit stays
        assert doc == parsed(FIXTURES / client / "existing" / p)  # offload's additions gone
    assert "took offload's entries out" in out
    assert setup(capsys, home, root, client, "--revert")[0] == 2  # nothing left to revert


def test_mcp_is_the_default_and_the_provider_is_written_only_when_asked_and_says_what_it_means(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = tmp_path / "cfg", tmp_path / "home"
    root.mkdir()
    code, out, _ = setup(capsys, home, root, "claude-code")
    assert code == 0 and "provider:" not in out
    assert not (root / ".claude" / "settings.json").exists()  # no traffic rerouted silently
    code, out, _ = setup(capsys, home, root, "claude-code", "--provider", "--dry-run")
    assert code == 0 and '"ANTHROPIC_BASE_URL": "http://127.0.0.1:8900"' in out
    assert "Claude Code's model requests will go to offload's proxy at http://127.0.0.1:8900" in out
    assert not (root / ".claude" / "settings.json").exists()
    code, out, _ = setup(capsys, home, root, "claude-code", "--provider")
    assert code == 0 and "provider: Claude Code's model requests will go to" in out
    assert "which forwards them to the model server at" in out
    code, _, err = setup(capsys, home, root, "claude-code", "--provider", "--only", "mcp")
    assert code == 2 and "with --only pick one" in err


def test_claude_desktop_takes_stdio_only_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = setup(capsys, tmp_path / "home", tmp_path, "claude-desktop", "--mcp", "http")
    assert code == 2 and "stdio servers only" in err
    assert files_of(tmp_path) == {}


def test_a_client_that_replaced_its_own_file_keeps_its_settings_on_revert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Claude Code rewrites ~/.claude.json itself (counters, projects): revert takes out the
    # entry and leaves the rest as the client last wrote it
    root, home = existing("claude-code", tmp_path), tmp_path / "home"
    assert setup(capsys, home, root, "claude-code")[0] == 0
    config = root / ".claude.json"
    doc = json.loads(config.read_text())
    doc["numStartups"] = 42
    doc["projects"]["/home/user/src/other"] = {"allowedTools": []}
    config.write_text(json.dumps(doc, separators=(",", ":")))
    code, out, _ = setup(capsys, home, root, "claude-code", "--revert")
    assert code == 0 and "keeping later changes" in out
    after = json.loads(config.read_text())
    assert "offload" not in after["mcpServers"] and set(after["mcpServers"]) == {"github", "sqlite"}
    assert after["numStartups"] == 42 and "/home/user/src/other" in after["projects"]


def test_setup_records_live_with_the_configs_and_are_private(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, root = token_home(tmp_path), tmp_path / "cfg"
    root.mkdir()
    assert setup(capsys, home, root, "cursor", "--mcp", "http")[0] == 0
    record = root / ".local" / "state" / "offload" / "setup" / "cursor.json"
    assert record.stat().st_mode & 0o777 == 0o600  # it holds the entry, token included
    files = json.loads(record.read_text())["files"]
    assert list(files) == [str(root / ".cursor" / "mcp.json")]
    assert not (home / "offload.db").exists()  # setup no longer needs the store
    assert setup(capsys, tmp_path / "elsewhere", root, "cursor", "--revert")[0] == 0
    assert not record.exists() and not (root / ".cursor" / "mcp.json").exists()


class _Answers(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_status_warns_when_the_proxy_answers_but_its_upstream_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = tmp_path / "cfg", tmp_path / "home"
    root.mkdir()
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{proxy.server_address[1]}"
        assert setup(capsys, home, root, "aider", "--provider", "--url", url)[0] == 0
        args = ["status", "--json", "--config-dir", str(root), "--home", str(home)]
        assert main([*args, "--upstream", "http://127.0.0.1:9", "--url", url]) == 0
        doc = json.loads(capsys.readouterr().out)
    finally:
        proxy.shutdown()
        proxy.server_close()
        thread.join()
    assert doc["serve"]["ok"] is True
    assert doc["warnings"] == [
        "aider: its model requests reach the proxy, but the model server "
        "http://127.0.0.1:9 does not answer"
    ]


def test_a_setup_an_older_offload_recorded_in_the_store_is_still_reverted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = existing("cursor", tmp_path), tmp_path / "home"
    config = root / ".cursor" / "mcp.json"
    before = config.read_bytes()
    saved = config.with_name("mcp.json.offload-backup-20261201T000000Z")
    saved.write_bytes(before)
    config.write_text('{"mcpServers": {"offload": {"command": "offload"}}}\n')
    run = {"path": str(config), "backup": str(saved), "written": digest(config.read_bytes())}
    with Store(home / "offload.db", counter=EstimateCounter()) as store:  # an older setup's
        store.put_state(STATE, "cursor", [{"files": [run]}])
    code, out, _ = setup(capsys, home, root, "cursor", "--revert")
    assert code == 0 and f"restored {config}" in out
    assert config.read_bytes() == before
    code, _, err = setup(capsys, home, root, "cursor", "--revert")
    assert code == 2 and "nothing to revert" in err


def _older_setup_recorded(tmp_path: Path) -> tuple[Path, Path, Path, bytes]:
    """A cursor config an older offload's setup wrote, its run recorded in the store as that
    version recorded it; (config root, home, the config, its bytes before that setup)."""
    root, home = existing("cursor", tmp_path), tmp_path / "home"
    config = root / ".cursor" / "mcp.json"
    before = config.read_bytes()
    saved = config.with_name("mcp.json.offload-backup-20261201T000000Z")
    saved.write_bytes(before)
    config.write_text('{"mcpServers": {"offload": {"command": "/old/venv/bin/offload"}}}\n')
    run = {"path": str(config), "backup": str(saved), "written": digest(config.read_bytes())}
    with Store(home / "offload.db", counter=EstimateCounter()) as store:
        store.put_state(STATE, "cursor", [{"files": [run]}])
    return root, home, config, before


def test_a_dry_run_revert_of_an_older_offloads_setup_says_what_it_would_restore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home, config, _ = _older_setup_recorded(tmp_path)
    wired = config.read_bytes()
    code, out, _ = setup(capsys, home, root, "cursor", "--revert", "--dry-run")
    assert code == 0 and f"would restore {config} from mcp.json.offload-backup-" in out
    assert "dry run" in out and config.read_bytes() == wired
    code, out, _ = setup(capsys, home, root, "cursor", "--revert")  # still there to revert
    assert code == 0 and f"restored {config}" in out


def test_reverting_a_setup_made_over_an_older_offloads_says_the_older_one_remains(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home, config, before = _older_setup_recorded(tmp_path)
    assert setup(capsys, home, root, "cursor")[0] == 0  # the upgrade's setup, over the old one
    code, out, _ = setup(capsys, home, root, "cursor", "--revert")
    assert code == 0 and "older offload's setup is still recorded" in out
    assert "/old/venv/bin/offload" in config.read_text()  # back to what the older one wrote
    code, out, _ = setup(capsys, home, root, "cursor", "--revert")
    assert code == 0 and config.read_bytes() == before
    assert "still recorded" not in out


def test_status_does_not_probe_a_base_url_the_user_set_for_themselves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = tmp_path / "cfg", tmp_path / "home"
    (root / ".claude").mkdir(parents=True)
    own = {"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9/corporate-gateway"}}
    (root / ".claude" / "settings.json").write_text(json.dumps(own))
    args = ["status", "--json", "--config-dir", str(root), "--home", str(home)]
    assert main([*args, "--upstream", "http://127.0.0.1:9", "--url", "http://127.0.0.1:9"]) == 0
    doc = json.loads(capsys.readouterr().out)
    state = {(r["client"], r["what"]): r["wired"] for r in doc["clients"]}
    assert state[("claude-code", "provider")] == "other" and doc["warnings"] == []


def test_status_text_lists_wired_entries_one_line_each_and_the_rest_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = tmp_path / "cfg", tmp_path / "home"
    root.mkdir()
    down = "http://127.0.0.1:9"
    assert setup(capsys, home, root, "cursor", "--mcp", "http", "--url", down)[0] == 0
    args = ["status", "--config-dir", str(root), "--home", str(home), "--upstream", down]
    assert main([*args, "--url", down]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"client    cursor         mcp       yes        {root}/.cursor/mcp.json" in lines
    (idle,) = [line for line in lines if line.startswith("not wired ")]
    assert "claude-code, claude-desktop" in idle and "cursor" not in idle
    assert lines[-1].startswith(f"warning   cursor: its MCP entry points at {down}/mcp")


def test_without_config_dir_the_record_goes_to_the_xdg_state_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "me"))  # Path.home(): never the real one
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "me").mkdir()
    assert main(["setup", "kiro", "--home", str(tmp_path / "store")]) == 0
    assert (tmp_path / "me" / ".kiro" / "settings" / "mcp.json").is_file()
    assert (tmp_path / "state" / "offload" / "setup" / "kiro.json").is_file()
    assert main(["setup", "kiro", "--revert", "--home", str(tmp_path / "other")]) == 0
    assert not (tmp_path / "me" / ".kiro" / "settings" / "mcp.json").exists()
    capsys.readouterr()


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


def test_a_dry_run_prints_the_clients_note_as_the_run_itself_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "cfg"
    root.mkdir()
    note = (
        "note: pick the proxy per run: codex -c model_provider=offload -c web_search=disabled"
        " -m MODEL (the proxy refuses Codex's web_search tool)"
    )
    code, out, _ = setup(capsys, tmp_path / "home", root, "codex", "--provider", "--dry-run")
    assert code == 0
    assert out.splitlines()[-2:] == [note, "(dry run: nothing written)"]
    code, out, _ = setup(capsys, tmp_path / "home", root, "codex", "--provider")
    assert code == 0 and out.splitlines()[-1] == note


def test_a_revert_dry_run_shows_the_diff_it_would_apply_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = tmp_path / "cfg", tmp_path / "home"
    root.mkdir()
    assert setup(capsys, home, root, "cursor")[0] == 0
    config = root / ".cursor" / "mcp.json"
    doc = json.loads(config.read_text())
    doc["mcpServers"]["git"] = {"command": "uvx", "args": ["mcp-server-git"]}  # the client's
    config.write_text(json.dumps(doc, indent=2) + "\n")
    before = files_of(root)
    code, out, _ = setup(capsys, home, root, "cursor", "--revert", "--dry-run")
    assert code == 0 and files_of(root) == before
    removed = [line for line in out.splitlines() if line.startswith("-") and "---" not in line]
    assert removed and all("git" not in line for line in removed)
    assert '-    "offload": {' in out
    assert out.splitlines()[-2:] == [
        f"would take offload's entries out of {config}",
        "(dry run: nothing written)",
    ]


def test_revert_removes_the_directory_setup_created_and_keeps_one_the_user_had(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fresh, home = tmp_path / "fresh", tmp_path / "home"
    fresh.mkdir()
    assert setup(capsys, home, fresh, "gemini")[0] == 0
    assert (fresh / ".gemini").is_dir()
    code, out, _ = setup(capsys, home, fresh, "gemini", "--revert")
    assert code == 0 and f"removed {fresh / '.gemini'}" in out
    assert not (fresh / ".gemini").exists()
    # the user's own directory stays, empty or not
    had = tmp_path / "had"
    (had / ".gemini").mkdir(parents=True)
    assert setup(capsys, home, had, "gemini")[0] == 0
    assert setup(capsys, home, had, "gemini", "--revert")[0] == 0
    assert (had / ".gemini").is_dir() and list((had / ".gemini").iterdir()) == []
    # a directory setup made but the user filled since stays with what it holds
    assert setup(capsys, home, fresh, "gemini")[0] == 0
    (fresh / ".gemini" / "notes.md").write_text("mine\n")
    assert setup(capsys, home, fresh, "gemini", "--revert")[0] == 0
    assert files_of(fresh) == {".gemini/notes.md": b"mine\n"}


def test_a_record_edited_to_list_other_directories_makes_revert_remove_none_of_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the per-file list was removed as it stood: an empty directory of the user's, listed
    # there, went with the revert, "setup had created it"
    root, home = tmp_path / "cfg", tmp_path / "home"
    mine, ours = root / "mine", root / ".gemini" / "x"
    mine.mkdir(parents=True)
    assert setup(capsys, home, root, "gemini")[0] == 0
    ours.mkdir()  # made by the user inside one setup made: not on the file's way
    record = root / ".local" / "state" / "offload" / "setup" / "gemini.json"
    data = json.loads(record.read_text())
    (rec,) = data["files"].values()
    rec["dirs"] += [str(mine), str(root), str(ours), "/", "m"]
    record.write_text(json.dumps(data))
    registry = record.with_name("made-dirs.json")
    made = json.loads(registry.read_text())
    made["dirs"] += [str(mine), str(root), str(tmp_path)]
    registry.write_text(json.dumps(made))
    code, out, _ = setup(capsys, home, root, "gemini", "--revert")
    assert code == 0
    assert mine.is_dir() and ours.is_dir() and root.is_dir()
    assert str(mine) not in out and f"removed {root} " not in out


def test_a_record_naming_a_file_that_is_not_the_clients_is_refused_and_nothing_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a record copied or edited to name another file: revert removed it when its digest
    # matched ("setup had created it")
    root, home = tmp_path / "cfg", tmp_path / "home"
    root.mkdir()
    assert setup(capsys, home, root, "gemini")[0] == 0
    victim = root / ".bashrc"
    victim.write_text("export KEEP=1\n")
    record = root / ".local" / "state" / "offload" / "setup" / "gemini.json"
    data = json.loads(record.read_text())
    (rec,) = data["files"].values()
    data["files"][str(victim)] = {**rec, "written": digest(victim.read_bytes())}
    record.write_text(json.dumps(data))
    before = files_of(root)
    code, _, err = setup(capsys, home, root, "gemini", "--revert")
    assert code == 2 and err.count("\n") == 1
    assert f"names {victim}, which is not one of" in err and "nothing changed" in err
    assert files_of(root) == before


def test_a_record_naming_another_file_as_the_backup_never_copies_it_into_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = tmp_path / "cfg", tmp_path / "home"
    config = root / ".gemini" / "settings.json"
    config.parent.mkdir(parents=True)
    config.write_text('{"theme": "dark"}\n')
    assert setup(capsys, home, root, "gemini")[0] == 0
    secret = tmp_path / "secret.json"
    secret.write_text('{"token": "s3cret"}\n')
    record = root / ".local" / "state" / "offload" / "setup" / "gemini.json"
    data = json.loads(record.read_text())
    data["files"][str(config)]["backup"] = str(secret)
    record.write_text(json.dumps(data))
    assert setup(capsys, home, root, "gemini", "--revert")[0] == 0
    assert "s3cret" not in config.read_text()
    assert json.loads(config.read_text()) == {"theme": "dark"}


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_config_linked_to_a_device_or_a_fifo_is_refused_and_left_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a config linked to /dev/null (a client switched off) read as empty, and the rename
    # of the new config over the link's target replaced the device node with a file
    root, home = tmp_path / "cfg", tmp_path / "home"
    (root / ".codex").mkdir(parents=True)
    config = root / ".codex" / "config.toml"
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    config.symlink_to(null)
    code, _, err = setup(capsys, home, root, "codex")
    assert code == 2 and err.count("\n") == 1 and "not a config file; nothing changed" in err
    assert stat.S_ISCHR(null.lstat().st_mode) and config.is_symlink()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # reading one with no writer never returned
    config.unlink()
    config.symlink_to(fifo)
    code, _, err = setup(capsys, home, root, "codex")
    assert code == 2 and "not a config file; nothing changed" in err
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


@pytest.mark.parametrize(
    ("client", "name", "text"),
    [
        ("claude-code", ".claude.json", "[" * 100_000),
        ("codex", ".codex/config.toml", "a = " + "[" * 100_000),
        ("zed", ".config/zed/settings.json", "// x\n{" + '"a":{' * 5000 + "}" * 5001),
    ],
)
def test_a_config_nested_past_the_stack_is_refused_in_one_line(
    client: str, name: str, text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "cfg"
    (root / name).parent.mkdir(parents=True)
    (root / name).write_text(text)
    code, out, err = setup(capsys, tmp_path / "home", root, client)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "nested too deeply; nothing changed" in err.replace(")", "")
    assert (root / name).read_text() == text


def test_hermes_model_block_comes_back_in_place_with_its_comments_after_a_later_edit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = tmp_path / "cfg", tmp_path / "home"
    config = root / ".hermes" / "config.yaml"
    config.parent.mkdir(parents=True)
    original = (
        "# hermes\n"
        "model:\n"
        "  provider: openrouter   # my paid account\n"
        "  # fallback: gpt\n"
        "  default: claude\n"
        "  api_key: ${OR_KEY}\n"
        "\n"
        "display:\n"
        "  skin: default\n"
    )
    config.write_text(original, encoding="utf-8")
    assert setup(capsys, home, root, "hermes", "--provider")[0] == 0
    wired = config.read_text(encoding="utf-8")
    assert wired.startswith("# hermes\nmodel:\n  provider: custom\n")  # block style, in place
    assert "{" not in wired.split("display:")[0]
    config.write_text(wired + "x: 1\n", encoding="utf-8")  # the user edits elsewhere
    code, out, err = setup(capsys, home, root, "hermes", "--revert")
    assert code == 0, err
    assert "took offload's entries out" in out
    assert config.read_text(encoding="utf-8") == original + "x: 1\n"


def test_reverting_every_client_leaves_no_directory_setup_created_in_a_fresh_home(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = tmp_path / "cfg", tmp_path / "home"
    root.mkdir()
    for client in ALL:  # Cline's setup makes VS Code's globalStorage, Roo's shares it
        assert setup(capsys, home, root, client, *every(client))[0] == 0
    for client in ALL:
        code, _, err = setup(capsys, home, root, client, "--revert")
        assert code == 0, err
    assert list(root.iterdir()) == []  # the records' own ~/.local/state/offload/setup too


def test_revert_keeps_a_directory_two_clients_share_until_the_last_and_one_the_user_had(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, home = tmp_path / "cfg", tmp_path / "home"
    (root / ".config").mkdir(parents=True)  # the user's: it stays
    storage = root / ".config" / "Code" / "User" / "globalStorage"
    assert setup(capsys, home, root, "cline")[0] == 0
    assert setup(capsys, home, root, "roo")[0] == 0
    assert setup(capsys, home, root, "cline", "--revert")[0] == 0
    assert storage.is_dir()  # Roo's entry is still in it
    code, out, _ = setup(capsys, home, root, "roo", "--revert")
    assert code == 0 and f"removed {storage} (setup had created it; empty now)" in out
    assert [p.name for p in root.iterdir()] == [".config"]
    assert list((root / ".config").iterdir()) == []
