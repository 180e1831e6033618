"""The looking tools through the SDK's in-memory client: peek, matrix, search, recall,
read, checkout, checkin, retrieve, checkout_remote, stats."""

from __future__ import annotations

import base64
import random
import re

import pytest
from mcp_support import McpEnv, Session

from realparts import free_port

pytestmark = pytest.mark.anyio

CODE = "".join(f"line {i}: value_{i} = compute({i})\n" for i in range(1, 451))


def nonce_of(text: str) -> str:
    m = re.search(r"<offload:body:([0-9a-f]{24}) ", text)
    assert m, text
    return m.group(1)


def ref_of(text: str) -> str:
    m = re.search(r"ctx:sha256:[0-9a-f]{12}", text)
    assert m, text
    return m.group(0)


async def put(s: Session, content: str, **kw: object) -> str:
    return ref_of(await s.ok("offload", content=content, **kw))


async def test_peek_counts_by_status_pin_and_kind_without_listing_entries(env: McpEnv) -> None:
    async with env.connect() as s:
        assert "0 entries" in await s.ok("peek")
        a = await put(s, "alpha " * 50, kind="log")
        await put(s, "beta " * 50, kind="note", pin=True)
        await s.ok("checkout", ref=a)
        text = await s.ok("peek")
    assert text.startswith("2 entries: 1 cold, 1 hot, 1 pinned; ~")
    assert "kinds: " in text and "log 1" in text and "note 1" in text
    assert "alpha" not in text and a not in text


async def test_matrix_lists_one_line_per_entry_by_salience_and_pages(env: McpEnv) -> None:
    async with env.connect() as s:
        for i in range(7):
            await put(s, f"entry number {i}\n", topic=f"topic {i}", salience=i / 10, tags=["t"])
        first = await s.ok("matrix", limit=3)
        lines = first.splitlines()
        assert len(lines) == 4
        assert lines[0].endswith("| text | 0.60 | cold | ~5") or " | 0.60 | cold | ~" in lines[0]
        assert "topic 6 [t]" in lines[0] and "topic 4" in lines[2]
        assert lines[3] == "[1-3 of 7; next: matrix(offset=3)]"
        last = await s.ok("matrix", offset=6, limit=3)
        assert last.splitlines()[-1] == "[7-7 of 7]"
        assert "topic 0" in last
        past = await s.ok("matrix", offset=50)
        assert past == "[none at offset 50; 7 in all]"
        assert (await s.fail("matrix", limit=0)).startswith("error: matrix: limit must be")


async def test_matrix_shows_only_this_projects_scope(env: McpEnv) -> None:
    env.store.put("elsewhere text", topic="other project", scope="/else")
    async with env.connect() as s:
        await put(s, "mine", topic="my project")
        text = await s.ok("matrix")
    assert "my project" in text and "other project" not in text


async def test_search_answers_several_queries_and_references_repeated_chunks(env: McpEnv) -> None:
    async with env.connect() as s:
        ref = await put(s, CODE, topic="generated code")
        await put(s, "notes about compute and caching\n", topic="notes")
        text = await s.ok("search", queries=["value_120", "compute 120", "caching"])
    blocks = text.splitlines()
    assert blocks[0] == 'q1 "value_120": 1 hit'
    m = re.fullmatch(
        rf"  {ref} L(\d+)-(\d+) \| generated code \| L120: line 120: value_120.*", blocks[1]
    )
    assert m, blocks[1]
    start, end = int(m.group(1)), int(m.group(2))
    assert start <= 120 <= end  # the chunk holds the matching line
    # the same chunk found again by q2 is referenced, not repeated
    assert f"{ref} L{start}-{end} (same chunk as q1)" in text
    assert text.count("L120: line 120") == 1
    assert 'q3 "caching": 1 hit' in text and "notes about compute and caching" in text
    at = 120 - 5  # a few lines before the matching one
    assert blocks[-1].startswith(f'[open a hit: read(ref="{ref}", offset={at}, max_tokens=2000)')


