"""store.write.writes: a put's preparation and its write."""

from __future__ import annotations

from pathlib import Path

import pytest

from offload.core.tokens import EstimateCounter
from offload.store.store import Store
from offload.store.write import index, writes
from offload.store.write.puts import PutOptions


def _options() -> PutOptions:
    return PutOptions("log", "big.log", (), "", 0.5, False, "", "", None, None)


def test_a_big_body_s_prepared_put_keeps_no_text_and_its_bytes_in_a_file_not_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index, "FREEZE_CHARS", 1000)
    body = "".join(f"step {i} wrote parseConfig {i * 3}\n" for i in range(400))
    store = Store(tmp_path / "s.db", counter=EstimateCounter())
    pending = writes.prepare_put(store, body, _options())
    (block,) = pending.blocks
    assert pending.content == "" and pending.data == b"" and block.stored == b""
    assert block.spool is not None
    (result,) = writes.commit_puts(store, [pending])
    assert block.spool.closed  # written into its row, then let go
    assert store.read(result.entry.ref) == body
    assert [h.entry.id for h in store.search("parseConfig 1197")] == [result.entry.id]


def test_a_small_body_s_prepared_put_keeps_its_text_for_a_write_that_prepares_again(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "s.db", counter=EstimateCounter())
    body = "a short body\n"
    pending = writes.prepare_put(store, body, _options())
    assert pending.content == body and pending.blocks[0].spool is None
