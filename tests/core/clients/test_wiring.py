"""What setup writes in each client's file, and :func:`undo` taking it out again."""

from __future__ import annotations

from pathlib import Path

import pytest

from offload.core.clients.edits import parse
from offload.core.clients.wiring import (
    CLIENTS,
    ConfigFile,
    Conflict,
    Wiring,
    added,
    apply,
    current,
    undo,
)
from realparts import TEST_DATA

FIXTURES = TEST_DATA / "clients"
WIRING = Wiring(("/bin/offload", "mcp"), "", "http://127.0.0.1:8900", "local")
HTTP = Wiring(("/bin/offload", "mcp"), "http://127.0.0.1:8900/mcp", "http://127.0.0.1:8900", "m")
FILES = [(c.name, f) for c in CLIENTS.values() for f in c.files]


@pytest.mark.parametrize(("client", "file"), FILES, ids=[f"{c}-{f.what}" for c, f in FILES])
def test_undo_takes_out_exactly_what_apply_added_to_each_fixture(
    client: str, file: ConfigFile
) -> None:
    path = FIXTURES / client / "existing" / file.path
    old = path.read_text(encoding="utf-8")
    for wiring in (WIRING, HTTP) if client != "claude-desktop" else (WIRING,):
        value = file.entry(wiring)
        new = apply(file, old, wiring, str(path))
        assert current(file, parse(new, file.fmt, "f")) == value
        record = added(file, old, value, str(path))
        back = undo(file, new, record, str(path))
        assert parse(back, file.fmt, "f") == parse(old, file.fmt, "f")
        if not record["had"]:
            assert back == old  # nothing replaced: the very bytes


def test_undo_refuses_when_offloads_entry_was_changed_and_leaves_one_already_gone() -> None:
    (file,) = CLIENTS["cursor"].files
    new = apply(file, None, WIRING, "f")
    record = added(file, None, file.entry(WIRING), "f")
    edited = new.replace("/bin/offload", "/usr/local/bin/offload")
    with pytest.raises(Conflict, match=r"the offload entry \(mcpServers\.offload\) changed"):
        undo(file, edited, record, "f")
    assert undo(file, '{"mcpServers": {}}', record, "f") == '{"mcpServers": {}}'


def test_every_client_has_a_fixture_and_a_documented_source() -> None:
    for client in CLIENTS.values():
        assert client.source, client.name
        for file in client.files:
            assert Path(FIXTURES / client.name / "existing" / file.path).is_file()
        malformed = [FIXTURES / client.name / "malformed" / f.path for f in client.files]
        assert any(p.is_file() for p in malformed), client.name


def test_undo_of_a_record_without_the_blocks_text_still_puts_the_value_back() -> None:
    (file,) = [f for f in CLIENTS["hermes"].files if f.what == "provider"]
    old = "model:\n  default: claude  # mine\nx: 1\n"
    new = apply(file, old, WIRING, "f")
    record = added(file, old, file.entry(WIRING), "f")
    assert record["before_text"] == "model:\n  default: claude  # mine\n"
    assert undo(file, new, record, "f") == old  # the text itself, comment and place
    del record["before_text"]  # a record an older setup wrote
    assert parse(undo(file, new, record, "f"), "yaml", "f") == {
        "model": {"default": "claude"},
        "x": 1,
    }