async def test_the_open_a_hit_call_reads_from_five_lines_before_a_match_on_a_chunks_first_line(
    env: McpEnv,
) -> None:
    async with env.connect() as s:
        ref = await put(s, CODE, topic="generated code")
        found = await s.ok("search", queries=["value_300"])
        start = int(re.search(rf"{ref} L(\d+)-", found).group(1))  # type: ignore[union-attr]
        assert start > 5
        found = await s.ok("search", queries=[f"value_{start}"])
    assert f"{ref} L{start}-" in found  # the match is the first line of its chunk
    jump = f'[open a hit: read(ref="{ref}", offset={start - 5}, max_tokens=2000)'
    assert found.splitlines()[-1].startswith(jump)


async def test_search_says_how_many_hits_follow_the_ones_shown_and_the_limit_that_shows_them(
    env: McpEnv,
) -> None:
    async with env.connect() as s:
        for n in range(6):
            await put(s, f"wombat sighting number {n} near the creek\n", topic=f"sighting {n}")
        text = await s.ok("search", queries=["wombat"], limit=2)
        assert text.splitlines()[0] == 'q1 "wombat": 2 hits, 4 more: limit=6 shows them'
        text = await s.ok("search", queries=["wombat"], limit=6)
        assert text.splitlines()[0] == 'q1 "wombat": 6 hits'


async def test_the_suggested_read_of_a_hit_shows_its_line_within_the_token_budget(
    env: McpEnv,
) -> None:
    # dense lines (base64-like: ~1.5 characters a token) where 40 lines cost ~5k tokens
    rng = random.Random(7)
    rows = [base64.b64encode(rng.randbytes(150)).decode() for _ in range(300)]
    rows[150] = "the zanzibarite marker sits here"
    async with env.connect() as s:
        ref = await put(s, "\n".join(rows) + "\n", topic="dense")
        found = await s.ok("search", queries=["zanzibarite"])
        jump = re.search(r"\[open a hit: read\((.*)\); summary", found)
        assert jump, found
        args = dict(re.findall(r'(\w+)=("[^"]*"|\d+)', jump.group(1)))
        read = await s.ok(
            "read", ref=ref, offset=int(args["offset"]), max_tokens=int(args["max_tokens"])
        )
        unbounded = await s.ok("read", ref=ref, offset=int(args["offset"]))
    body = read.split("\n", 1)[1]
    assert "151\tthe zanzibarite marker sits here" in read
    assert env.store.counter.count(body) <= 2000 + 200  # the fence's own lines
    assert "max_tokens=2000" in read.splitlines()[-1]  # the next page is bounded alike
    assert env.store.counter.count(unbounded.split("\n", 1)[1]) > 5000  # what it saves


async def test_search_shows_each_hits_best_matching_lines_with_their_numbers(
    env: McpEnv,
) -> None:
    body = "header line\nnothing\nthe deploy failed\ndeploy canary failed here\nend\n"
    async with env.connect() as s:
        ref = await put(s, body, topic="ci")
        text = await s.ok("search", queries=["canary deploy failed"])
    assert text.splitlines()[1] == (
        f"  {ref} L1-5 | ci | L3: the deploy failed · L4: deploy canary failed here"
    )


async def test_search_explain_says_why_each_hit_ranks_where_it_does(
    env: McpEnv,
) -> None:
    async with env.connect() as s:
        ref = await put(s, "the socket deploy failed", topic="ci")
        plain = await s.ok("search", queries=["socket deploy"])
        text = await s.ok("search", queries=["socket deploy"], explain=True)
    head, path, *lines = text.splitlines()
    assert [head, lines[0]] == plain.splitlines()[:2] and lines[0].startswith(f"  {ref} ")
    assert path.startswith("  path: ")  # once for the query: every hit's
    assert lines[1].startswith("    #1 score ") and "lexical rank 1" in lines[2]
    matched = [line for line in lines if line.startswith("    terms matched: ")]
    assert matched and "body [deploy, socket]" in matched[0]


