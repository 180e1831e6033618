"""The MCP Inspector CLI (npm ``@modelcontextprotocol/inspector``) drives the server:
a second, independent client implementation over stdio and over Streamable HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from e2e_support import PEERS_BIN, HttpServer
from mcp_support import McpEnv

from realparts import child_env, require

pytestmark = pytest.mark.slow

INSPECTOR = PEERS_BIN / "mcp-inspector"


def inspector(env: McpEnv, *args: str) -> Any:
    """Run the Inspector CLI; its JSON output."""
    require(
        INSPECTOR.exists(), f"MCP Inspector CLI missing at {INSPECTOR} (npm install in tests/peers)"
    )
    environ = child_env(env.home, {"MCP_CATALOG_PATH": str(env.home.parent / "inspector.json")})
    done = subprocess.run(
        [str(INSPECTOR), "--cli", *args],
        cwd=env.project,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout[: done.stdout.rindex("}") + 1])


def stdio_target(env: McpEnv) -> list[str]:
    return [
        "-e",
        f"OFFLOAD_HOME={env.home}",
        "--cwd",
        str(env.project),
        sys.executable,
        "-m",
        "offload.cli.main",
        "mcp",
    ]


def test_the_inspector_lists_calls_and_reads_over_stdio(env: McpEnv) -> None:
    listed = inspector(env, *stdio_target(env), "--method", "tools/list")
    names = [t["name"] for t in listed["tools"]]
    assert len(names) == 19 and names[0] == "peek"
    assert all("title" not in json.dumps(t["inputSchema"]) for t in listed["tools"])
    stored = inspector(
        env,
        *stdio_target(env),
        "--method",
        "tools/call",
        "--tool-name",
        "offload",
        "--tool-arg",
        "content=inspected platypus content",
        "topic=from the inspector",
    )
    assert not stored.get("isError") and "stored: ctx:sha256:" in stored["content"][0]["text"]
    found = inspector(
        env,
        *stdio_target(env),
        "--method",
        "tools/call",
        "--tool-name",
        "search",
        "--tool-arg",
        'queries=["platypus"]',
    )
    assert "from the inspector" in found["content"][0]["text"]
    matrix = inspector(
        env, *stdio_target(env), "--method", "resources/read", "--uri", "offload://matrix"
    )
    assert "from the inspector" in matrix["contents"][0]["text"]
    assert (env.home / "offload.db").exists()  # the private store, not the user's


def test_the_inspector_lists_tools_over_streamable_http(env: McpEnv) -> None:
    with HttpServer(env.project, env.home) as server:
        listed = inspector(env, server.url, "--method", "tools/list")
    assert len(listed["tools"]) == 19
