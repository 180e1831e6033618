"""The dashboard in a real headless browser (Debian's chromium, driven by Playwright), served
by a real ``offload serve`` on loopback with real proxy traffic from a scripted upstream.

Screenshots land in the test's tmp dir (kept by pytest; CI collects them as artifacts).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from offload.config import load_settings
from offload.store.store import Store
from realparts import require
from serving import TITLE, ScriptedUpstream, ServeProcess, conversation

pytestmark = pytest.mark.slow

TURNS = 10
RUNBOOK = "Runbook: restarting the quokka parser"
# (name, viewport): a desktop and two phones (the narrowest screens people browse on)
WIDTHS = (("desktop", 1280, 900), ("phone", 390, 844), ("small-phone", 360, 740))
CHROMIUM = os.environ.get("OFFLOAD_TEST_CHROMIUM", "/usr/bin/chromium")
# as NOTES-ENV.md says: without the background-networking flags chromium keeps dialling out
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require(
        shutil.which(CHROMIUM) is not None, f"no chromium at {CHROMIUM} (apt-get install chromium)"
    )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        require(False, "playwright is not installed (pip install -e '.[test]')")
        raise
    with sync_playwright() as pw:
        # our own chromium, never a downloaded one; Playwright gives it a fresh empty profile
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    upstream = ScriptedUpstream(prefix_cache=True).start()
    serve = ServeProcess(tmp_path_factory.mktemp("serve"), "--upstream", upstream.url)
    seed(serve.home)
    try:
        serve.start()
        with httpx.Client(base_url=serve.url, timeout=30) as client:
            for messages in conversation(TURNS):
                resp = client.post(
                    "/v1/chat/completions", json={"model": "scripted-model", "messages": messages}
                )
                assert resp.status_code == 200, resp.text
        yield serve
    finally:
        serve.stop()
        upstream.stop()


SERVED_SCOPE = "serve-test"  # the scope tests/serving.py serves (the browser lists it)


def seed(home: Path) -> None:
    """Entries of two more kinds, one pinned, besides what the proxy will store."""
    with Store.open(load_settings(env={"OFFLOAD_HOME": str(home)})) as store:
        store.put(
            "kill the parser, then start it with --resume\n",
            kind="note",
            topic=RUNBOOK,
            pinned=True,
            scope=SERVED_SCOPE,
        )
        for i in range(3):
            store.put(
                f"decision {i}: keep the quokka parser's offsets\n",
                kind="decision",
                scope=SERVED_SCOPE,
            )


def server_points(page: str, plot_id: str, series: str) -> str:
    """The ``points`` of one polyline of a plot in the page as the server rendered it."""
    plot = re.search(rf'<svg[^>]*id="{plot_id}".*?</svg>', page, re.S)
    assert plot, plot_id
    line = re.search(rf'<polyline[^>]*data-series="{series}"[^>]*points="([^"]*)"', plot.group(0))
    assert line, (plot_id, series)
    return line.group(1)


def same_points(a: str, b: str) -> bool:
    """Two SVG point lists that agree to the rounding of one decimal."""
    xs = [float(v) for p in a.split() for v in p.split(",")]
    ys = [float(v) for p in b.split() for v in p.split(",")]
    return len(xs) == len(ys) > 0 and all(abs(x - y) <= 0.11 for x, y in zip(xs, ys, strict=True))


def test_the_page_renders_and_its_plots_draw_from_api_stats(
    browser: Any, served: ServeProcess, tmp_path: Path
) -> None:
    stats = served.stats()
    server_page = httpx.get(served.url + "/", timeout=10).text  # as rendered, before script
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    page.goto(served.url + "/")
    # the script redraws every plot from /api/stats: data-drawn turns from server to js
    page.wait_for_selector('#savings-plot[data-drawn="js"]', timeout=15_000)
    page.wait_for_selector('#occupancy-0[data-drawn="js"]', timeout=15_000)
    saved = page.locator('#savings-plot polyline[data-series="saved"]')
    assert saved.get_attribute("data-points") == str(len(stats["proxy"]["savings"])) == str(TURNS)
    points = saved.get_attribute("points") or ""
    assert len(points.split()) == TURNS
    # the script draws what the server drew (plots.py and dashboard.js agree)
    assert same_points(points, server_points(server_page, "savings-plot", "saved"))
    wire = page.locator('#occupancy-0 polyline[data-series="wire"]').get_attribute("points")
    assert same_points(wire or "", server_points(server_page, "occupancy-0", "wire"))
    for level in ("n_ctx", "ceiling", "high", "target"):
        assert page.locator(f'#occupancy-0 line[data-level="{level}"]').count() == 1, level
    assert page.locator('#occupancy-0 polyline[data-series="wire"]').get_attribute(
        "data-points"
    ) == str(TURNS)
    assert page.locator('#cache-0 rect[data-series="cache"]').count() == TURNS
    assert TITLE in page.locator("#sessions").inner_text()
    assert page.locator("#recent tr").count() == TURNS
    assert "updated" in page.locator("#at").inner_text()
    page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)

    # a recent request opens to what was stubbed or paged
    row = page.locator("#recent details", has=page.locator("li a[data-ref]")).first
    row.locator("summary").click()
    assert "stored as ctx:sha256:" in row.locator("ul.stubs").inner_text()
    page.close()


def test_search_shows_hits_and_opens_an_entry_as_text(
    browser: Any, served: ServeProcess, tmp_path: Path
) -> None:
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    page.goto(served.url + "/")
    page.wait_for_selector('#savings-plot[data-drawn="js"]', timeout=15_000)
    page.fill("#q", "wombat2")
    page.press("#q", "Enter")
    page.wait_for_selector("#hits li", timeout=15_000)
    assert re.match(r"(1 hit|\d+ hits) for", page.locator("#search-note").inner_text())
    assert "wombat2" in page.locator("#hits li pre").first.inner_text()
    page.locator("#hits li a[data-ref]").first.click()
    page.wait_for_function(
        "document.getElementById('entry-text').textContent.includes('wombat2')", timeout=15_000
    )
    text = page.locator("#entry-text")
    assert "<b>bold</b>" in text.inner_text()  # turn 2's tool output, markup as text
    assert text.locator("img, b").count() == 0  # stored markup never became elements
    assert page.title() == "offload"  # the onerror handler never ran
    page.screenshot(path=str(tmp_path / "search.png"), full_page=True)
    page.close()


def test_without_script_the_page_still_shows_the_plots_and_searches(
    browser: Any, served: ServeProcess, tmp_path: Path
) -> None:
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(served.url + "/")
    plot = page.locator("#savings-plot")
    assert plot.get_attribute("data-drawn") == "server"
    assert plot.locator("polyline").get_attribute("data-points") == str(TURNS)
    page.fill("#q", "wombat2")
    page.press("#q", "Enter")  # a plain GET form: /?q=wombat2
    page.wait_for_selector("#hits li", timeout=15_000)
    assert "wombat2" in page.url
    page.screenshot(path=str(tmp_path / "no-script.png"), full_page=True)
    context.close()


def test_the_page_follows_the_browsers_light_or_dark_preference(
    browser: Any, served: ServeProcess, tmp_path: Path
) -> None:
    backgrounds = {}
    for scheme in ("light", "dark"):
        context = browser.new_context(color_scheme=scheme, viewport={"width": 1300, "height": 900})
        page = context.new_page()
        page.goto(served.url + "/")
        page.wait_for_selector('#savings-plot[data-drawn="js"]', timeout=15_000)
        backgrounds[scheme] = page.evaluate("getComputedStyle(document.body).backgroundColor")
        page.screenshot(path=str(tmp_path / f"dashboard-{scheme}.png"))
        context.close()
    assert backgrounds["light"] == "rgb(247, 248, 250)"
    assert backgrounds["dark"] == "rgb(20, 23, 27)"


def test_the_every_scope_box_reaches_another_scopes_entry_the_default_only_counts(
    browser: Any, served: ServeProcess
) -> None:
    settings = load_settings(env={"OFFLOAD_HOME": str(served.home)})
    with Store.open(settings) as store:
        store.put("the okapi inventory of another team", scope="other-team", topic="okapi")
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    page.goto(served.url + "/")
    page.wait_for_selector('#savings-plot[data-drawn="js"]', timeout=15_000)
    page.fill("#q", "okapi inventory")
    page.press("#q", "Enter")
    page.wait_for_function(
        "document.getElementById('search-note').textContent.includes('other scopes')",
        timeout=15_000,
    )
    assert page.locator("#hits li").count() == 0
    assert "1 more in other scopes" in page.locator("#search-note").inner_text()
    page.check("#all-scopes")
    page.press("#q", "Enter")
    page.wait_for_selector("#hits li", timeout=15_000)
    assert "in every scope" in page.locator("#search-note").inner_text()
    page.locator("#hits li a[data-ref]").first.click()
    page.wait_for_function(
        "document.getElementById('entry-text').textContent.includes('okapi inventory')",
        timeout=15_000,
    )


def drawn(page: Any, url: str) -> None:
    """Load ``url`` and wait until the script has drawn the figures and the store view."""
    page.goto(url)
    page.wait_for_selector('#savings-plot[data-drawn="js"]', timeout=15_000)
    page.wait_for_function("!document.getElementById('search-note').textContent.endsWith('\u2026')")


def overflow(page: Any) -> int:
    """How far the page runs past the right edge of the screen (0 when it fits)."""
    return int(page.evaluate("document.documentElement.scrollWidth - window.innerWidth"))


def test_home_search_and_entry_views_fit_desktop_and_phone_screens(
    browser: Any, served: ServeProcess, tmp_path: Path
) -> None:
    ref = served.stats()["proxy"]["recent"][0]["stubs"][0].rsplit("stored as ", 1)[1].split("]")[0]
    views = {
        "home": ("/", "#hits li a[data-ref]"),
        "search": ("/?q=wombat2#store", "#hits li pre"),
        "entry": (f"/?entry={quote(ref, safe='')}#store", "#entry-text"),
    }
    for name, width, height in WIDTHS:
        context = browser.new_context(viewport={"width": width, "height": height})
        page = context.new_page()
        for view, (path, shown) in views.items():
            drawn(page, served.url + path)
            assert page.locator(shown).first.is_visible(), (view, name)
            page.screenshot(path=str(tmp_path / f"{view}-{name}.png"), full_page=True)
            assert overflow(page) <= 0, (view, name, overflow(page))
        # the tables too wide for a phone reflow: every figure of a row is on the screen
        drawn(page, served.url + "/")
        for cell in ("#sessions td[data-label='last seen']", "#recent td[data-label='saved']"):
            box = page.locator(cell).first.bounding_box()
            assert box and box["x"] + box["width"] <= width, (cell, name, box)
        context.close()


def test_a_search_has_a_url_and_back_from_an_opened_entry_returns_to_its_hits(
    browser: Any, served: ServeProcess, tmp_path: Path
) -> None:
    page = browser.new_page(viewport={"width": 390, "height": 844})
    drawn(page, served.url + "/?q=wombat2")  # a deep link shows its hits
    assert "wombat2" in page.locator("#hits li pre").first.inner_text()
    assert page.input_value("#q") == "wombat2"
    page.locator("#hits li a[data-ref]").first.click()
    page.wait_for_function(
        "document.getElementById('entry-text').textContent.includes('wombat2')", timeout=15_000
    )
    assert "?entry=ctx%3Asha256%3A" in page.url
    assert page.locator("#hits").is_hidden()
    page.screenshot(path=str(tmp_path / "entry-opened.png"), full_page=True)
    page.go_back()
    page.wait_for_selector("#hits li pre", state="visible", timeout=15_000)
    assert page.url.endswith("/?q=wombat2")
    assert page.locator("#entry").is_hidden()
    # a search typed in the box gets its own URL too, and Back returns to the hits before it
    page.fill("#q", "wombat3")
    page.press("#q", "Enter")
    page.wait_for_function("location.search === '?q=wombat3'", timeout=15_000)
    page.wait_for_function(
        "document.getElementById('search-note').textContent.includes('wombat3')", timeout=15_000
    )
    page.go_back()
    page.wait_for_function(
        "document.getElementById('search-note').textContent.includes('wombat2')", timeout=15_000
    )
    assert page.input_value("#q") == "wombat2"
    page.close()


def test_without_a_query_the_store_browses_by_kind_and_pinned_with_urls(
    browser: Any, served: ServeProcess, tmp_path: Path
) -> None:
    page = browser.new_page(viewport={"width": 390, "height": 844})
    drawn(page, served.url + "/")
    assert page.locator("#hits li").first.inner_text().startswith(RUNBOOK)  # pinned first
    page.locator("#filters a", has_text="pinned").click()
    page.wait_for_function("location.search === '?pinned=1'", timeout=15_000)
    page.wait_for_function("document.querySelectorAll('#hits li').length === 1", timeout=15_000)
    assert RUNBOOK in page.locator("#hits").inner_text()
    page.locator("#filters a", has_text="decision").click()
    page.wait_for_function("location.search === '?kind=decision'", timeout=15_000)
    page.wait_for_function("document.querySelectorAll('#hits li').length === 3", timeout=15_000)
    assert page.locator("#filters a[aria-current]").inner_text().startswith("decision")
    page.screenshot(path=str(tmp_path / "browse-decision.png"), full_page=True)
    page.go_back()
    page.wait_for_function("document.querySelectorAll('#hits li').length === 1", timeout=15_000)
    assert page.locator("#filters a[aria-current]").inner_text().startswith("pinned")
    page.close()


def test_the_levels_are_words_first_and_say_small_n_ctx_trims_are_expected(
    browser: Any, served: ServeProcess
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    drawn(page, served.url + "/")
    levels = page.locator("#levels").inner_text()
    assert "windowing: " in levels and "cache reuse: " in levels and "errors: none" in levels
    assert "emergency" not in page.locator("#recent").inner_text()
    page.close()
