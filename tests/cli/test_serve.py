"""``offload serve`` as a real process on a loopback port: every surface on one port.

A scripted upstream (a tiny Starlette app on another loopback port) stands in for
llama-server; the MCP tools and the gateway are driven through the official SDK's
Streamable HTTP client; the gateway test uses ``mcp-server-git`` on a temporary repository.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import mcp_types as types
import pytest
from mcp.client.streamable_http import streamable_http_client

import exposition
import loopback
from mcp import Client
from offload.cli.serve_cmds import with_gateway_table
from offload.config import load_settings
from offload.errors import ConfigError
from offload.serve.host import build
from offload.serve.lifespan import asgi_lifespan
from offload.store.store import Store
from realparts import MCP_INIT, free_port, git_repo, require, wait_until
from serving import ANSWER, SCRIPTED_N_CTX, ScriptedUpstream, ServeProcess, metric

ACCEPT = {"Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def served(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    serve = ServeProcess(tmp_path_factory.mktemp("serve"), "--upstream", upstream.url)
    serve.start()
    try:
        yield serve
    finally:
        serve.stop()


# -- one port, every surface ---------------------------------------------------------------


def test_stats_name_every_mounted_surface_and_the_missing_gateway(served: ServeProcess) -> None:
    stats = served.stats()
    surfaces = stats["surfaces"]
    assert surfaces["proxy"] == {
        "mounted": True,
        "url": f"{served.url}/v1",
        "upstream": surfaces["proxy"]["upstream"],
    }
    assert surfaces["mcp"]["mounted"] and surfaces["mcp"]["url"] == f"{served.url}/mcp"
    assert surfaces["dashboard"]["mounted"] and surfaces["metrics"]["mounted"]
    assert surfaces["gateway"]["mounted"] is False
    assert "--gateway-config" in surfaces["gateway"]["why"]
    assert stats["proxy"]["upstream"]["n_ctx"] == SCRIPTED_N_CTX  # read from /props
    assert stats["store"]["path"] == str(served.home / "offload.db")
    missing = loopback.get(f"{served.url}/gateway/mcp", timeout=10)
    assert missing.status_code == 404
    assert "not mounted" in missing.json()["error"]


@pytest.mark.anyio
async def test_mcp_tools_offload_and_search_through_the_sdk_client_at_mcp(
    served: ServeProcess,
) -> None:
    async with Client(streamable_http_client(f"{served.url}/mcp")) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"offload", "search", "read"} <= names
        stored = await client.call_tool(
            "offload",
            {"content": "the quokka calibration log\nline two\n", "topic": "quokka notes"},
        )
        assert not stored.is_error
        found = await client.call_tool("search", {"queries": ["quokka"]})
        assert not found.is_error
        block = found.content[0]
        assert isinstance(block, types.TextContent)
        assert "quokka calibration log" in block.text
    stats = served.stats()
    assert stats["store"]["entries"] >= 1
    assert stats["surfaces"]["mcp"]["tool_calls"] >= 2
    text = served.metrics()
    assert metric(text, "offload_store_entries") >= 1
    assert metric(text, "offload_store_blocks") >= 1
    assert metric(text, "offload_store_raw_bytes") > 0
    assert metric(text, 'offload_mcp_tool_calls_total{tool="search"}') >= 1


def test_the_proxy_serves_models_and_chat_through_the_scripted_upstream(
    served: ServeProcess, upstream: ScriptedUpstream
) -> None:
    before = metric(served.metrics(), "offload_proxy_requests_total")
    models = loopback.get(f"{served.url}/v1/models", timeout=10)
    assert models.status_code == 200
    model = models.json()["data"][0]
    assert model["id"] == "scripted-model"
    assert model["context_length"] == SCRIPTED_N_CTX
    props = loopback.get(f"{served.url}/props", timeout=10)  # a pass-through path
    assert props.json()["default_generation_settings"]["n_ctx"] == SCRIPTED_N_CTX

    chat = loopback.post(
        f"{served.url}/v1/chat/completions",
        json={"model": "scripted-model", "messages": [{"role": "user", "content": "hi there"}]},
        timeout=30,
    )
    assert chat.status_code == 200, chat.text
    assert chat.json()["choices"][0]["message"]["content"] == ANSWER
    assert upstream.chats[-1]["messages"][-1]["content"] == "hi there"

    text = served.metrics()
    assert metric(text, "offload_proxy_requests_total") == before + 1
    assert metric(text, "offload_proxy_client_tokens_total") > 0
    assert metric(text, "offload_proxy_wire_tokens_total") > 0
    assert metric(text, 'offload_surface_mounted{surface="gateway"}') == 0
    assert served.stats()["proxy"]["live"]["counters"]["requests"] == before + 1


def test_metrics_follow_prometheus_conventions_with_units_in_the_names(
    served: ServeProcess,
) -> None:
    chat = loopback.post(
        f"{served.url}/v1/chat/completions",
        json={"model": "scripted-model", "messages": [{"role": "user", "content": "count me"}]},
        timeout=30,
    )
    assert chat.status_code == 200, chat.text
    families = exposition.read(served.metrics())  # HELP/TYPE, _total, no nested series
    stats = served.stats()
    total = stats["proxy"]["cumulative"]["counters"]["requests"]
    assert sum(v for _, v in families["offload_proxy_requests_total"].samples) == total
    assert exposition.value(families, "offload_proxy_context_size_tokens") == SCRIPTED_N_CTX
    started = exposition.value(families, "offload_proxy_start_time_seconds")
    assert started == pytest.approx(stats["proxy"]["started_at"], abs=1)
    for name in ("raw", "stored", "disk"):
        assert exposition.value(families, f"offload_store_{name}_bytes") >= 0
    for name, fam in families.items():
        if "token" in name and fam.kind == "counter":
            assert name.endswith("_tokens_total"), name


def test_the_dashboard_is_one_self_contained_page_naming_the_urls(served: ServeProcess) -> None:
    resp = loopback.get(f"{served.url}/", timeout=10)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/html")
    page = resp.text
    assert f"OPENAI_BASE_URL={served.url}/v1" in page
    assert f"claude mcp add --transport http offload {served.url}/mcp" in page
    assert f"{served.url}/metrics" in page
    assert "MCP gateway" in page and "not mounted" in page
    assert "fetch('/api/stats'" in page  # the script refreshes from the stats endpoint
    # no external assets: no linked files, no script sources, no remote URLs
    assert not re.search(r"<link|<script[^>]*\ssrc=|<img", page)
    assert not re.search(r"https?://(?!127\.0\.0\.1)", page)


def test_a_foreign_origin_or_host_is_refused_on_every_surface(served: ServeProcess) -> None:
    evil = {"Origin": "http://evil.example"}
    for path in ("/", "/api/stats", "/metrics", "/v1/models"):
        assert loopback.get(served.url + path, headers=evil, timeout=10).status_code == 403, path
    mcp = f"{served.url}/mcp"
    assert (
        loopback.post(mcp, json=MCP_INIT, headers={**ACCEPT, **evil}, timeout=10).status_code == 403
    )
    assert (
        loopback.post(mcp, json=MCP_INIT, headers={**ACCEPT, "Host": "evil.example"}, timeout=10)
    ).status_code == 421
    assert (
        loopback.get(f"{served.url}/api/stats", headers={"Host": "evil.example"}, timeout=10)
    ).status_code == 403
    own = {"Origin": served.url}
    assert loopback.get(f"{served.url}/api/stats", headers=own, timeout=10).status_code == 200


@pytest.mark.slow
def test_serve_starts_with_the_upstream_down_answers_502_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    # a long flush interval: only the shutdown flush can persist the proxy's counters
    serve = ServeProcess(
        tmp_path, "--upstream", dead, env={"OFFLOAD_PROXY__METRICS_FLUSH_S": "3600"}
    ).start()
    try:
        assert serve.stats()["proxy"]["upstream"]["n_ctx"] is None
        models = loopback.get(f"{serve.url}/v1/models", timeout=10)
        assert models.status_code == 502
        assert models.json()["error"]["type"] == "upstream_unavailable"
        chat = loopback.post(
            f"{serve.url}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "anyone?"}]},
            timeout=30,
        )
        assert chat.status_code == 502
        code, took = serve.terminate(timeout=15)
    finally:
        serve.stop()
    serve.assert_shut_down_cleanly(code, took)
    settings = load_settings(env={"OFFLOAD_HOME": str(serve.home)})
    store = Store.open(settings)
    try:
        totals = store.tallies("proxy.metrics")["totals"]
    finally:
        store.close()
    assert totals["requests"] == 1
    assert totals["errors"] == 1


# -- the gateway ---------------------------------------------------------------------------


def children(pid: int) -> set[int]:
    """The direct children of ``pid`` (Linux /proc)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text()
        found.update(int(c) for c in text.split())
    return found


