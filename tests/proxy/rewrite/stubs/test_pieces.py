"""A page-out's part made from each message's cached pieces is the part made whole."""

from __future__ import annotations

import gc
import json
from typing import Any

from offload.core.tokens import EstimateCounter
from offload.proxy.rewrite import transcript
from offload.proxy.rewrite.memory import count_terms, part_of, part_of_messages
from offload.proxy.rewrite.stubs import pieces
from offload.proxy.rewrite.stubs.parts import part_tokens

Msgs = list[dict[str, Any]]


def chat() -> Msgs:
    """Messages of every shape a part holds: text, unicode, tool calls and their answers,
    content parts, a text that itself holds a transcript header."""
    return [
        {"role": "user", "content": "fix the bug in café.py ✓"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "café.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "def f():\n    return 1\n"},
        {"role": "user", "content": [{"type": "text", "text": "and now?"}]},
        {"role": "assistant", "content": "notes:\n## #3 user\nlooks like a header", "n": 1.5},
    ]


def test_a_part_joined_from_its_messages_json_is_the_json_of_the_part_made_whole() -> None:
    msgs = chat()
    for earlier in (None, "ctx:sha256:" + "a" * 64):
        items = [json.dumps(m, ensure_ascii=False) for m in msgs]
        doc = {"conversation": "s1\u00e9", "first": 4, "last": 8, "messages": msgs}
        doc["earlier"] = earlier
        assert pieces.part_json("s1\u00e9", 4, 8, items, earlier) == json.dumps(
            doc, ensure_ascii=False
        )
    assert pieces.array_json([]) == json.dumps([])
    assert pieces.array_json([json.dumps(m) for m in msgs[:2]]) == json.dumps(msgs[:2])


def test_a_transcript_joined_from_pieces_is_the_transcript_rendered_whole() -> None:
    msgs = chat()
    made = [transcript.piece(7 + i, m) for i, m in enumerate(msgs)]
    for title in ("# conversation s1, messages #7-#11", ""):
        whole = transcript.render(msgs, 7, title)
        assert transcript.join(made, title) == whole
    # a call's result is its answer's text, found in a later message's piece
    calls = transcript.join(made, "t").calls
    assert [(c.name, c.result) for c in calls] == [("read_file", "def f():\n    return 1\n")]


def test_a_part_counted_from_its_messages_counts_as_the_transcript_counted_whole() -> None:
    counter = EstimateCounter()
    cache = pieces.PieceCache()
    msgs = chat()
    title = "# conversation s1, messages #0-#4"
    made = cache.run("s1", msgs, 0, len(msgs))
    text = transcript.join([r.piece for r in made], title).text
    assert pieces.transcript_tokens(counter, title, made) == part_tokens(counter, text)
    # the same pieces counted again as the inner pieces of a longer part
    longer = cache.run("s1", [*msgs, {"role": "user", "content": "next"}], 0, len(msgs) + 1)
    text = transcript.join([r.piece for r in longer], title).text
    assert pieces.transcript_tokens(counter, title, longer) == part_tokens(counter, text)


def test_a_message_edited_at_the_same_index_is_rendered_again() -> None:
    cache = pieces.PieceCache()
    msgs = chat()
    first = cache.of("s1", 0, msgs[0])
    assert cache.of("s1", 0, dict(msgs[0])) is first  # equal: reused
    edited = cache.of("s1", 0, {"role": "user", "content": "another task"})
    assert edited is not first
    assert "another task" in edited.piece.rows
    assert cache.of("s2", 0, msgs[0]) is not first  # another session's message 0


def test_the_cache_keeps_within_its_bound_in_characters() -> None:
    cache = pieces.PieceCache(max_chars=400)
    msgs = [{"role": "user", "content": f"message {i} " + "x" * 100} for i in range(10)]
    made = cache.run("s", msgs, 0, len(msgs))
    assert cache.of("s", 9, msgs[9]) is made[9]  # the newest stays
    assert cache.of("s", 0, msgs[0]) is not made[0]  # the oldest went


def test_a_part_indexed_from_its_messages_pieces_is_the_part_indexed_from_its_text() -> None:
    cache = pieces.PieceCache()
    msgs = chat()
    title = "# conversation s1, messages #0-#4"
    made = cache.run("s1", msgs, 0, len(msgs))
    rendered = transcript.join([r.piece for r in made], title)
    assert all(r.plain for r in made)
    whole = part_of("ref1", 0, rendered.text, rendered.lines, None)
    joined = part_of_messages(
        "ref1",
        0,
        [r.indexed(count_terms) for r in made],
        rendered.lines,
        rendered.text.count("\n") + 1,
        None,
    )
    assert joined == whole


def test_a_message_whose_header_holds_a_line_break_is_not_taken_as_its_rows() -> None:
    msg = {"role": "tool", "name": "two\nlines", "tool_call_id": "c", "content": "out"}
    made = pieces.Rendered(0, msg)
    assert not made.plain


def test_a_part_described_from_its_messages_pieces_is_described_as_the_run_whole() -> None:
    def call(i: int, args: str) -> dict[str, Any]:
        fn = {"name": f"tool{i % 3}", "arguments": args}
        return {"role": "assistant", "tool_calls": [{"id": f"c{i}", "function": fn}]}

    msgs: Msgs = [{"role": "user", "content": "the task"}]
    for i in range(12):  # the same files again, then new ones: more than MAX_FILES in all
        paths = [f"src/m{j}.py" for j in range(i // 2, i // 2 + 3)]
        msgs.append(call(i, json.dumps({"path": paths[0], "cmd": f"cat {' '.join(paths)}"})))
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": "ok"})
    made = [pieces.Rendered(i, m) for i, m in enumerate(msgs)]
    assert transcript.summarise(
        msgs,
        "the task",
        0,
        transcript.tool_counts_of([r.piece for r in made]),
        transcript.files_in([r.files() for r in made]),
    ) == transcript.describe(msgs, "the task", 0)
    assert len(transcript.files_of(msgs)) == transcript.MAX_FILES


def test_a_rendered_messages_files_are_kept_where_the_cyclic_gc_stops_walking_them() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "edit", "arguments": "{}"}}
    for msg in ({"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [call]}):
        made = pieces.Rendered(3, msg)
        files = made.files()
        gc.collect()
        assert files == tuple(transcript.files_of([msg]))
        assert not gc.is_tracked(files)


def test_a_sessions_forms_before_a_part_paged_out_are_dropped_and_made_again_when_asked() -> None:
    cache = pieces.PieceCache()
    msgs = [{"role": "user", "content": f"message {i}"} for i in range(10)]
    kept = cache.run("s", msgs, 0, 10)
    other = cache.run("t", msgs, 0, 10)
    cache.forget_before("s", 6)
    again = cache.run("s", msgs, 0, 10)
    # the forms from the part's first message on are reused, those before it made again
    assert all(a is b for a, b in zip(again[6:], kept[6:], strict=True))
    assert all(a is not b and a.json == b.json for a, b in zip(again[:6], kept[:6], strict=True))
    # another session's forms stay
    assert all(a is b for a, b in zip(cache.run("t", msgs, 0, 10), other, strict=True))
    # a part that starts further back (a new chain, after an edit) drops nothing; the
    # next part drops from it on
    cache.forget_before("s", 3)
    assert all(a is b for a, b in zip(cache.run("s", msgs, 0, 10), again, strict=True))
    cache.forget_before("s", 8)
    last = cache.run("s", msgs, 0, 10)
    assert all(a is b for a, b in zip(last[:3] + last[8:], again[:3] + again[8:], strict=True))
    assert all(a is not b for a, b in zip(last[3:8], again[3:8], strict=True))
