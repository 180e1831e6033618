"""Zed's and VS Code's JSON with comments, edited only where offload's entry is."""

from __future__ import annotations

import pytest

from offload.core.clients.edits import json_set, json_unset
from offload.core.clients.jsonc import loads
from offload.errors import InvalidInput

ZED = """\
// Zed settings
{
  "theme": "One Dark", // the dark one
  /* servers the agent panel starts */
  "context_servers": {
    "local": { "command": "some-command", "args": [] },
  },
  // "vim_mode": true,
}
"""


def test_comments_and_trailing_commas_parse_as_the_editors_read_them() -> None:
    assert loads(ZED, "f") == {
        "theme": "One Dark",
        "context_servers": {"local": {"command": "some-command", "args": []}},
    }
    assert loads('{"url": "http://a//b /* not a comment */"}', "f") == {
        "url": "http://a//b /* not a comment */"
    }


def test_an_entry_is_added_and_removed_leaving_every_comment_and_byte_else() -> None:
    path = ("context_servers", "offload")
    new = json_set(ZED, path, {"command": "/bin/offload", "args": ["mcp"]}, "f", "jsonc")
    assert loads(new, "f")["context_servers"]["offload"] == {
        "command": "/bin/offload",
        "args": ["mcp"],
    }
    for kept in ("// Zed settings", "// the dark one", "/* servers the agent", '// "vim_mode"'):
        assert kept in new
    assert json_unset(new, path, 1, "f", "jsonc") == ZED
    changed = json_set(new, path, {"url": "http://x/mcp"}, "f", "jsonc")  # replaced in place
    assert loads(changed, "f")["context_servers"]["offload"] == {"url": "http://x/mcp"}
    assert changed.count('"offload"') == 1


def test_a_parent_setup_created_goes_with_the_entry() -> None:
    text = '{\n  // mine\n  "theme": "One Dark"\n}\n'
    new = json_set(text, ("context_servers", "offload"), {"command": "x"}, "f", "jsonc")
    assert loads(new, "f") == {
        "theme": "One Dark",
        "context_servers": {"offload": {"command": "x"}},
    }
    assert json_unset(new, ("context_servers", "offload"), 0, "f", "jsonc") == text
    empty = '{\n  "servers": {\n    // none yet\n  }\n}\n'
    new = json_set(empty, ("servers", "offload"), {"type": "stdio"}, "f", "jsonc")
    assert loads(new, "f") == {"servers": {"offload": {"type": "stdio"}}} and "// none yet" in new


@pytest.mark.parametrize(
    "text",
    ['{"a": 1 "b": 2}', '{"a": "open}', '{"a": 1 /* open', "{'a': 1}", '{"a": tru}'],
)
def test_malformed_jsonc_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(InvalidInput, match="is not valid JSONC") as info:
        json_set(text, ("servers", "offload"), {}, "f", "jsonc")
    assert "\n" not in str(info.value)
