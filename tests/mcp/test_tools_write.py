"""The changing tools through the SDK's in-memory client: offload, offload_path,
offload_path_sectioned, pin, unpin, reap, forget, snapshot, restore."""

from __future__ import annotations

import re

import pytest
from mcp_support import McpEnv, Session

from offload.mcp.tools_write import LISTED_SECTIONS, MAX_SECTIONS
from offload.store.models import Filters
from offload.store.write import index
from realparts import free_port
from scripted_model import scripted_model

pytestmark = pytest.mark.anyio


def ref_of(text: str) -> str:
    m = re.search(r"ctx:sha256:[0-9a-f]{12}", text)
    assert m, text
    return m.group(0)


async def put(s: Session, content: str, **kw: object) -> str:
    return ref_of(await s.ok("offload", content=content, **kw))


async def test_offload_stores_with_a_gist_summary_and_dedups_to_the_same_ref(env: McpEnv) -> None:
    content = "# Build notes\nThe build failed.\nValueError: missing key 'x'\n"
    async with env.connect() as s:
        first = await s.ok("offload", content=content, kind="log", tags=["build", "ci"])
        again = await s.ok("offload", content=content, topic="other")
    ref = ref_of(first)
    assert first.startswith(f"stored: {ref} | Build notes [build ci] | log | 0.50 | cold | ~")
    assert again.startswith(f"already stored: {ref} | Build notes")
    e = env.store.resolve(ref)
    assert "ValueError: missing key 'x'" in e.summary and e.source == "mcp"
    assert env.store.body(e) == content


async def test_offload_takes_summary_salience_and_pin_and_refuses_bad_values(env: McpEnv) -> None:
    async with env.connect() as s:
        ref = await put(s, "x y z", summary="my words", salience=0.8)
        e = env.store.resolve(ref)
        assert (e.summary, e.salience, e.pinned) == ("my words", 0.8, False)
        pinned = await s.ok("offload", content="pinned thing", pin=True)
        assert "| 1.00 | cold+pinned |" in pinned
        assert "content is required" in await s.fail("offload")
        assert "content must not be empty" in await s.fail("offload", content="   ")
        assert "salience must be a number in 0-1" in await s.fail(
            "offload", content="a", salience=3
        )
        assert "tags must be a list of strings" in await s.fail("offload", content="a", tags=[1])
        lone = "bad \ud800 surrogate"
        assert (await s.call("offload", content=lone)).is_error


async def test_offload_when_sets_the_event_time_a_dated_search_prefers(env: McpEnv) -> None:
    async with env.connect() as s:
        may = await put(s, "we cooked pasta on the stove", when="2023-05-08", kind="a")
        await put(s, "we cooked pasta on the grill", when="2023-08-30T10:00:00Z", kind="b")
        plain = await put(s, "no date was given here")
        assert "when must be a date" in await s.fail("offload", content="x", when="soon")
        assert "when must be a date" in await s.fail("offload", content="x", when="2023-13-40")
        found = await s.ok("search", queries=["pasta we cooked in May 2023"])
    assert env.store.resolve(may).event_time == 1_683_504_000.0
    assert env.store.resolve(plain).event_time is None
    assert found.index(may) < found.index("grill")
    assert f"{may} L1-1 [2023-05-08] |" in found


async def test_offload_compress_without_a_model_stores_raw_and_says_so(env: McpEnv) -> None:
    async with env.connect() as s:
        text = await s.ok("offload", content="long text " * 100, compress=True)
    assert "compress: no local model configured, stored raw" in text
    assert not env.store.resolve(ref_of(text)).compressed


async def test_offload_compress_with_a_failing_model_stores_raw_and_says_why(env: McpEnv) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    overrides = {"local_model.base_url": url, "local_model.retries": 0, "local_model.timeout": 5}
    async with env.connect(**overrides) as s:
        text = await s.ok("offload", content="long text " * 100, compress=True)
    assert "compress: the local model failed" in text and "stored raw" in text


