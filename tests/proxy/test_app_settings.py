"""``offload proxy``'s settings: where paged-out memory is stored."""

from __future__ import annotations

from pathlib import Path

from offload.config import load_settings
from offload.proxy.app import proxy_settings


def test_the_proxy_stores_where_the_projects_mcp_server_searches(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    inner = tmp_path / "src"
    inner.mkdir()
    settings = load_settings(env={"OFFLOAD_HOME": str(tmp_path / "home")})
    assert proxy_settings(settings, inner).scope == str(tmp_path.resolve())


def test_an_mcp_scope_is_followed_and_a_proxy_scope_wins(tmp_path: Path) -> None:
    env = {"OFFLOAD_HOME": str(tmp_path), "OFFLOAD_MCP__SCOPE": "team"}
    assert proxy_settings(load_settings(env=env), tmp_path).scope == "team"
    env["OFFLOAD_PROXY__SCOPE"] = "mine"
    assert proxy_settings(load_settings(env=env), tmp_path).scope == "mine"
