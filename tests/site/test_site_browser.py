"""The store's index in a real browser: headless Chromium (Debian's `chromium`) driven by Playwright.

Served by `firstdiv ui`'s server: typing into the filter box and following a workload link change the rows a
person sees, and a sweep's link opens its report page. Written by `firstdiv report --site` and opened from
file://: the page's own script hides the rows the filter excludes (its Content-Security-Policy lets that
script run and nothing else), and its relative links open the report pages. No console message, no page error.
"""


import pytest
from _browser import launch, needs_browser, sync_playwright
from _site_store import serving, shared_store

from firstdiv import site

pytestmark = needs_browser


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return shared_store(tmp_path_factory)


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    tab.problems = []
    tab.on("console", lambda m: tab.problems.append(f"{m.type}: {m.text}"))
    tab.on("pageerror", lambda e: tab.problems.append(f"pageerror: {e}"))
    yield tab
    tab.close()


def visible_rows(tab):
    """The sweep names a person sees in the index's table (hidden rows excluded)."""
    return [row.locator("a.sweep-link").inner_text() for row in tab.locator("tr.sweep").all() if row.is_visible()]


def test_served_index_filters_on_the_server_and_opens_report_pages(page, store):
    with serving(store) as server:
        page.goto(server.url)
        assert page.title() == f"Run store {store.name}" and page.evaluate("document.scripts.length") == 0
        assert visible_rows(page) == ["tiny-fail", "LR-high", "base"]

        page.fill("#f-name", "high")
        with page.expect_navigation():
            page.press("#f-name", "Enter")
        assert "name=high" in page.url and visible_rows(page) == ["LR-high"]
        assert page.input_value("#f-name") == "high"  # the form shows the filter in force

        with page.expect_navigation():
            page.click("text=clear")
        with page.expect_navigation():
            page.click("a.workload-link:text-is('builtin:mlp')")
        assert visible_rows(page) == ["LR-high", "base"]
        assert page.locator("#count").inner_text() == "2 sweeps match; showing 1–2"

        with page.expect_navigation():
            page.click("a.sweep-link:text-is('base')")
        assert page.title() == "Sweep base" and page.locator("h1").inner_text() == "Sweep base"
        assert page.locator("figure.plot svg").count() > 0  # the report page with its plots

        page.go_back()
        with page.expect_navigation():
            page.click("a.compare-link:text-is('vs base')")
        assert page.locator("h1").inner_text() == "Comparison base → LR-high on val_loss"
    assert page.problems == []


def test_static_site_filters_in_the_page_from_file_url(page, store, tmp_path):
    written = site.build_site(tmp_path / "site", store)
    index = (written.path / "index.html").as_uri()
    page.goto(index)
    assert visible_rows(page) == ["tiny-fail", "LR-high", "base"]
    assert page.locator("#count").inner_text() == "3 of 3 sweeps shown"

    page.fill("#f-name", "HIGH")  # typing filters as it goes: no submit, no server
    assert visible_rows(page) == ["LR-high"] and page.locator("#count").inner_text() == "1 of 3 sweeps shown"
    page.fill("#f-name", "")
    page.fill("#f-since", "2026-03-01")
    assert visible_rows(page) == ["tiny-fail"]
    incident = page.locator("tr.incident").first
    opened = incident.get_attribute("data-created")  # the day it was recorded: today
    assert incident.is_visible() == (opened >= "2026-03-01")
    page.fill("#f-since", "")
    page.select_option("#f-workload", "builtin:mlp")
    assert visible_rows(page) == ["LR-high", "base"]

    page.goto(index + "?workload=builtin%3Amlp&until=2026-01-31")  # a filter link works from file:// too
    assert visible_rows(page) == ["base"] and page.input_value("#f-until") == "2026-01-31"
    assert page.locator("tr.incident").first.is_visible() == (opened <= "2026-01-31")
    page.click("a.sweep-link:text-is('base')")
    page.wait_for_load_state()
    assert page.url.startswith("file://") and page.title() == "Sweep base"
    assert page.problems == []
