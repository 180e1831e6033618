"""Two machines, one memory: two ``offload serve`` processes with their own homes on one
store (several machines simulated on one).

What one stores the other finds and reads; a proxy session continued on the other sends
the upstream the very wire the first would have sent; gateway labels never collide. Each
test runs on a PostgreSQL store (machines of a team) and on one SQLite file (processes of
one host behind a load balancer).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp.client.streamable_http import streamable_http_client

from mcp import Client
from pgserver import PgServer
from realparts import git_repo, require, wait_until
from serving import ScriptedUpstream, ServeProcess, conversation

pytestmark = pytest.mark.slow

# small enough that the conversation below is paged out: the wire depends on the store
N_CTX = 2048


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    server = ScriptedUpstream(n_ctx=N_CTX).start()
    try:
        yield server
    finally:
        server.stop()


# a fresh store, named by the settings (environment) that put a serve on it
NewStore = Callable[[], dict[str, str]]


@pytest.fixture(params=["postgresql", "sqlite"])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> NewStore:
    """Makes fresh shared stores: a database of the session's PostgreSQL server, or a
    SQLite store directory outside every machine's home."""
    made: list[Path] = []

    def make() -> dict[str, str]:
        if request.param == "postgresql":
            server: PgServer = request.getfixturevalue("pg_server")
            return {"OFFLOAD_STORE__URL": server.create_database()}
        where = tmp_path / f"store{len(made)}"
        where.mkdir()
        made.append(where)
        return {"OFFLOAD_STORE__HOME": str(where)}

    return make


def machine(
    tmp: Path, store: dict[str, str], upstream: ScriptedUpstream, *args: str, **env_extra: str
) -> ServeProcess:
    """An ``offload serve`` with its own home (a machine) on the shared ``store``."""
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**store, "OFFLOAD_SEARCH__SEMANTIC": "false", **env_extra}
    return ServeProcess(tmp, "--upstream", upstream.url, *args, env=env).start()


def _text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


@pytest.mark.anyio
async def test_an_entry_stored_through_one_machine_is_found_and_read_through_the_other(
    new_store: NewStore, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    store = new_store()
    a = machine(tmp_path / "a", store, upstream)
    b = machine(tmp_path / "b", store, upstream)
    try:
        assert a.home != b.home
        async with Client(streamable_http_client(f"{a.url}/mcp")) as client:
            stored = await client.call_tool(
                "offload", {"content": "the wombat calibration log\nline two\n", "topic": "w"}
            )
            assert not stored.is_error
        ref = re.search(r"ctx:sha256:[0-9a-f]+", _text(stored))
        assert ref is not None
        async with Client(streamable_http_client(f"{b.url}/mcp")) as client:
            found = await client.call_tool("search", {"queries": ["wombat calibration"]})
            assert "wombat calibration log" in _text(found)
            read = await client.call_tool("read", {"ref": ref.group(0)})
            assert "line two" in _text(read)
        api = httpx.get(f"{b.url}/api/search", params={"q": "wombat"}, timeout=10).json()
        assert any(
            h["ref"] == ref.group(0) or ref.group(0).startswith(h["ref"]) for h in api["hits"]
        )
    finally:
        a.stop()
        b.stop()


def _converse(targets: list[ServeProcess], turns: int) -> None:
    """Send each request of one conversation to the next machine in ``targets`` (cycled)."""
    for i, messages in enumerate(conversation(turns)):
        serve = targets[i % len(targets)]
        resp = httpx.post(
            f"{serve.url}/v1/chat/completions",
            json={"model": "scripted-model", "messages": messages},
            timeout=60,
        )
        assert resp.status_code == 200, resp.text


def _wire(chats: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(c, sort_keys=True, ensure_ascii=False) for c in chats]


def test_a_proxy_session_continued_on_the_other_machine_sends_the_same_wire(
    new_store: NewStore, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    turns = 8
    alone = machine(tmp_path / "alone", new_store(), upstream)
    try:
        _converse([alone], turns)
    finally:
        alone.stop()
    reference = _wire(upstream.chats)
    upstream.chats.clear()
    shared = new_store()
    a = machine(tmp_path / "a", shared, upstream)
    b = machine(tmp_path / "b", shared, upstream)
    try:
        _converse([a, b], turns)  # every other turn on the other machine
    finally:
        a.stop()
        b.stop()
    assert len(reference) == turns
    assert any("ctx:sha256:" in w for w in reference), "the conversation was never paged"
    assert _wire(upstream.chats) == reference


@pytest.mark.anyio
async def test_gateway_labels_from_two_machines_never_collide(
    new_store: NewStore, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    require(
        shutil.which("mcp-server-git") is not None,
        "mcp-server-git missing (pip install mcp-server-git)",
    )
    repo = git_repo(tmp_path / "repo", commits=40)
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'[servers.git]\ncommand = "mcp-server-git"\nargs = ["--repository", "{repo}"]\n'
    )
    args = ("--gateway-config", str(config))
    small = {"OFFLOAD_GATEWAY__RESPONSE_THRESHOLD": "1024"}  # git_log's answer is indexed
    store = new_store()
    machines = [machine(tmp_path / n, store, upstream, *args, **small) for n in ("a", "b")]
    labels: list[str] = []
    try:
        for serve in machines:
            wait_until(
                lambda s=serve: (
                    s.stats()["surfaces"]["gateway"]["upstreams"]["git"]["state"]  # type: ignore[misc]
                    == "ready"
                ),
                60,
                interval=0.1,
                what="the git upstream to connect",
            )
        for _round in range(3):
            for serve in machines:
                url = serve.stats()["surfaces"]["gateway"]["url"]
                async with Client(streamable_http_client(url)) as client:
                    log = await client.call_tool(
                        "git__git_log", {"repo_path": str(repo), "max_count": 40}
                    )
                found = re.findall(r"git__git_log:\d+|git_log:\d+", _text(log))
                assert found, _text(log)[:300]
                labels.append(found[0])
    finally:
        for serve in machines:
            serve.stop()
    assert len(labels) == 6 and len(set(labels)) == 6, labels
