"""KV reuse as the upstream sees it: the token prefix a request shares with the previous one."""

from __future__ import annotations

from offload.core.tokens import EstimateCounter
from offload.proxy.rewrite.messages import Message, message_tokens
from offload.proxy.rewrite.reuse import (
    LOOP_NOTE,
    RECALL,
    SentDigest,
    break_cause,
    shared_after_restart,
    shared_prefix,
)
from offload.proxy.rewrite.stubs.parts import LOOP_MARKER, RECALL_MARKER

COUNTER = EstimateCounter()
SYSTEM: Message = {"role": "system", "content": "You are a careful agent. " * 20}
ASK: Message = {"role": "user", "content": "Read the deploy log and say what failed."}
READ: Message = {"role": "assistant", "content": "Reading it now, then the config."}
BLOCK: Message = {"role": "user", "content": f"{RECALL_MARKER}from memory]\nold records"}
NOTE: Message = {"role": "user", "content": f"{LOOP_MARKER} You have repeated it 4 times."}


def tokens(msgs: list[Message]) -> list[int]:
    return [message_tokens(COUNTER, m) for m in msgs]


def test_a_request_that_extends_the_previous_one_shares_all_its_tokens() -> None:
    old = [SYSTEM, ASK]
    new = [*old, READ, {"role": "user", "content": "and now?"}]
    shared = shared_prefix(COUNTER, old, tokens(old), new)
    assert shared.tokens == sum(tokens(old))
    assert shared.first_diff == len(old)
    assert break_cause(old, shared.first_diff, None) is None


def test_a_message_edited_at_its_end_shares_the_tokens_of_its_common_start() -> None:
    edited: Message = {"role": "user", "content": ASK["content"] + " Quickly."}
    old = [SYSTEM, ASK, READ]
    new = [SYSTEM, edited]
    shared = shared_prefix(COUNTER, old, tokens(old), new)
    assert shared.first_diff == 1
    whole = message_tokens(COUNTER, SYSTEM)
    assert whole < shared.tokens < whole + message_tokens(COUNTER, ASK)
    assert break_cause(old, shared.first_diff, "client_edit") == "client_edit"


def test_a_different_role_at_the_first_difference_shares_nothing_of_it() -> None:
    old = [SYSTEM, ASK]
    new = [SYSTEM, {"role": "assistant", "content": ASK["content"]}]
    assert shared_prefix(COUNTER, old, tokens(old), new).tokens == tokens(old)[0]


def test_a_dropped_recall_block_or_loop_note_is_its_own_cause() -> None:
    follow = [SYSTEM, ASK, READ, {"role": "user", "content": "go on"}]
    for note, cause in ((BLOCK, RECALL), (NOTE, LOOP_NOTE)):
        old = [SYSTEM, ASK, note]
        shared = shared_prefix(COUNTER, old, tokens(old), follow)
        assert shared.first_diff == 2
        assert shared.tokens == sum(tokens(old)[:2])  # only the note is recomputed
        assert break_cause(old, shared.first_diff, None) == cause


def test_a_break_before_the_proxys_additions_keeps_the_pipelines_cause() -> None:
    old = [SYSTEM, ASK, READ, BLOCK]
    paged = [SYSTEM, ASK, {"role": "assistant", "content": "[offload: 1 message paged out]"}]
    shared = shared_prefix(COUNTER, old, tokens(old), paged)
    assert shared.first_diff == 2
    assert break_cause(old, shared.first_diff, "windowing") == "windowing"
    assert break_cause(old, shared.first_diff, None) == "client_edit"


def test_after_a_restart_the_kept_digests_measure_the_whole_messages_shared() -> None:
    old = [SYSTEM, ASK, READ, BLOCK]
    kept = SentDigest.from_json(SentDigest.of(7, old, tokens(old)).to_json())
    assert kept is not None and kept.version == 7
    new = [*old, NOTE]
    assert shared_after_restart(kept, new, tokens(new), "restart") == (sum(tokens(old)), None)
    # the next turn drops the recall block the last one ended with: that, not a restart
    later = [SYSTEM, ASK, READ, {"role": "user", "content": "and now?"}]
    shared = shared_after_restart(kept, later, tokens(later), "restart")
    assert shared == (sum(tokens(old[:3])), RECALL)
    edited = [SYSTEM, {"role": "user", "content": "Read the build log."}]
    shared = shared_after_restart(kept, edited, tokens(edited), "restart")
    assert shared == (tokens([SYSTEM])[0], "restart")


def test_a_kept_record_of_another_shape_is_not_used() -> None:
    good = SentDigest.of(1, [SYSTEM], tokens([SYSTEM])).to_json()
    assert SentDigest.from_json({**good, "tokens": [1, 2]}) is None
    assert SentDigest.from_json({**good, "version": "x"}) is None
    assert SentDigest.from_json([good]) is None
    # lists of anything else, a string where a list goes, tokens that are no count
    assert SentDigest.from_json({**good, "digests": "a", "tokens": [1], "marks": "b"}) is None
    for bad in (-1, 1.5, True, "3", None, float("inf")):
        assert SentDigest.from_json({**good, "tokens": [bad]}) is None, bad
    odd = SentDigest.from_json({**good, "marks": [{"x": 1}]})
    assert odd is not None and odd.marks == ("",)


def test_the_tokens_a_kept_record_states_bound_nothing_the_new_request_counts_its_own() -> None:
    # the record is read back from a store anyone with the file can write: a restart's
    # reuse is the new request's own tokens of the messages shared whole, never more
    old = [SYSTEM, ASK, READ]
    forged = {**SentDigest.of(1, old, tokens(old)).to_json(), "tokens": [10**30, 10**30, 5]}
    kept = SentDigest.from_json(forged)
    assert kept is not None
    assert shared_after_restart(kept, old, tokens(old), "restart") == (sum(tokens(old)), None)