async def test_a_word_only_in_a_compressed_entrys_original_finds_it_and_says_how_to_read_it(
    env: McpEnv,
) -> None:
    original = "".join(f"step {i}: copy the rows of table {i}\n" for i in range(1, 60))
    original += "step 60: the quokka table goes last\n"
    with scripted_model() as (answers, url):
        answers.content = "a 60-step copy plan, tables in order"
        async with env.connect(**{"local_model.base_url": url, "local_model.retries": 0}) as s:
            stored = await s.ok("offload", content=original, compress=True)
            ref = ref_of(stored)
            found = await s.ok("search", queries=["quokka"])
            jump = re.search(r"\[open a hit: (read\(.*\)); summary", found)
            read = await s.ok("read", ref=ref, offset=58, original=True)
            lossy = await s.ok("read", ref=ref)
    assert "(lossy)" in stored and env.store.resolve(ref).compressed
    hit = found.splitlines()[1]
    assert hit.startswith(f"  {ref} L") and "found in the original" in hit and "quokka" in hit
    assert jump and "original=true" in jump.group(1)
    assert "(the original)" in read.splitlines()[0] and "step 60: the quokka table" in read
    assert "quokka" not in lossy and "lossy" in lossy.splitlines()[0]


async def test_offload_path_reads_the_file_server_side_and_returns_only_a_pointer(
    env: McpEnv,
) -> None:
    secret = "SECRET_TOKEN_CONTENT_" * 20
    env.write("src/app.py", f"def main():\n    return '{secret}'\n")
    async with env.connect() as s:
        text = await s.ok("offload_path", path="src/app.py", tags=["code"])
        again = await s.ok("offload_path", path=str(env.project / "src" / "app.py"))
    assert secret not in text
    assert text.startswith("stored: ") and "| src/app.py [code] | file |" in text
    assert again.startswith("already stored: ")
    e = env.store.resolve(ref_of(text))
    assert e.source == str((env.project / "src" / "app.py").resolve())


async def test_a_big_file_stored_by_offload_path_reads_back_whole_and_counts_its_bytes(
    env: McpEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index, "FREEZE_CHARS", 1000)  # a "big" body without a big file
    body = "".join(f"étape {i}: parseConfig lit {i * 7}\n" for i in range(500))
    env.write("big.log", body)
    async with env.connect() as s:
        text = await s.ok("offload_path", path="big.log")
        stats = await s.ok("stats")
    e = env.store.resolve(ref_of(text))
    assert env.store.body(e) == body and e.size == len(body.encode())
    assert f"offloaded: 1 new ({len(body.encode())} bytes)" in stats
    assert [h.entry.id for h in env.store.search("parseConfig 3479")] == [e.id]


async def test_a_big_offload_path_sends_progress_that_grows_to_the_end_of_the_write(
    env: McpEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index, "FREEZE_CHARS", 1000)  # a "big" body without a big file
    body = "".join(f"line {i}: parseConfig read {i * 7}\n" for i in range(2000))
    env.write("big.log", body)
    heard: list[tuple[float, float | None, str | None]] = []

    async def hear(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))

    async with env.connect() as s:
        res = await s.client.call_tool("offload_path", {"path": "big.log"}, progress_callback=hear)
        assert not res.is_error
        await s.ok("peek")  # a later request: the notifications sent before the answer are in
    progress = [p for p, _, _ in heard]
    assert heard and progress == sorted(set(progress))  # each one larger than the last
    assert heard[-1][0] == heard[-1][1]  # the last is the end of the write
    messages = [m or "" for _, _, m in heard]
    assert messages[0].startswith("analysing ") and messages[-1].startswith("writing 100%")
    assert all(" MB" in m for m in messages)


async def test_a_big_offload_path_without_a_progress_callback_stores_the_file_whole(
    env: McpEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index, "FREEZE_CHARS", 1000)
    env.write("big.log", "x y z\n" * 2000)
    async with env.connect() as s:
        text = await s.ok("offload_path", path="big.log")
    assert env.store.body(env.store.resolve(ref_of(text))) == "x y z\n" * 2000


