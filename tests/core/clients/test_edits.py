"""The verified text edits ``offload setup`` makes to JSON, TOML and YAML configs."""

from __future__ import annotations

import json
import tomllib

import pytest
import yaml

from offload.core.clients.edits import (
    json_set,
    json_unset,
    toml_set_table,
    toml_unset_table,
    yaml_key_text,
    yaml_set_item,
    yaml_set_key,
    yaml_unset_item,
    yaml_unset_key,
)
from offload.errors import InvalidInput


def test_an_edit_that_changes_nothing_returns_the_text_byte_for_byte() -> None:
    text = '{"a":1,   "m": {"offload": {"url": "u"}}}'
    assert json_set(text, ("m", "offload"), {"url": "u"}, "f") == text
    toml = "# c\n[m.offload]\nurl = 'u'\n"
    assert toml_set_table(toml, ("m", "offload"), {"url": "u"}, "f") == toml
    assert yaml_set_key("k:   'v'  # c\n", "k", "v", "f") == "k:   'v'  # c\n"
    assert yaml_set_item("- {id: x}\n", ("id", "x"), {"id": "x"}, "f") == "- {id: x}\n"


def test_a_toml_table_and_its_sub_tables_are_replaced_and_the_rest_kept() -> None:
    old = (
        "# top\nmodel = 'm'\n\n[servers.offload]\ncommand = 'old'\n\n[servers.offload.env]\n"
        "A = 'b'\n\n# keep me\n[servers.git]\ncommand = 'git'\n"
    )
    new = toml_set_table(old, ("servers", "offload"), {"url": "http://x/mcp"}, "f")
    assert tomllib.loads(new) == {
        "model": "m",
        "servers": {"git": {"command": "git"}, "offload": {"url": "http://x/mcp"}},
    }
    assert "# top\n" in new and "# keep me\n" in new and "old" not in new


def test_a_toml_entry_in_an_inline_table_is_refused_rather_than_duplicated() -> None:
    old = 'servers = { offload = { command = "old" } }\n'
    with pytest.raises(InvalidInput, match=r"cannot set servers\.offload safely"):
        toml_set_table(old, ("servers", "offload"), {"url": "u"}, "f")


def test_a_yaml_key_with_continuation_lines_is_replaced_whole() -> None:
    old = "model: sonnet\nopenai-api-base:\n  http://old/v1\n# after\nauto-commits: false\n"
    new = yaml_set_key(old, "openai-api-base", "http://new/v1", "f")
    assert yaml.safe_load(new) == {
        "model": "sonnet",
        "openai-api-base": "http://new/v1",
        "auto-commits": False,
    }
    assert "# after\n" in new and "old" not in new


def test_a_yaml_list_item_is_replaced_not_duplicated() -> None:
    old = "- model_id: a\n  api_base: x\n- model_id: offload\n  api_base: old\n- model_id: b\n"
    item = {"model_id": "offload", "api_base": "new"}
    new = yaml_set_item(old, ("model_id", "offload"), item, "f")
    assert yaml.safe_load(new) == [{"model_id": "a", "api_base": "x"}, {"model_id": "b"}, item]


def test_a_config_of_the_wrong_shape_is_refused() -> None:
    with pytest.raises(InvalidInput, match="expected a JSON object"):
        json_set("[1, 2]", ("mcpServers", "offload"), {}, "f")
    with pytest.raises(InvalidInput, match="'mcpServers' is not an object"):
        json_set('{"mcpServers": []}', ("mcpServers", "offload"), {}, "f")
    with pytest.raises(InvalidInput, match="expected a YAML list"):
        yaml_set_item("a: 1\n", ("model_id", "offload"), {"model_id": "offload"}, "f")


def test_removal_keeps_the_parents_that_were_there_and_drops_those_it_made_empty() -> None:
    text = '{"mcpServers": {"offload": {"url": "u"}}, "env": {}}'
    assert json.loads(json_unset(text, ("mcpServers", "offload"), 0, "f")) == {"env": {}}
    assert json.loads(json_unset(text, ("mcpServers", "offload"), 1, "f")) == {
        "mcpServers": {},
        "env": {},
    }
    assert json_unset(text, ("other", "offload"), 0, "f") == text  # absent: unchanged


def test_toml_and_yaml_removals_keep_the_rest_of_the_text() -> None:
    toml = "# c\nmodel = 'm'\n\n[mcp_servers.offload]\ncommand = 'x'\n\n[mcp_servers.offload.env]\nA = '1'\n"
    assert toml_unset_table(toml, ("mcp_servers", "offload"), "f") == "# c\nmodel = 'm'\n"
    assert yaml_unset_key("a: 1\n# c\nk: v\nb: 2\n", "k", "f") == "a: 1\n# c\nb: 2\n"
    listed = "- model_id: a\n- model_id: offload\n  api_base: x\n"
    assert yaml_unset_item(listed, ("model_id", "offload"), "f") == "- model_id: a\n"


HERMES = (
    "# hermes\n"
    "model:\n"
    "  provider: openrouter   # my paid account\n"
    "  # fallback: gpt\n"
    "  default: claude\n"
    "\n"
    "# servers\n"
    "mcp_servers:\n"
    "  git: {command: git}\n"
)


def test_a_yaml_mapping_is_written_in_block_style_where_the_old_block_was() -> None:
    value = {"provider": "custom", "base_url": "http://127.0.0.1:8900/v1", "default": "local"}
    new = yaml_set_key(HERMES, "model", value, "f")
    assert new == (
        "# hermes\n"
        "model:\n"
        "  provider: custom\n"
        "  base_url: http://127.0.0.1:8900/v1\n"
        "  default: local\n"
        "\n"
        "# servers\n"
        "mcp_servers:\n"
        "  git: {command: git}\n"
    )
    # without an old block the new one goes at the end, block style too
    assert yaml_set_key("a: 1\n", "model", value, "f").endswith(
        "model:\n  provider: custom\n  base_url: http://127.0.0.1:8900/v1\n  default: local\n"
    )


def test_a_saved_block_is_written_back_as_it_was_with_its_comments_and_in_its_place() -> None:
    saved = yaml_key_text(HERMES, "model")
    assert saved == (
        "model:\n  provider: openrouter   # my paid account\n  # fallback: gpt\n  default: claude\n"
    )
    wired = yaml_set_key(HERMES, "model", {"provider": "custom"}, "f") + "x: 1\n"
    before = {"provider": "openrouter", "default": "claude"}
    assert yaml_set_key(wired, "model", before, "f", saved) == HERMES + "x: 1\n"
    # a saved text that no longer holds the value is not trusted: the value is rendered
    assert "# my paid account" not in yaml_set_key(wired, "model", {"provider": "x"}, "f", saved)


def test_a_yaml_sequence_written_at_its_keys_indent_is_replaced_whole() -> None:
    old = "a: 1\nk:\n- x\n- y\nb: 2\n"
    assert yaml_set_key(old, "k", ["z"], "f") == "a: 1\nk:\n  - z\nb: 2\n"
    assert yaml_unset_key(old, "k", "f") == "a: 1\nb: 2\n"