async def test_search_filters_by_kind_status_salience_source_and_scope(env: McpEnv) -> None:
    env.store.put("shared needle far away", scope="/else", kind="log", topic="far")
    async with env.connect() as s:
        hot = await put(s, "needle in a log", kind="log", topic="hot log", salience=0.9)
        await put(s, "needle in a note", kind="note", topic="cold note", salience=0.2)
        await s.ok("checkout", ref=hot)
        only_logs = await s.ok("search", queries=["needle"], kind="log")
        assert "hot log" in only_logs and "cold note" not in only_logs and "far" not in only_logs
        cold = await s.ok("search", queries=["needle"], status="cold")
        assert "cold note" in cold and "hot log" not in cold
        salient = await s.ok("search", queries=["needle"], min_salience=0.5)
        assert "hot log" in salient and "cold note" not in salient
        by_source = await s.ok("search", queries=["needle"], source="mc")
        assert "hot log" in by_source
        assert "no hits" in await s.ok("search", queries=["needle"], source="zzz")
        wide = await s.ok("search", queries=["needle"], all_scopes=True)
        assert "far" in wide
        listing = await s.ok("search", kind="note")
        assert listing.splitlines()[0].split(" | ")[1] == "cold note"
        assert listing.endswith("[1 of 1; queries=[…] ranks]")


async def test_search_limits_hits_and_refuses_bad_filters(env: McpEnv) -> None:
    async with env.connect() as s:
        for i in range(8):
            await put(s, f"common word {i}\n", topic=f"t{i}")
        assert (await s.ok("search", queries=["common"])).count("\n  ctx:") == 5  # the default
        assert (await s.ok("search", queries=["common"], limit=2)).count("ctx:sha256:") == 3
        assert "limit must be an integer in 1-20" in await s.fail("search", queries=["x"], limit=21)
        assert "status must be one of" in await s.fail("search", status="warm")
        assert "min_salience must be a number in 0-1" in await s.fail("search", min_salience=2)
        assert "at most 10 queries" in await s.fail("search", queries=[str(i) for i in range(11)])
        none = await s.ok("search", queries=["absent"])
        assert "no hits; try other words" in none
        empty = await s.ok("search", kind="nothing-like-this")
        assert empty.startswith("no entries match these filters")


async def test_search_finds_topic_only_matches_and_neutralises_fence_tags(env: McpEnv) -> None:
    async with env.connect() as s:
        await put(s, "body text </offload:body:abc> end\n", topic="zebra migration plan")
        text = await s.ok("search", queries=["zebra"])
        assert "zebra migration plan" in text
        body_hit = await s.ok("search", queries=["body text"])
    assert "</offload:body" not in body_hit and "<\\/offload:body:abc>" in body_hit


async def test_recall_shows_summary_and_metadata_without_changing_state(env: McpEnv) -> None:
    async with env.connect() as s:
        ref = await put(s, "Traceback (most recent call last):\nValueError: boom\n", topic="crash")
        before = env.store.resolve(ref)
        text = await s.ok("recall", ref=ref)
        after = env.store.resolve(ref)
    assert text.splitlines()[0].startswith(f"{ref} | crash | text | 0.50 | cold")
    assert "summary: " in text and "ValueError: boom" in text
    assert f'next: read(ref="{ref}") or checkout(ref="{ref}")' in text
    assert (before.accessed, before.access_count, before.status) == (
        after.accessed,
        after.access_count,
        after.status,
    )


async def test_recall_of_unknown_ambiguous_and_malformed_refs_says_what_to_do(env: McpEnv) -> None:
    async with env.connect() as s:
        missing = await s.fail("recall", ref="nothing-here")
        assert missing == "error: no entry matches 'nothing-here'; find refs with matrix or search"
        assert "ref is required" in await s.fail("recall")
        assert "must be a string" in await s.fail("recall", ref=5)
        assert "at least 8 hex" in await s.fail("recall", ref="ctx:sha256:abc")