async def test_offload_path_errors_for_missing_directory_and_bad_paths(env: McpEnv) -> None:
    (env.project / "dir").mkdir()
    async with env.connect() as s:
        missing = await s.fail("offload_path", path="nope.txt")
        assert "no such file" in missing and "check the path" in missing
        assert "not a regular file" in await s.fail("offload_path", path="dir")
        assert "path is required" in await s.fail("offload_path")
        assert "NUL byte" in await s.fail("offload_path", path="a\x00b")


async def test_sectioned_offload_makes_one_entry_per_section_and_replaces_on_rerun(
    env: McpEnv,
) -> None:
    env.write("README.md", "intro line\n\n# Title\n\n## Install\npip it\n## Use\nrun it\n")
    async with env.connect() as s:
        first = await s.ok("offload_path_sectioned", path="README.md", tags=["docs"])
        lines = first.splitlines()
        assert lines[0] == "4 sections of README.md: 4 new, 0 unchanged, 0 old removed"
        assert lines[1].endswith("| L1-2 | (preamble) | ~3") or "(preamble)" in lines[1]
        assert "| L5-6 | Install |" in first and "| L7-8 | Use |" in first
        env.write("README.md", "intro line\n\n# Title\n\n## Install\npip it\n## Use\nrun it now\n")
        second = await s.ok("offload_path_sectioned", path="README.md")
        assert second.splitlines()[0] == (
            "4 sections of README.md: 1 new, 3 unchanged, 1 old removed"
        )
        topics = [e.topic for e in env.store.entries()]
        assert "README.md § Title > Use" in topics and len(topics) == 4
        deeper = await s.ok("offload_path_sectioned", path="README.md", level=1)
        assert deeper.splitlines()[0].startswith("2 sections of README.md")
        assert "level must be an integer in 1-6" in await s.fail(
            "offload_path_sectioned", path="README.md", level=9
        )


async def test_a_file_of_many_sections_gets_a_short_answer_and_one_of_too_many_is_refused(
    env: McpEnv,
) -> None:
    # 5,000 one-line sections (93 KB) answered 252 KB, a line each; 8 MB of them took hours
    listed = LISTED_SECTIONS + 50
    env.write("many.md", "".join(f"## s{i}\nbody {i}\n" for i in range(listed)))
    env.write("too.md", "".join(f"## s{i}\nx\n" for i in range(MAX_SECTIONS + 1)))
    async with env.connect() as s:
        text = await s.ok("offload_path_sectioned", path="many.md")
        rows = text.splitlines()
        assert rows[0] == f"{listed} sections of many.md: {listed} new, 0 unchanged, 0 old removed"
        assert len(rows) == 1 + LISTED_SECTIONS + 1
        assert rows[-1].startswith("[50 more sections; list them: search(source=")
        err = await s.fail("offload_path_sectioned", path="too.md")
        assert f"has {MAX_SECTIONS + 1} sections at level 2, over the {MAX_SECTIONS}" in err
    assert env.store.count(Filters(source_prefix=str(env.project.resolve() / "too.md"))) == 0


async def test_pin_and_unpin_toggle_the_flag_and_unknown_refs_fail(env: McpEnv) -> None:
    async with env.connect() as s:
        ref = await put(s, "keep me", salience=0.2)
        assert (await s.ok("pin", ref=ref)).startswith(f"pinned: {ref} | keep me | text | 1.00 ")
        assert env.store.resolve(ref).pinned
        assert "| cold |" in await s.ok("unpin", ref=ref)
        assert not env.store.resolve(ref).pinned
        assert "no entry matches" in await s.fail("pin", ref="ghost-label")
        assert "no entry matches" in await s.fail("unpin", ref="ghost-label")


