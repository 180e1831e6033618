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