async def test_read_pages_with_numbered_fenced_lines_and_an_exact_continue_call(
    env: McpEnv,
) -> None:
    async with env.connect() as s:
        ref = await put(s, CODE)
        first = await s.ok("read", ref=ref)
        lines = first.splitlines()
        assert lines[0] == f"{ref} L1-200 of 450"
        assert lines[1].startswith(f"<offload:body:{nonce_of(first)} ref=")
        assert lines[1].endswith("  1\tline 1: value_1 = compute(1)")
        assert lines[-1] == f'[250 more lines — continue with read(ref="{ref}", offset="201")]'
        second = await s.ok("read", ref=ref, offset="201", limit=10)
        assert second.splitlines()[0] == f"{ref} L201-210 of 450"
        assert "201\tline 201:" in second and "211\t" not in second
        tail = await s.ok("read", ref=ref, offset=441)
        assert "450\tline 450" in tail and "continue with" not in tail
        assert nonce_of(first) != nonce_of(second)
        assert env.store.resolve(ref).status == "cold"


async def test_read_splits_long_lines_into_labelled_parts_and_caps_bytes(env: McpEnv) -> None:
    async with env.connect() as s:
        ref = await put(s, "short\n" + "x" * 4500 + "\nend\n")
        text = await s.ok("read", ref=ref)
        assert "\n2-1\t" in text and "\n2-2\t" in text and "\n2-3\t" in text
        assert "3\tend" in text
        big = await put(s, ("y" * 1900 + "\n") * 100)
        capped = await s.ok("read", ref=big)
        assert len(capped.encode()) < 64 * 1024 + 1024
        assert "continue with read" in capped and 'offset="' in capped


async def test_read_refuses_bad_offsets_and_limits_with_the_fix(env: McpEnv) -> None:
    async with env.connect() as s:
        ref = await put(s, "one\ntwo\n")
        assert "past the end (2 lines)" in await s.fail("read", ref=ref, offset=9)
        assert 'offset must be a line number like "61"' in await s.fail(
            "read", ref=ref, offset="abc"
        )
        assert "offset must be a line number" in await s.fail("read", ref=ref, offset=[1])
        assert "limit must be an integer" in await s.fail("read", ref=ref, limit=-1)


async def test_checkout_fences_the_body_marks_hot_and_checkin_needs_the_nonce(env: McpEnv) -> None:
    async with env.connect() as s:
        ref = await put(s, "the body\n", pin=True)
        text = await s.ok("checkout", ref=ref)
        nonce = nonce_of(text)
        assert f'checkin(ref="{ref}", nonce="{nonce}")' in text.splitlines()[0]
        assert text.endswith(f">the body\n</offload:body:{nonce}>")
        assert env.store.resolve(ref).status == "hot"
        assert "nonce does not match" in await s.fail("checkin", ref=ref, nonce="0" * 24)
        assert "nonce is required" in await s.fail("checkin", ref=ref)
        done = await s.ok("checkin", ref=ref, nonce=nonce)
        assert done == f"{ref} checked in (cold+pinned)"
        assert "is not checked out" in await s.fail("checkin", ref=ref, nonce=nonce)
        again = await s.ok("checkout", ref=ref)
    assert "warning: checked out again" in again


async def test_a_second_checkout_warns_that_the_earlier_nonce_is_void(env: McpEnv) -> None:
    async with env.connect() as s:
        ref = await put(s, "body two\n")
        first = nonce_of(await s.ok("checkout", ref=ref))
        second = await s.ok("checkout", ref=ref)
        assert "already checked out" in second
        assert "nonce does not match" in await s.fail("checkin", ref=ref, nonce=first)
        await s.ok("checkin", ref=ref, nonce=nonce_of(second))


async def test_retrieve_returns_the_original_by_hash_id_or_label_fenced(env: McpEnv) -> None:
    original = "the original text\nwith two lines\n"
    res = env.store.put(original, body="compressed", label="my-label", scope=env.context().scope)
    full = res.entry.full_ref
    async with env.connect() as s:
        for ref in (full, str(res.entry.id), "my-label", full[len("ctx:sha256:") :][:10]):
            text = await s.ok("retrieve", ref=ref)
            assert f">{original}</offload:body:" in text
            assert "the stored body is compressed" in text
        assert "compressed" in await s.ok("read", ref=full)
        assert "is gone" not in await s.fail("retrieve", ref="nope-label")


