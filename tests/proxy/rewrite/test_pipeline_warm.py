"""What a pipeline keeps from turn to turn (the previous request, its counts, the session's
memory index, the message checks) changes only how fast a turn is served, never its bytes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from offload.config import ProxySettings
from offload.core.tokens import EstimateCounter
from offload.errors import InvalidInput
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.stubs import message_stubs
from offload.store.store import Store

Msgs = list[dict[str, Any]]
N_CTX = 2048


def session(turns: int) -> Msgs:
    """A tool session whose user comes back, late, to what an early tool answer said."""
    msgs: Msgs = [
        {"role": "system", "content": "You are a careful agent."},
        {"role": "user", "content": "Inventory the harbour stores."},
    ]
    for t in range(turns):
        rows = [f"shelf {t}-{i}: crate of rope, tar and canvas, count {i * 3}" for i in range(30)]
        if t == 2:
            rows[7] = "shelf 2-7: the brass astrolabe of the harbour pilot, in locker nine"
        msgs += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{t}",
                        "type": "function",
                        "function": {"name": "list_shelf", "arguments": f'{{"shelf": {t}}}'},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": f"call_{t}",
                "name": "list_shelf",
                "content": "\n".join(rows),
            },
        ]
        if t % 5 == 4:
            ask = "Where is the brass astrolabe of the pilot?" if t > 12 else f"Go on after {t}."
            msgs += [
                {"role": "assistant", "content": f"Shelves up to {t} are listed."},
                {"role": "user", "content": ask},
            ]
    return msgs


def turns(msgs: Msgs) -> list[Msgs]:
    return [msgs[:k] for k, m in enumerate(msgs) if m["role"] == "assistant"] + [msgs]


def test_a_warm_pipeline_sends_the_bytes_a_cold_one_sends_on_every_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(message_stubs, "MERGE_BYTES", 6000)  # several parts, merged
    counter = EstimateCounter()
    settings = ProxySettings()
    recalled = windowed = 0
    with Store(tmp_path / "warm.db", counter=counter) as warm_store:
        warm = Pipeline(warm_store, settings, counter)
        for request in turns(session(40)):
            # each turn's request a fresh copy, as the HTTP app decodes it
            hot = warm.rewrite(copy.deepcopy(request), N_CTX)
            # cold: a new store object (no memory index, no term counts) and a new
            # pipeline (no previous request, counts or stubs), on the state saved so far
            with Store(tmp_path / "cold.db", counter=counter) as cold_store:
                cold = Pipeline(cold_store, settings, counter).rewrite(request, N_CTX)
            assert hot.messages == cold.messages
            assert (hot.wire_tokens, hot.stubbed_messages) == (
                cold.wire_tokens,
                cold.stubbed_messages,
            )
            recalled += hot.recall_tokens > 0
            windowed += hot.windowed
    assert recalled and windowed > 2  # the turns did recall and page out


def test_a_bad_message_is_refused_where_it_is_whatever_the_session_sent_before(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "s.db", counter=EstimateCounter()) as store:
        pipe = Pipeline(store, ProxySettings(), EstimateCounter())
        msgs = session(3)
        pipe.rewrite(msgs, N_CTX)
        edited = copy.deepcopy(msgs)
        edited[3]["role"] = "robot"  # an earlier message changed into a bad one
        with pytest.raises(InvalidInput, match=r"messages\[3\] has unknown role 'robot'"):
            pipe.rewrite(edited, N_CTX)
        appended = [*msgs, {"role": "tool", "content": "no call id"}]
        with pytest.raises(InvalidInput, match=rf"messages\[{len(msgs)}\] \(tool\) needs"):
            pipe.rewrite(appended, N_CTX)
        not_objects: Any = ["system", *msgs[1:]]
        with pytest.raises(InvalidInput, match=r"messages\[0\] must be an object"):
            pipe.rewrite(not_objects, N_CTX)
        assert pipe.rewrite(msgs, N_CTX).messages  # the session goes on
