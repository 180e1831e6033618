"""End to end with real upstreams and real downstream clients (slow: npm peers, subprocesses).

Upstreams: ``mcp-server-git`` (PyPI) on a temporary repository, the npm filesystem and
everything servers, and ``catalog_server.py`` over GitHub's catalog. Downstream: the SDK
client over the ``offload gateway`` command (stdio and Streamable HTTP) and the MCP
Inspector CLI.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from gateway_helpers import CATALOG_SERVER, PEERS, read_indexed, text_of
from mcp.client.stdio import StdioServerParameters

from mcp import Client
from realparts import CATALOGS, free_port, git_repo, require, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

FILESYSTEM = PEERS / "mcp-server-filesystem"
EVERYTHING = PEERS / "mcp-server-everything"
INSPECTOR = PEERS / "mcp-inspector"


def write_config(tmp: Path, servers: dict[str, dict[str, object]], extra: str = "") -> Path:
    rows = [extra]
    for name, body in servers.items():
        rows.append(f"[servers.{name}]")
        for key, value in body.items():
            rows.append(f"{key} = {json.dumps(value)}")
    path = tmp / "gateway.toml"
    path.write_text("\n".join(rows) + "\n")
    return path


def gateway_params(config: Path, home: Path, *flags: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "offload.cli.main",
            "gateway",
            "--config",
            str(config),
            "--home",
            str(home),
            *flags,
        ],
        env={"PATH": os.environ["PATH"], "HOME": str(home)},
    )


@pytest.fixture
def peers_config(tmp_path: Path) -> Iterator[tuple[Path, Path, str]]:
    require(
        FILESYSTEM.exists() and EVERYTHING.exists(), "npm MCP peers missing (npm ci in tests/peers)"
    )
    require(
        shutil.which("mcp-server-git") is not None,
        "mcp-server-git missing (pip install mcp-server-git)",
    )
    repo = git_repo(tmp_path / "repo", 5)
    files = tmp_path / "files"
    files.mkdir()
    big = "".join(f"{i:06d} {'lorem ipsum dolor sit amet ' * 3}\n" for i in range(1, 3001))
    (files / "big.txt").write_text(big)
    config = write_config(
        tmp_path,
        {
            "git": {"command": "mcp-server-git", "args": ["--repository", str(repo)]},
            "fs": {"command": str(FILESYSTEM), "args": [str(files)]},
            "ev": {"command": str(EVERYTHING), "args": ["stdio"]},
        },
        extra="[gateway]\ncatalog_threshold = 100000",  # this test is about pass-through
    )
    yield config, files / "big.txt", str(repo)


async def test_real_upstreams_through_the_stdio_gateway(
    peers_config: tuple[Path, Path, str], tmp_path: Path
) -> None:
    config, big, repo = peers_config
    resource_changes: list[object] = []

    async def on_message(message: object) -> None:
        if isinstance(message, types.ResourceListChangedNotification):
            resource_changes.append(message)

    params = gateway_params(config, tmp_path / "home")
    async with Client(params, mode="legacy", message_handler=on_message) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {
            "git__git_log",
            "fs__read_text_file",
            "ev__echo",
            "IndexSearch",
            "IndexRead",
        } <= names
        log = await client.call_tool("git__git_log", {"repo_path": repo})
        assert "adjust the widget frobnicator" in text_of(log)

        # a large file comes back indexed, and paging IndexRead returns it byte-exactly
        read = await client.call_tool("fs__read_text_file", {"path": str(big)})
        placeholder = text_of(read)
        match = re.match(
            r'\[Response compressed — \d+ bytes, 3000 lines, indexed as "(fs__read_text_file:\d+)"\]',
            placeholder,
        )
        assert match, placeholder[:300]
        label = match.group(1)
        assert await read_indexed(client, label) + "\n" == big.read_text()
        found = text_of(
            await client.call_tool("IndexSearch", {"queries": ["002345"], "source": "fs__"})
        )
        assert "002345 lorem" in found

        # resources and prompts pass through; a resource added upstream is announced
        resources = (await client.list_resources()).resources
        assert resources
        first = await client.read_resource(str(resources[0].uri))
        assert first.contents
        prompts = (await client.list_prompts()).prompts
        simple = next(p for p in prompts if p.name.startswith("ev__"))
        got = await client.get_prompt(
            simple.name, {a.name: "x" for a in (simple.arguments or []) if a.required}
        )
        assert got.messages
        data = "data:text/plain;base64," + base64.b64encode(b"hello gateway" * 10).decode()
        await client.call_tool(
            "ev__gzip-file-as-resource",
            {"name": "hello.gz", "data": data, "outputType": "resourceLink"},
        )
        with anyio.fail_after(10):
            while not resource_changes:
                await anyio.sleep(0.02)


async def test_a_deferred_catalog_from_a_started_upstream_activates_and_calls(
    tmp_path: Path,
) -> None:
    config = write_config(
        tmp_path,
        {
            "github": {
                "command": sys.executable,
                "args": [
                    str(CATALOG_SERVER),
                    str(CATALOGS / "github-mcp-server.json"),
                    "--name",
                    "github",
                ],
            }
        },
    )
    changed = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with Client(
        gateway_params(config, tmp_path / "home"), mode="legacy", message_handler=on_message
    ) as client:
        before = [t.name for t in (await client.list_tools()).tools]
        assert before == ["IndexSearch", "IndexRead", "call_tool"]
        direct = await client.call_tool(
            "call_tool", {"name": "github__list_branches", "arguments": {"owner": "o", "repo": "r"}}
        )
        assert json.loads(text_of(direct))["tool"] == "list_branches"
        hits = text_of(
            await client.call_tool(
                "IndexSearch", {"queries": ["star the rust-lang/rust repository"], "limit": 3}
            )
        )
        assert "github__star_repository (deferred, now activated)" in hits
        with anyio.fail_after(10):
            await changed.wait()
        after = [t.name for t in (await client.list_tools()).tools]
        assert after[:3] == before and "github__star_repository" in after[3:]
        starred = await client.call_tool(
            "github__star_repository", {"owner": "rust-lang", "repo": "rust"}
        )
        assert json.loads(text_of(starred)) == {
            "arguments": {"owner": "rust-lang", "repo": "rust"},
            "tool": "star_repository",
        }


def test_the_inspector_cli_lists_the_gateway_tools_over_stdio_and_http(tmp_path: Path) -> None:
    require(INSPECTOR.exists(), "MCP Inspector missing (npm ci in tests/peers)")
    config = write_config(
        tmp_path,
        {
            "git": {
                "command": sys.executable,
                "args": [
                    str(CATALOG_SERVER),
                    str(CATALOGS / "mcp-server-git.json"),
                    "--name",
                    "git",
                ],
            }
        },
    )
    home = tmp_path / "home"
    # the Inspector owns --config, so the gateway finds its file through the environment
    env_flags = ["-e", f"OFFLOAD_GATEWAY__CONFIG={config}", "-e", f"OFFLOAD_HOME={home}"]
    cmd = [sys.executable, "-m", "offload.cli.main", "gateway"]
    out = subprocess.run(
        [str(INSPECTOR), "--cli", *env_flags, *cmd, "--method", "tools/list"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    names = [t["name"] for t in json.loads(out.stdout)["tools"]]
    assert "git__git_status" in names and "IndexSearch" in names

    port = free_port()
    server = subprocess.Popen(
        [*cmd, "--config", str(config), "--home", str(home), "--http", "--port", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        import socket

        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_until(listening, 60, interval=0.1, what="gateway HTTP port")
        url = f"http://127.0.0.1:{port}/mcp"
        call = subprocess.run(
            [
                str(INSPECTOR),
                "--cli",
                url,
                "--method",
                "tools/call",
                "--tool-name",
                "git__git_status",
                "--tool-arg",
                "repo_path=/r",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert call.returncode == 0, call.stderr[-2000:]
        assert "git_status" in call.stdout and "/r" in call.stdout
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