async def test_checkout_remote_without_a_model_is_an_error_naming_the_setting(env: McpEnv) -> None:
    async with env.connect() as s:
        ref = await put(s, "something to distill\n")
        err = await s.fail("checkout_remote", ref=ref)
    assert "needs a local model and none is configured" in err
    assert "[local_model] base_url" in err


async def test_checkout_remote_with_an_unreachable_model_is_an_error_not_a_fallback(
    env: McpEnv,
) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    overrides = {"local_model.base_url": url, "local_model.retries": 0, "local_model.timeout": 5}
    async with env.connect(**overrides) as s:
        ref = await put(s, "something to distill\n" * 20)
        err = await s.fail("checkout_remote", ref=ref)
    assert "<offload:body" not in err


async def test_stats_counts_this_sessions_calls_and_volumes(env: McpEnv) -> None:
    async with env.connect() as s:
        ref = await put(s, "abc\n")
        await put(s, "abc\n")
        await s.ok("checkout", ref=ref)
        await s.fail("recall", ref="missing-label")
        text = await s.ok("stats")
    lines = text.splitlines()
    assert lines[0].startswith("this session: 4 calls (1 errors), ")
    assert "checkout 1" in lines[1] and "offload 2" in lines[1] and "recall 1" in lines[1]
    assert (
        lines[2] == "offloaded: 1 new (4 bytes), 1 already stored; fenced bodies sent: 1 (4 bytes)"
    )
    assert "saved" not in text.lower()


async def test_a_lossy_entry_says_so_wherever_its_body_is_shown(env: McpEnv) -> None:
    original = "the full original text with every detail kept\n" * 20
    lossy = "a short lossy summary\n"
    entry = env.store.put(original, body=lossy, scope=env.context().scope, topic="lossy one").entry
    assert entry.compressed
    async with env.connect() as s:
        matrix = await s.ok("matrix")
        read = await s.ok("read", ref=entry.ref)
        checkout = await s.ok("checkout", ref=entry.ref)
        retrieved = await s.ok("retrieve", ref=entry.ref)
    assert "| text (lossy) |" in matrix
    assert "lossy" in read.splitlines()[0] and "retrieve gives the original" in read
    assert "lossy" in checkout.splitlines()[0]
    assert "every detail kept" in retrieved and "every detail kept" not in read


async def test_a_proxy_page_out_reads_as_a_transcript_of_the_exact_messages_never_as_lossy(
    env: McpEnv,
) -> None:
    from offload.proxy.rewrite.stubs.message_stubs import StubMaker

    call = {"name": "bash", "arguments": '{"command": "cat build.log"}'}
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a careful agent."},
        {"role": "user", "content": "Why does the build fail?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": call}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "error: quokkaline overflow\n" * 30},
        {"role": "assistant", "content": "The quokkaline buffer overflows."},
        {"role": "user", "content": "Fix it."},
    ]  # fmt: skip
    maker = StubMaker(env.store, env.store.counter, scope=env.context().scope)
    stub, part = maker.render_range("s1", messages, 2, 2, 5, None, 400)
    maker.page_out("s1", stub, part)
    async with env.connect() as s:
        matrix = await s.ok("matrix")
        found = await s.ok("search", queries=["quokkaline"])
        ref = ref_of(found)
        read = await s.ok("read", ref=ref)
        recalled = await s.ok("recall", ref=ref)
        retrieved = await s.ok("retrieve", ref=ref)
    assert "| proxy (transcript) |" in matrix
    assert f"{ref} L" in found and "(transcript)" in found.splitlines()[1]
    assert "retrieve gives the exact messages" in read.splitlines()[0]
    assert "transcript of the exact messages" in recalled
    assert "the exact messages; the stored body is their transcript" in retrieved
    for text in (matrix, found, read, recalled, retrieved):
        assert "lossy" not in text and "compress" not in text
