"""Entries one level down in YAML configs (Hermes, Goose, Continue), edited as text."""

from __future__ import annotations

import pytest
import yaml

from offload.core.clients.yaml_blocks import Nested, current, nested_set, nested_unset
from offload.errors import InvalidInput

SERVERS = Nested("mcp_servers", "offload")
LISTED = Nested("mcpServers", "offload", match="name")

HERMES = """\
# top comment
model:
  default: m
mcp_servers:
  # the user's own server
  time:
    command: "uvx"
    args: ["mcp-server-time"]

display:
  skin: default
"""


def test_a_mapping_child_is_added_at_the_end_of_its_block_keeping_every_comment() -> None:
    new = nested_set(HERMES, SERVERS, {"command": "/bin/offload", "args": ["mcp"]}, "f")
    assert yaml.safe_load(new)["mcp_servers"] == {
        "time": {"command": "uvx", "args": ["mcp-server-time"]},
        "offload": {"command": "/bin/offload", "args": ["mcp"]},
    }
    assert "# top comment\n" in new and "  # the user's own server\n" in new
    assert new.index("offload:") < new.index("display:")  # inside the block, not after it
    assert nested_set(new, SERVERS, {"command": "/bin/offload", "args": ["mcp"]}, "f") == new
    assert nested_unset(new, SERVERS, True, "f") == HERMES  # back to the same bytes


def test_a_changed_child_is_replaced_not_duplicated() -> None:
    once = nested_set(HERMES, SERVERS, {"url": "http://a/mcp"}, "f")
    twice = nested_set(once, SERVERS, {"url": "http://b/mcp"}, "f")
    assert twice.count("offload:") == 1
    assert current(yaml.safe_load(twice), SERVERS) == {"url": "http://b/mcp"}


def test_a_parent_added_by_setup_goes_on_removal_and_one_that_was_there_stays() -> None:
    text = "model: m\n"
    new = nested_set(text, SERVERS, {"command": "x"}, "f")
    assert yaml.safe_load(new) == {"model": "m", "mcp_servers": {"offload": {"command": "x"}}}
    assert nested_unset(new, SERVERS, False, "f") == text
    empty = "mcp_servers: {}\nmodel: m\n"
    new = nested_set(empty, SERVERS, {"command": "x"}, "f")
    assert yaml.safe_load(nested_unset(new, SERVERS, True, "f")) == yaml.safe_load(empty)


def test_a_list_item_is_found_by_its_name_and_the_others_kept() -> None:
    text = "name: c\nmcpServers:\n- name: sqlite\n  command: npx\ncontext:\n  - provider: code\n"
    item = {"name": "offload", "command": "/bin/offload", "args": ["mcp"]}
    new = nested_set(text, LISTED, item, "f")
    assert yaml.safe_load(new)["mcpServers"] == [{"name": "sqlite", "command": "npx"}, item]
    assert yaml.safe_load(new)["context"] == [{"provider": "code"}]
    assert nested_unset(new, LISTED, True, "f") == text


def test_an_inline_parent_with_entries_is_refused_rather_than_rewritten() -> None:
    with pytest.raises(InvalidInput, match="written inline"):
        nested_set("mcp_servers: {time: {command: uvx}}\n", SERVERS, {"command": "x"}, "f")


@pytest.mark.parametrize(
    ("text", "spec", "kind"),
    [
        ("mcp_servers:\n  - a\n", SERVERS, "a mapping"),  # was an AttributeError traceback
        ("mcpServers:\n  name: x\n", LISTED, "a list"),
    ],
)
def test_a_parent_of_the_other_shape_is_refused_in_one_line(
    text: str, spec: Nested, kind: str
) -> None:
    with pytest.raises(InvalidInput, match=f"is not {kind}; nothing changed"):
        nested_set(text, spec, {"command": "x"}, "f")