@pytest.mark.slow
@pytest.mark.anyio
async def test_the_gateway_at_gateway_mcp_lists_the_tools_of_a_stdio_upstream(
    tmp_path: Path, upstream: ScriptedUpstream
) -> None:
    require(
        shutil.which("mcp-server-git") is not None,
        "mcp-server-git missing (pip install mcp-server-git)",
    )
    repo = git_repo(tmp_path / "repo")
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'[servers.git]\ncommand = "mcp-server-git"\nargs = ["--repository", "{repo}"]\n'
    )
    serve = ServeProcess(
        tmp_path, "--upstream", upstream.url, "--gateway-config", str(config)
    ).start()
    try:
        wait_until(
            lambda: serve.stats()["surfaces"]["gateway"]["upstreams"]["git"]["state"] == "ready",
            30,
            interval=0.1,
            what="the git upstream to connect",
        )
        gateway = serve.stats()["surfaces"]["gateway"]
        assert gateway["mounted"] and gateway["url"] == f"{serve.url}/gateway/mcp"
        async with Client(streamable_http_client(gateway["url"])) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"git__git_status", "git__git_log"} <= names
            status = await client.call_tool("git__git_status", {"repo_path": str(repo)})
            assert not status.is_error
        page = loopback.get(f"{serve.url}/", timeout=10).text
        assert f"claude mcp add --transport http offload-gateway {serve.url}/gateway/mcp" in page
        text = serve.metrics()
        assert metric(text, 'offload_surface_mounted{surface="gateway"}') == 1
        assert metric(text, 'offload_gateway_upstream_ready{server="git"}') == 1

        assert serve.proc is not None
        upstream_pids = children(serve.proc.pid)
        assert upstream_pids, "mcp-server-git should run as a child of offload serve"
        code, took = serve.terminate(timeout=15)
    finally:
        serve.stop()
    serve.assert_shut_down_cleanly(code, took)
    # the upstream was closed by its owning task and reaped, not orphaned
    assert not any(Path(f"/proc/{pid}").exists() for pid in upstream_pids)