async def test_reap_previews_with_dry_run_spares_pins_and_needs_a_criterion(env: McpEnv) -> None:
    async with env.connect() as s:
        low = await put(s, "low value", salience=0.1)
        pinned = await put(s, "pinned low", salience=0.1, pin=True)
        high = await put(s, "high value", salience=0.9)
        preview = await s.ok("reap", max_salience=0.5, dry_run=True)
        assert preview.startswith("would forget 1 entry") and low in preview
        assert env.store.resolve(low)
        done = await s.ok("reap", max_salience=0.5)
        assert done.startswith("forgot 1 entry") and pinned not in done
        assert "is gone" in await s.fail("recall", ref=low)
        assert await s.ok("recall", ref=high)
        assert "give older_than" in await s.fail("reap", dry_run=True)
        assert "older_than must look like" in await s.fail("reap", older_than="soon")
        assert "status must be one of cold, hot, any" in await s.fail(
            "reap", older_than="1d", status="x"
        )
        nothing = await s.ok("reap", older_than="7d", status="any")
        assert nothing.startswith("forgot 0 entries")


async def test_forget_leaves_a_tombstone_that_answers_why(env: McpEnv) -> None:
    async with env.connect() as s:
        ref = await put(s, "to be forgotten")
        assert (await s.ok("forget", ref=ref)).startswith(f"forgot {ref}")
        err = await s.fail("read", ref=ref)
        assert "is gone: forgotten via the MCP forget tool" in err
        assert "offload it again" in err
        assert "is gone" in await s.fail("forget", ref=ref)


async def test_snapshot_and_restore_carry_working_state_to_a_new_session(env: McpEnv) -> None:
    async with env.connect() as s:
        ref = await put(s, "design doc", topic="design")
        gone = await put(s, "scratch", topic="scratch")
        saved = await s.ok(
            "snapshot",
            task="ship the parser",
            decisions=["use TOML", "no YAML"],
            threads=["error messages"],
            refs=[ref, gone],
        )
        assert saved.startswith('saved snapshot "default": 2 decisions, 1 open threads, 2 refs')
        await s.ok("forget", ref=gone)
        await s.ok("snapshot", name="side", task="older side task")
    async with env.connect() as fresh:
        text = await fresh.ok("restore", name="default")
        latest = await fresh.ok("restore")
    assert text.splitlines()[1] == "task: ship the parser"
    assert "decisions:\n- use TOML\n- no YAML\nopen threads:\n- error messages" in text
    assert f"{ref} | design | text" in text
    assert f"{gone}: '{gone}' is gone" in text
    assert latest.startswith('snapshot "side"')


async def test_snapshot_and_restore_errors_say_what_to_do(env: McpEnv) -> None:
    async with env.connect() as s:
        err = await s.fail("restore")
        assert "none saved in this scope" in err and "snapshot(task=" in err
        assert "task is required" in await s.fail("snapshot")
        assert "no entry matches" in await s.fail("snapshot", task="t", refs=["ghost-label"])
        assert "name must be 1-64 letters" in await s.fail("snapshot", task="t", name="a b/c")
        await s.ok("snapshot", task="t", name="one")
        assert "saved: one" in await s.fail("restore", name="two")
    async with env.connect(**{"mcp.scope": "another"}) as other:
        assert "none saved in this scope" in await other.fail("restore")


async def test_restore_reads_only_snapshots_shaped_as_snapshot_writes_them(env: McpEnv) -> None:
    # snapshot state may come from an imported archive: any JSON under any key
    async with env.connect() as s:
        await s.ok("snapshot", task="the real task", name="real")
        ns = f"mcp.snapshot:{s.ctx.scope}"
        env.store.put_state(ns, "text", "just a string")
        env.store.put_state(ns, "when", {"saved": "yesterday", "task": "x"})
        env.store.put_state(ns, "far", {"saved": 1e300, "task": "x"})
        env.store.put_state(ns, "odd", {"saved": 1, "task": 7, "decisions": "abc", "refs": 5})
        latest = await s.ok("restore")
        assert latest.startswith('snapshot "real"') and "task: the real task" in latest
        odd = await s.ok("restore", name="odd")
        assert odd.splitlines()[1:] == ["task: "]
        for name in ("text", "when", "far"):
            err = await s.fail("restore", name=name)
            assert f"no snapshot '{name}'" in err and "saved: odd, real" in err
