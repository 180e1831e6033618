"""Settings: ranges and orderings are checked once, where the settings are built."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from offload.config import Settings, check, load_settings
from offload.errors import ConfigError


def test_the_defaults_pass_their_own_checks() -> None:
    check(Settings())
    load_settings(env={})


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OFFLOAD_PROXY__PORT": "-3"}, "'proxy.port' from env:OFFLOAD_PROXY__PORT"),
        ({"OFFLOAD_MCP__PORT": "70000"}, "'mcp.port'"),
        ({"OFFLOAD_PROXY__HIGH_WATER": "1.5"}, "'proxy.high_water'"),
        ({"OFFLOAD_PROXY__STUB_RATIO": "0"}, "'proxy.stub_ratio'"),
        ({"OFFLOAD_STORE__BUSY_TIMEOUT_S": "nan"}, "'store.busy_timeout_s'"),
        ({"OFFLOAD_STORE__CHUNK_LINES": "0"}, "'store.chunk_lines'"),
        ({"OFFLOAD_SEARCH__MAX_LIMIT": "-1"}, "'search.max_limit'"),
        ({"OFFLOAD_GATEWAY__CALL_TIMEOUT_S": "-5"}, "'gateway.call_timeout_s'"),
    ],
)
def test_a_number_out_of_its_range_fails_naming_the_setting_and_its_source(
    env: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(env=env)
    assert named in str(err.value)
    assert "\n" not in str(err.value)


def test_the_issue_s_settings_fail_at_the_first_one_out_of_range() -> None:
    env = {
        "OFFLOAD_PROXY__TARGET": "0.9",
        "OFFLOAD_PROXY__HIGH_WATER": "1.5",
        "OFFLOAD_PROXY__PORT": "-3",
    }
    with pytest.raises(ConfigError, match="must be"):
        load_settings(env=env)


def test_the_budget_ratios_must_keep_their_order() -> None:
    with pytest.raises(ConfigError, match=r"'proxy.target' \(0.82.*below 'proxy.high_water'"):
        load_settings(env={"OFFLOAD_PROXY__TARGET": "0.82"})
    with pytest.raises(ConfigError, match=r"'proxy.high_water'.*below 'proxy.emergency'"):
        load_settings(env={"OFFLOAD_PROXY__HIGH_WATER": "0.9"})
    ok = load_settings(env={"OFFLOAD_PROXY__TARGET": "0.2", "OFFLOAD_PROXY__HIGH_WATER": "0.3"})
    assert (ok.proxy.target, ok.proxy.high_water) == (0.2, 0.3)


def test_the_default_limit_may_not_pass_the_maximum() -> None:
    with pytest.raises(ConfigError, match=r"'search.default_limit'.*at most 'search.max_limit'"):
        load_settings(flags={"search.default_limit": 30})
    assert load_settings(flags={"search.default_limit": 20}).search.default_limit == 20


def test_zero_is_allowed_where_it_means_something() -> None:
    s = load_settings(flags={"proxy.n_ctx": 0, "proxy.port": 0, "local_model.retries": 0})
    assert (s.proxy.n_ctx, s.proxy.port, s.local_model.retries) == (0, 0, 0)


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("proxy.recall_ratio", "5", "0 (off) to below 1"),
        ("proxy.recall_ratio", "-0.1", "0 (off) to below 1"),
        ("proxy.upstream", "notaurl", "http:// or https://"),
        ("proxy.upstream", "ftp://127.0.0.1:8080", "got scheme 'ftp'"),
        ("proxy.upstream", "http://", "must name a host"),
        ("proxy.upstream", "http://127.0.0.1:99999", "not a valid URL"),
        ("local_model.base_url", "localhost:8081", "http:// or https://"),
        ("http.max_body_mb", "0", "at least 1"),
        ("http.max_body_mb", "5000", "at most 4096"),
        ("http.body_timeout_s", "0", "above 0"),
        ("http.body_timeout_s", "7200", "at most 3600"),
        ("http.header_timeout_s", "-1", "above 0"),
        ("http.max_header_kb", "0", "at least 1"),
        ("http.max_header_kb", "2048", "at most 1024"),
        ("http.max_connections", "0", "at least 1"),
        ("proxy.max_event_mb", "0", "at least 1"),
        ("proxy.max_event_mb", "4096", "at most 1024"),
        ("gateway.max_upstream_tools", "0", "at least 1"),
        ("gateway.max_upstream_catalog_mb", "0", "at least 1"),
        ("gateway.max_upstream_message_mb", "0", "at least 1"),
        ("gateway.max_upstream_message_mb", "5000", "at most 4096"),
    ],
)
def test_a_ratio_url_or_body_limit_out_of_range_fails_at_build_naming_it_and_its_source(
    tmp_path: Path, key: str, value: str, says: str
) -> None:
    section, _, name = key.partition(".")
    config = tmp_path / "offload.toml"
    config.write_text(f'[{section}]\n{name} = "{value}"\n')
    with pytest.raises(ConfigError) as err:
        load_settings(config_file=config)
    message = str(err.value)
    assert f"'{key}'" in message and f"file:{config}" in message and says in message
    assert "\n" not in message
    env_name = f"OFFLOAD_{section.upper()}__{name.upper()}"
    with pytest.raises(ConfigError, match=f"env:{env_name}"):
        load_settings(env={env_name: value})


def test_a_url_setting_never_shows_more_than_its_scheme_when_refused() -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(env={"OFFLOAD_PROXY__UPSTREAM": "ftp://agent:hunter2@example.test/"})
    assert "hunter2" not in str(err.value)


def test_usable_urls_ratios_and_limits_are_accepted() -> None:
    s = load_settings(
        flags={
            "proxy.upstream": "https://api.example.test/v1",
            "proxy.recall_ratio": 0,
            "local_model.base_url": "",
            "http.max_body_mb": 64,
        }
    )
    assert s.proxy.recall_ratio == 0 and s.http.max_body_bytes == 64 * 1024 * 1024


def test_overrides_are_checked_too() -> None:
    with pytest.raises(ConfigError, match=r"'proxy.tail_messages'"):
        Settings().with_overrides({"proxy.tail_messages": -1})


def test_the_cli_refuses_a_bad_setting_at_start_with_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    env = {"OFFLOAD_HOME": str(tmp_path), "OFFLOAD_PROXY__HIGH_WATER": "1.5", "PATH": ""}
    done = subprocess.run(
        [sys.executable, "-m", "offload.cli.main", "config", "show"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "proxy.high_water" in lines[0], done.stderr
    assert not (tmp_path / "offload.db").exists()  # nothing was created


def test_recall_shares_take_zero_to_switch_off_and_refuse_more_than_one() -> None:
    off = load_settings(
        env={"OFFLOAD_PROXY__RECALL_RATIO": "0", "OFFLOAD_PROXY__RECALL_MIN_NEW": "0"}
    )
    assert off.proxy.recall_ratio == 0 and off.proxy.recall_min_new == 0
    with pytest.raises(ConfigError, match=r"'proxy.recall_min_new'.*from 0 to 1"):
        load_settings(env={"OFFLOAD_PROXY__RECALL_MIN_NEW": "1.5"})


def test_a_settings_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    # found by the CLI fuzz: `offload --config FILE` on an exported (zstd) archive
    binary = tmp_path / "archive"
    binary.write_bytes(b"(\xb5/\xfd\x00\x00")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_settings(config_file=binary, env={})


def test_a_home_or_config_name_no_filesystem_holds_is_no_traceback() -> None:
    # found by the CLI fuzz: Path.is_file raised (File name too long, embedded null byte)
    assert load_settings(env={}, flags={"store.home": "a" * 300}).store.home == "a" * 300
    for name in ("a" * 300, "x\x00y"):
        with pytest.raises(ConfigError, match="does not exist"):
            load_settings(config_file=Path(name), env={})


def test_a_home_under_the_users_home_is_expanded_and_another_users_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    home = load_settings(env={"OFFLOAD_HOME": "~/offload-store"}).home
    assert home == tmp_path / "offload-store"
    with pytest.raises(ConfigError, match=r"names a user's home \(~user\)"):
        load_settings(env={"OFFLOAD_HOME": "~nonexist"})


def test_a_misspelt_table_in_a_settings_file_is_refused_naming_it_and_the_real_ones(
    tmp_path: Path,
) -> None:
    settings = tmp_path / "offload.toml"
    settings.write_text("[proxi]\nhigh_water = 0.5\n")
    with pytest.raises(ConfigError) as err:
        load_settings(config_file=settings, env={})
    assert "unknown table [proxi]" in str(err.value)
    assert f"file:{settings}" in str(err.value)
    assert "[proxy]" in str(err.value)


def test_a_setting_outside_any_table_is_refused_rather_than_ignored(tmp_path: Path) -> None:
    settings = tmp_path / "offload.toml"
    settings.write_text("high_water = 0.5\n")
    with pytest.raises(ConfigError, match="unknown key 'high_water'"):
        load_settings(config_file=settings, env={})


def test_the_gateways_own_tables_may_share_the_settings_file(tmp_path: Path) -> None:
    settings = tmp_path / "offload.toml"
    settings.write_text(
        '[proxy]\nhigh_water = 0.5\n[servers.git]\ncommand = "x"\n[clients.a]\nservers = []\n'
    )
    assert load_settings(config_file=settings, env={}).proxy.high_water == 0.5


def test_a_config_flag_naming_a_directory_says_it_is_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory; name a TOML file in it"):
        load_settings(config_file=tmp_path, env={})
