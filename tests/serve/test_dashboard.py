"""The dashboard page and its JSON endpoints, in process over the real host app, with real
proxy traffic through a scripted upstream on a loopback port."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from offload.config import load_settings
from offload.serve.host import Served, build
from offload.serve.lifespan import asgi_lifespan
from offload.store.backend import Sql
from offload.store.store import Store
from realparts import free_port
from serving import MARKUP, TITLE, ScriptedUpstream, conversation

TURNS = 8


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    server = ScriptedUpstream(prefix_cache=True).start()
    try:
        yield server
    finally:
        server.stop()


def served_app(tmp: Path, upstream_url: str, **flags: Any) -> Served:
    settings = load_settings(
        env={"OFFLOAD_HOME": str(tmp / "home")},
        flags={"proxy.upstream": upstream_url, "mcp.scope": "dash-test", **flags},
    )
    return build(settings, Store.open(settings), cwd=tmp)


@pytest.fixture
async def served(tmp_path: Path, upstream: ScriptedUpstream) -> AsyncIterator[Served]:
    app = served_app(tmp_path, upstream.url)
    async with asgi_lifespan(app.app, "serve"):  # closes the store at the end
        yield app


@pytest.fixture
async def client(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=served.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8900") as c:
        yield c


async def converse_in_process(client: httpx.AsyncClient, turns: int) -> None:
    """:func:`serving.conversation` through the in-process app."""
    for messages in conversation(turns):
        resp = await client.post(
            "/v1/chat/completions", json={"model": "scripted-model", "messages": messages}
        )
        assert resp.status_code == 200, resp.text


@pytest.mark.anyio
async def test_the_page_plots_savings_occupancy_and_cache_from_the_proxys_turns(
    client: httpx.AsyncClient,
) -> None:
    await converse_in_process(client, TURNS)
    stats = (await client.get("/api/stats")).json()
    proxy = stats["proxy"]
    assert len(proxy["savings"]) == TURNS
    (session,) = proxy["sessions"].values()
    assert session["title"] == TITLE
    assert [t["n_ctx"] for t in session["turns"]] == [4096] * TURNS
    assert proxy["window"] == {"high_water": 0.8, "target": 0.2, "ceiling": 0.85}

    page = (await client.get("/")).text
    savings = re.search(r'<svg[^>]*id="savings-plot".*?</svg>', page, re.S)
    assert savings and f'data-series="saved" data-points="{TURNS}"' in savings.group(0)
    occupancy = re.search(r'<svg[^>]*id="occupancy-0".*?</svg>', page, re.S)
    assert occupancy
    for level in ("n_ctx", "ceiling", "high", "target"):
        assert f'data-level="{level}"' in occupancy.group(0), level
    assert f'data-series="wire" data-points="{TURNS}"' in occupancy.group(0)
    cache = re.search(r'<svg[^>]*id="cache-0".*?</svg>', page, re.S)
    assert cache and cache.group(0).count('data-series="cache"') == TURNS
    assert TITLE in page  # sessions are named by their first request, not bare hex


@pytest.mark.anyio
async def test_a_recent_request_opens_to_the_stubs_it_sent_with_links_to_the_store(
    client: httpx.AsyncClient,
) -> None:
    await converse_in_process(client, TURNS)
    recent = (await client.get("/api/stats")).json()["proxy"]["recent"]
    assert len(recent) == TURNS
    stubbed = [r for r in recent if r["stubs"]]
    assert stubbed, "the conversation should have been stubbed or paged"
    line = stubbed[0]["stubs"][0]
    ref = line.rpartition("stored as ")[2].rstrip("]")
    page = (await client.get("/")).text
    assert "<details" in page and "what was stubbed or paged" in page
    assert f'data-ref="{ref}"' in page
    opened = await client.get("/api/entry", params={"ref": ref})
    assert opened.status_code == 200
    assert opened.json()["entry"]["ref"] == ref


@pytest.mark.anyio
async def test_the_store_browser_finds_what_the_proxy_paged_out(
    client: httpx.AsyncClient,
) -> None:
    await converse_in_process(client, TURNS)
    found = await client.get("/api/search", params={"q": "wombat2"})
    assert found.status_code == 200
    hits = found.json()["hits"]
    assert hits and all(set(h) >= {"ref", "topic", "snippet", "match_line"} for h in hits)
    assert "wombat2" in hits[0]["snippet"]
    entry = (await client.get("/api/entry", params={"ref": hits[0]["ref"]})).json()
    assert "turn 2 wombat2 quokka-parser line 0" in entry["text"]


@pytest.mark.anyio
async def test_stored_markup_is_shown_as_text_in_hits_and_in_the_opened_entry(
    served: Served, client: httpx.AsyncClient
) -> None:
    put = served.store.put(
        f"platypus notes\n{MARKUP}\nend", topic=f"platypus {MARKUP}", scope="dash-test"
    )
    ref = put.entry.ref
    found = (await client.get("/api/search", params={"q": "platypus"})).json()["hits"]
    assert [h["ref"] for h in found] == [ref]
    assert MARKUP in (await client.get("/api/entry", params={"ref": ref})).json()["text"]
    # the page without script: /?q= lists the hits, /?entry= shows the text, escaped
    page = (await client.get("/", params={"q": "platypus", "entry": ref})).text
    assert f'data-ref="{ref}"' in page
    text = re.search(r'<pre class="entry" id="entry-text">(.*?)</pre>', page, re.S)
    assert text and "platypus notes" in text.group(1)
    # escaped: no markup character left raw, and it reads back as exactly the stored text
    assert not set('<>"') & set(text.group(1))
    assert MARKUP in html.unescape(text.group(1))
    assert MARKUP not in page and "<b>bold" not in page


@pytest.mark.anyio
async def test_the_store_browser_answers_bad_input_with_a_clear_error(
    client: httpx.AsyncClient,
) -> None:
    empty = await client.get("/api/search", params={"q": "  "})
    assert empty.status_code == 400 and "query" in empty.json()["error"]
    huge = await client.get("/api/search", params={"q": "x" * 600})
    assert huge.status_code == 400
    missing = await client.get("/api/entry", params={"ref": "ctx:sha256:0123456789abcdef"})
    assert missing.status_code == 404 and missing.json()["error"]
    assert (await client.get("/api/entry")).status_code == 400
    page = await client.get("/", params={"entry": "ctx:sha256:0123456789abcdef"})
    assert page.status_code == 200 and 'id="entry-head">' in page.text


@pytest.mark.anyio
async def test_the_bearer_token_guards_the_store_browser_and_the_page_shows_no_stored_text(
    tmp_path: Path,
) -> None:
    served = served_app(
        tmp_path, f"http://127.0.0.1:{free_port()}", **{"proxy.bearer_token": "s3cret"}
    )
    served.store.put("the secret wombat notes", topic="wombat", scope="dash-test")
    async with asgi_lifespan(served.app, "serve"):
        transport = httpx.ASGITransport(app=served.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8900") as c:
            assert (await c.get("/api/search", params={"q": "wombat"})).status_code == 401
            assert (await c.get("/api/entry", params={"ref": "wombat"})).status_code == 401
            assert (await c.get("/api/entries")).status_code == 401
            page = await c.get("/", params={"q": "wombat"})
            assert page.status_code == 200 and "secret wombat" not in page.text
            auth = {"Authorization": "Bearer s3cret"}
            found = await c.get("/api/search", params={"q": "wombat"}, headers=auth)
            assert found.status_code == 200 and found.json()["hits"]


@pytest.mark.anyio
async def test_without_a_query_the_page_lists_entries_with_kind_and_pinned_links_escaped(
    served: Served, client: httpx.AsyncClient
) -> None:
    scope = served.mcp_ctx.scope  # the browser lists the served scope
    served.store.put(
        "the runbook\n", kind="note", topic=f"runbook {MARKUP}", pinned=True, scope=scope
    )
    # puts refuse such a kind now; a store written before that may still hold one
    marked = served.store.put("a marked-up kind\n", kind="k", scope=scope).entry
    served.store.conn.execute(
        Sql("UPDATE entries SET kind = '<i>k</i>' WHERE id = ?"), (marked.id,)
    )
    page = (await client.get("/")).text
    hits = re.search(r'<ol class="hits" id="hits">(.*?)</ol>', page, re.S)
    assert hits and hits.group(1).count("<li ") == 2
    assert "runbook &lt;img" in hits.group(1) and MARKUP not in page  # escaped
    filters = re.search(r'<p class="filters" id="filters">(.*?)</p>', page, re.S)
    assert filters and 'href="?pinned=1#store"' in filters.group(1)
    assert 'href="?kind=%3Ci%3Ek%3C%2Fi%3E#store"' in filters.group(1)  # quoted in the URL
    assert "&lt;i&gt;k&lt;/i&gt;" in filters.group(1) and "<i>k" not in page
    # the links' URLs render their views: one kind, pinned only
    one = (await client.get("/", params={"kind": "<i>k</i>"})).text
    assert "a marked-up kind" not in one and "1\u20131 of 1" in one
    pinned = (await client.get("/", params={"pinned": "1"})).text
    assert "pinned entries 1\u20131 of 1" in pinned
    bad = await client.get("/", params={"page": "0"})
    assert bad.status_code == 200 and "page is a whole number" in bad.text


@pytest.mark.anyio
async def test_api_entries_answers_a_bounded_page_or_a_clear_error(
    served: Served, client: httpx.AsyncClient
) -> None:
    for i in range(25):
        served.store.put(f"line {i}\n", kind="log", scope=served.mcp_ctx.scope)
    first = (await client.get("/api/entries", params={"kind": "log"})).json()
    assert len(first["entries"]) == first["page_size"] == 20 and first["total"] == 25
    assert set(first["entries"][0]) >= {"ref", "kind", "topic", "tokens", "pinned"}
    last = (await client.get("/api/entries", params={"kind": "log", "page": "2"})).json()
    assert len(last["entries"]) == 5
    bad = await client.get("/api/entries", params={"pinned": "maybe"})
    assert bad.status_code == 400 and "pinned" in bad.json()["error"]


def stats_with(**counters: int) -> dict[str, Any]:
    base = {"requests": 0, "errors": 0, "windowed": 0, "emergency": 0}
    live = {"counters": {**base, **counters}, "cache_reuse_ratio": 0.9}
    return {"proxy": {"live": live, "upstream": {"n_ctx": 4096}}}


def test_the_levels_say_in_words_first_that_paging_at_the_ceiling_is_by_design() -> None:
    from offload.serve.dashboard import levels

    (window, cache, errors) = levels(stats_with(requests=10, windowed=4, emergency=4))
    assert window["cls"] == "ok" and window["word"] == "at the ceiling, as designed"
    assert "4,096" in window["text"] and "nothing is lost" in window["text"]
    # words before numbers: the figures close the sentence
    assert window["text"].index("4 of 10") > window["text"].index("Not a worry")
    assert (cache["cls"], cache["word"]) == ("ok", "good")
    assert (errors["cls"], errors["word"]) == ("ok", "none")
    normal = levels(stats_with(requests=10, windowed=2))[0]
    assert normal["word"] == "normal" and "one bite" in normal["text"]
    assert levels(stats_with(requests=10))[0]["word"] == "not needed yet"
    failing = levels(stats_with(requests=10, errors=3))[2]
    assert failing["cls"] == "bad" and failing["word"] == "3 of 10 requests"
    assert levels(stats_with())[0]["word"] == "no requests yet"
    assert levels(None)[0]["word"] == "no requests yet"


@pytest.mark.parametrize(
    ("ratio", "requests", "word"),
    [(0.9, 10, "good"), (0.5, 10, "fair"), (0.1, 10, "low"), (0.0, 1, "too early to judge")],
)
def test_cache_reuse_is_judged_in_a_word(ratio: float, requests: int, word: str) -> None:
    from offload.serve.dashboard import levels

    stats = stats_with(requests=requests)
    stats["proxy"]["live"]["cache_reuse_ratio"] = ratio
    assert levels(stats)[1]["word"] == word


def test_a_recent_request_paged_at_the_ceiling_is_not_called_an_emergency() -> None:
    from offload.serve.dashboard import render_dashboard

    paged = {"session": "s1", "at": 1.0, "windowed": True, "emergency": True}
    stats = {**stats_with(requests=1, windowed=1, emergency=1)}
    stats["proxy"]["recent"] = [{**paged, "client_tokens": 900, "wire_tokens": 300}]
    page = render_dashboard(SURFACES, stats)
    recent = page.split('id="recent"')[1].split("</tbody>")[0]
    assert "paged out at the ceiling" in recent and "emergency" not in recent
    assert '<ul class="levels" id="levels"><li><b>windowing:</b>' in page


SURFACES = {
    "proxy": {"mounted": True, "url": "http://127.0.0.1:8900/v1", "upstream": "u"},
    "mcp": {"mounted": True, "url": "http://127.0.0.1:8900/mcp", "scope": "s"},
    "gateway": {"mounted": False, "why": "no gateway"},
    "metrics": {"mounted": True, "url": "http://127.0.0.1:8900/metrics"},
}


def test_the_page_carries_its_script_and_style_from_package_data() -> None:
    from offload.serve.dashboard import asset, render_dashboard

    page = render_dashboard(SURFACES, None)
    assert asset("dashboard.js") in page and asset("dashboard.css") in page
    assert "prefers-color-scheme:dark" in page  # light and dark
    assert 'id="savings-plot"' in page and "no proxied requests yet" in page
    for term in (
        "wire tokens",
        "prefix breaks",
        "cache reuse",
        "KV reuse",
        "high water, target, ceiling",
    ):
        assert f"<dt>{term}</dt>" in page, term
    assert not re.search(r"<link|<script[^>]*\ssrc=|<img", page)


@pytest.mark.anyio
async def test_the_page_names_the_served_scope_and_counts_it_beside_the_whole_store(
    served: Served, client: httpx.AsyncClient
) -> None:
    served.store.put("an entry of this scope", scope="dash-test")
    served.store.put("an entry of another scope", scope="elsewhere")
    store = (await client.get("/api/stats")).json()["store"]
    assert (store["scope"], store["scope_entries"], store["entries"]) == ("dash-test", 1, 2)
    page = (await client.get("/")).text
    assert "search and open look in scope <code>dash-test</code>" in page
    assert "entries in this scope" in page and "entries, every scope" in page


@pytest.mark.anyio
async def test_the_page_says_a_single_hit_in_the_singular(
    served: Served, client: httpx.AsyncClient
) -> None:
    served.store.put("the lone echidna", scope="dash-test")
    page = (await client.get("/", params={"q": "echidna"})).text
    assert "1 hit for \u201cechidna\u201d" in html.unescape(page) and "1 hits" not in page
