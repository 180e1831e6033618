"""End to end over stdio: ``offload mcp`` as a real subprocess, driven by the SDK's stdio
client, sharing one store with the ``offload`` CLI while both run."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from e2e_support import cli, stdio_params
from mcp.client.client import Client
from mcp.types import TextContent
from mcp_support import McpEnv

from realparts import child_env, stop_process

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def _text(client: Client, tool: str, **args: object) -> str:
    res = await client.call_tool(tool, dict(args))
    text = "\n".join(c.text for c in res.content if isinstance(c, TextContent))
    assert not res.is_error, text
    return text


async def test_the_stdio_server_lists_tools_and_round_trips_an_entry(env: McpEnv) -> None:
    env.write("notes.md", "# Notes\n## One\nfirst section\n## Two\nsecond section\n")
    async with Client(stdio_params(env.project, env.home)) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert len(names) == 19 and {"peek", "checkout", "offload_path_sectioned"} <= names
        stored = await _text(c, "offload", content="stdio body\nline two\n", topic="via stdio")
        ref = re.search(r"ctx:sha256:[0-9a-f]{12}", stored).group(0)  # type: ignore[union-attr]
        assert "2 sections" not in await _text(c, "offload_path_sectioned", path="notes.md")
        out = await _text(c, "checkout", ref=ref)
        nonce = re.search(r"<offload:body:([0-9a-f]{24}) ", out).group(1)  # type: ignore[union-attr]
        assert "stdio body" in out
        assert "checked in" in await _text(c, "checkin", ref=ref, nonce=nonce)
        hits = await _text(c, "search", queries=["second section"])
        assert "Notes > Two" in hits
        body = await c.read_resource(f"offload://body/{ref}")
        assert "stdio body" in body.contents[0].text  # type: ignore[union-attr]


async def test_a_tools_subset_and_a_scope_flag_reach_the_subprocess(env: McpEnv) -> None:
    params = stdio_params(env.project, env.home, "--tools", "peek,offload", "--scope", "named")
    async with Client(params) as c:
        assert [t.name for t in (await c.list_tools()).tools] == ["peek", "offload"]
        await _text(c, "offload", content="scoped content")
        assert "scope named" in await _text(c, "peek")
    assert env.store.entries()[0].scope == "named"


async def test_entries_are_shared_between_the_mcp_server_and_the_cli_while_both_run(
    env: McpEnv,
) -> None:
    async with Client(stdio_params(env.project, env.home)) as c:
        await _text(c, "peek")  # the server has the store open from here on
        added = cli(
            env.project, env.home, "add", "quokka facts from the cli", "--topic", "cli note"
        )
        assert "stored ctx:sha256:" in added
        seen = await _text(c, "search", queries=["quokka"])
        assert "cli note" in seen and "quokka facts" in seen
        stored = await _text(c, "offload", content="wombat facts from mcp", topic="mcp note")
        ref = re.search(r"ctx:sha256:[0-9a-f]{12}", stored).group(0)  # type: ignore[union-attr]
        listing = cli(env.project, env.home, "ls")
        assert "mcp note" in listing and "cli note" in listing
        assert "wombat" in cli(env.project, env.home, "search", "wombat")
        assert cli(env.project, env.home, "cat", ref) == "wombat facts from mcp"
        # a checkout by the server is visible to the CLI as hot
        await _text(c, "checkout", ref=ref)
        assert re.search(r"mcp note \| text \| 0\.50 \| hot", cli(env.project, env.home, "ls"))


def test_requests_written_just_before_stdin_closes_are_all_answered(env: McpEnv) -> None:
    env.write("notes.md", "# Notes\nsome text to store\n")
    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "script", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        *(
            {
                "jsonrpc": "2.0",
                "id": n,
                "method": "tools/call",
                "params": {"name": "offload", "arguments": {"content": f"piped body {n}\n"}},
            }
            for n in range(2, 6)
        ),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "offload.cli.main", "mcp"],
        input="".join(json.dumps(line) + "\n" for line in lines),  # stdin closes after them
        capture_output=True,
        text=True,
        cwd=env.project,
        env=child_env(env.home),
        timeout=120,
        check=False,
    )
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert done.returncode == 0, done.stderr
    assert sorted(a["id"] for a in answers) == [1, 2, 3, 4, 5]
    assert all("result" in a and not a["result"].get("isError") for a in answers)


def test_a_request_the_client_cancelled_does_not_hold_the_exit_after_stdin_closes(
    env: McpEnv,
) -> None:
    # a cancelled request is answered by no one; counted as open, it held the server for
    # the whole drain (300 s) after the client closed stdin
    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "script", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "search", "arguments": {"queries": ["anything at all"]}},
        },
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}},
    ]
    done = subprocess.run(
        [sys.executable, "-m", "offload.cli.main", "mcp"],
        input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True,
        text=True,
        cwd=env.project,
        env=child_env(env.home),
        timeout=60,  # far under the drain a cancelled request once held it for
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert answers[0]["id"] == 1 and "result" in answers[0]


def _ping(n: int, pad: str = "") -> bytes:
    params = {"pad": pad} if pad else {}
    return json.dumps({"jsonrpc": "2.0", "id": n, "method": "ping", "params": params}).encode()


def test_a_line_past_the_limit_is_dropped_with_an_error_and_the_next_line_is_served(
    env: McpEnv,
) -> None:
    big = _ping(1, "a" * (3 * 1024 * 1024))  # a valid request, but 3 MiB on a 1 MiB limit
    done = subprocess.run(
        [sys.executable, "-m", "offload.cli.main", "mcp"],
        input=big + b"\n" + _ping(2) + b"\n",
        capture_output=True,
        cwd=env.project,
        env=child_env(env.home, {"OFFLOAD_HTTP__MAX_BODY_MB": "1"}),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert [a["id"] for a in answers] == [None, 2]  # the dropped line, then the next one
    assert answers[0]["error"]["code"] == -32600
    assert "http.max_body_mb" in answers[0]["error"]["message"]
    assert b"dropped" in done.stderr and b"3145" in done.stderr  # its size, on stderr


def _peak_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        line = next(x for x in status if x.startswith("VmHWM:"))
    return int(line.split()[1])


def test_an_endless_line_does_not_grow_the_servers_memory(env: McpEnv) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "offload.cli.main", "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=env.project,
        env=child_env(env.home, {"OFFLOAD_HTTP__MAX_BODY_MB": "1"}),
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(_ping(1) + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
        before = _peak_rss_kb(proc.pid)
        piece = b"a" * (1024 * 1024)
        for _ in range(256):  # one line of 256 MiB
            proc.stdin.write(piece)
        proc.stdin.write(b"\n" + _ping(2) + b"\n")
        proc.stdin.flush()
        last: dict[str, object] = {}
        for _ in range(2):  # the next ping's answer comes after the long line was read
            last = json.loads(proc.stdout.readline())
            if last["id"] == 2:
                break
        grown_mb = (_peak_rss_kb(proc.pid) - before) / 1024
        assert grown_mb < 32, grown_mb  # a 256 MiB line held whole costs more than that
        assert last["id"] == 2
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        stop_process(proc, 10)