# -- in process: tokens and settings -------------------------------------------------------


@pytest.mark.anyio
async def test_configured_bearer_tokens_guard_the_figures_and_the_mcp_endpoint(
    tmp_path: Path,
) -> None:
    settings = load_settings(
        env={"OFFLOAD_HOME": str(tmp_path / "home")},
        flags={
            "proxy.bearer_token": "proxy-secret",
            "mcp.bearer_token": "mcp-secret",
            "proxy.upstream": f"http://127.0.0.1:{free_port()}",
            "mcp.scope": "token-test",
        },
    )
    served = build(settings, Store.open(settings), cwd=tmp_path)
    # the host's lifespan runs every sub-app's (and closes the store at the end)
    async with asgi_lifespan(served.app, "serve"):
        transport = httpx.ASGITransport(app=served.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8900") as c:
            assert (await c.get("/api/stats")).status_code == 401
            assert (await c.get("/metrics")).status_code == 401
            proxy_auth = {"Authorization": "Bearer proxy-secret"}
            stats = await c.get("/api/stats", headers=proxy_auth)
            assert stats.status_code == 200
            assert stats.json()["proxy"]["live"]["counters"]["requests"] == 0
            metrics = await c.get("/metrics", headers=proxy_auth)
            assert metric(metrics.text, "offload_store_entries") == 0
            page = await c.get("/")
            assert page.status_code == 200
            assert "bearer_token is set" in page.text
            assert 'data-k="store.entries" data-f="int">\u2014<' in page.text  # no figures
            assert (await c.post("/mcp", json=MCP_INIT, headers=ACCEPT)).status_code == 401
            mcp_auth = {**ACCEPT, "Authorization": "Bearer mcp-secret"}
            assert (await c.post("/mcp", json=MCP_INIT, headers=mcp_auth)).status_code == 200


@pytest.mark.anyio
async def test_the_banner_stats_and_dashboard_never_show_a_credential(tmp_path: Path) -> None:
    settings = load_settings(
        env={"OFFLOAD_HOME": str(tmp_path / "home")},
        flags={
            "mcp.bearer_token": "mcp-secret-4d2",
            "proxy.upstream": f"http://agent:hunter2@127.0.0.1:{free_port()}/v1",
        },
    )
    served = build(settings, Store.open(settings), cwd=tmp_path)
    assert "hunter2" not in served.banner() and "agent:***@127.0.0.1" in served.banner()
    async with asgi_lifespan(served.app, "serve"):
        transport = httpx.ASGITransport(app=served.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8900") as c:
            stats, page = (await c.get("/api/stats")).text, (await c.get("/")).text
    assert stats.count("agent:***@127.0.0.1") == 1 and "agent:***@127.0.0.1" in page
    for shown in (stats, page):
        assert "hunter2" not in shown and "mcp-secret-4d2" not in shown


def test_the_gateway_files_own_gateway_table_applies_under_env_and_flags(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        "[gateway]\ncatalog_threshold = 1234\nresponse_threshold = 999\n\n"
        '[servers.git]\ncommand = "mcp-server-git"\n'
    )
    base = load_settings(
        env={"OFFLOAD_HOME": str(tmp_path), "OFFLOAD_GATEWAY__RESPONSE_THRESHOLD": "5000"},
        flags={"gateway.config": str(config)},
    )
    merged = with_gateway_table(base, config)
    assert merged.gateway.catalog_threshold == 1234
    assert merged.gateway.response_threshold == 5000  # the environment wins
    assert merged.gateway.config == str(config)


def test_a_missing_gateway_config_is_named_as_the_gateways_file(tmp_path: Path) -> None:
    base = load_settings(env={"OFFLOAD_HOME": str(tmp_path)})
    with pytest.raises(ConfigError) as err:
        with_gateway_table(base, tmp_path / "nope.toml")
    assert str(err.value) == (
        f"gateway config {str(tmp_path / 'nope.toml')!r} is not a file (--gateway-config)"
    )


def test_the_store_browser_keeps_to_the_served_scope_unless_asked_for_every_scope(
    served: ServeProcess,
) -> None:
    scope = served.stats()["surfaces"]["mcp"]["scope"]
    settings = load_settings(env={"OFFLOAD_HOME": str(served.home)})
    with Store.open(settings) as store:
        ref = store.put("the narwhal ledger of team a", scope="teamA").entry.full_ref
    found = loopback.get(f"{served.url}/api/search", params={"q": "narwhal"}).json()
    assert found["hits"] == [] and found["scope"] == scope and found["all_scopes"] is False
    assert found["other_scopes"] == {"hits": 1, "shown_by": "all_scopes=1"}
    opened = loopback.get(f"{served.url}/api/entry", params={"ref": ref})
    assert opened.status_code == 404 and "another scope" in opened.json()["error"]
    assert opened.json()["error"].endswith("; add all_scopes=1 to reach it")  # how, from here
    assert "narwhal ledger" not in opened.text
    every = {"q": "narwhal", "all_scopes": "1"}
    hits = loopback.get(f"{served.url}/api/search", params=every).json()["hits"]
    assert hits[0]["ref"] == ref[:23] and hits[0]["scope"] == "teamA"
    text = loopback.get(f"{served.url}/api/entry", params={"ref": ref, "all_scopes": "1"})
    assert text.json()["text"] == "the narwhal ledger of team a"
    page = loopback.get(f"{served.url}/", params={"q": "narwhal"}).text
    assert "no hits for \u201cnarwhal\u201d in scope" in page
    assert "1 more in other scopes" in page and 'name="all_scopes"' in page
