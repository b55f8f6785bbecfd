"""The HTML report in a real browser: headless Chromium (Debian's `chromium`) driven by Playwright.

Each page is opened from a file:// URL with no network: no console message or page error, no
request leaves the file, every plot renders at its declared size, the `<script>` config value shows
as text and runs nothing. A screenshot of each page is saved to $FIRSTDIV_ARTIFACTS (or the test's
tmp directory) for people to look at; its path is printed.
"""

import os
import re
from pathlib import Path

import pytest
from _browser import launch, needs_browser, sync_playwright
from test_html_report import EXPECTED_PLOTS, XSS, build_pages, build_store

pytestmark = needs_browser

PNG = b"\x89PNG\r\n\x1a\n"
#: Pages whose text must show the <script> value literally (a config value or a sweep name)
XSS_PAGES = ("sweep_xss", "measurement_changed", "incident")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("html-site")
    pages = build_pages(build_store(root))
    for name, page in pages.items():
        (root / f"{name}.html").write_text(page, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


@pytest.fixture
def artifacts(tmp_path):
    path = Path(os.environ.get("FIRSTDIV_ARTIFACTS") or tmp_path)
    path.mkdir(parents=True, exist_ok=True)
    return path


class Watched:
    """A page with everything it does recorded: console messages, page errors, dialogs, requests."""

    def __init__(self, browser):
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.console, self.errors, self.dialogs, self.requests = [], [], [], []
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("request", lambda r: self.requests.append(r.url))

    def assert_quiet(self, own_url=None):
        assert self.console == [] and self.errors == [] and self.dialogs == []
        assert [u for u in self.requests if u != own_url] == []  # nothing fetched: no fonts, images, scripts
        assert self.page.evaluate("document.scripts.length") == 0
        assert self.page.evaluate("typeof window.__pwned") == "undefined"


def _declared_px(svg_html):
    width, height = re.match(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"', svg_html).groups()
    return float(width) * 4 / 3, float(height) * 4 / 3  # CSS: 1pt = 4/3 px


def _check_plots(page, expected):
    svgs = page.query_selector_all("figure.plot svg")
    assert len(svgs) == expected
    for svg in svgs:
        box = svg.bounding_box()
        want_w, want_h = _declared_px(svg.evaluate("e => e.outerHTML"))
        assert box["width"] > 100 and box["height"] > 100
        assert abs(box["width"] - want_w) < 1.5 and abs(box["height"] - want_h) < 1.5, (box, want_w, want_h)
        # something was drawn: the data marks (paths and marker uses) are laid out with a real size
        drawn = svg.evaluate("e => Array.from(e.querySelectorAll('path, use')).filter(p => {"
                             "const b = p.getBBox(); return b.width > 0 || b.height > 0; }).length")
        assert drawn > 10


def _screenshot(page, artifacts, name):
    path = artifacts / f"firstdiv-report-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    data = path.read_bytes()
    assert data.startswith(PNG) and len(data) > 5_000
    print(f"screenshot: {path}")


@pytest.mark.parametrize("name", sorted(EXPECTED_PLOTS))
def test_page_renders_in_chromium_with_no_errors_and_no_network(browser, site, artifacts, name):
    w = Watched(browser)
    url = (site / f"{name}.html").as_uri()
    w.page.goto(url, wait_until="load")
    _check_plots(w.page, EXPECTED_PLOTS[name])
    text = w.page.inner_text("body")
    if name in XSS_PAGES:
        assert XSS in text  # shown as text
    assert w.page.query_selector("h1").inner_text().strip()
    _screenshot(w.page, artifacts, name)
    w.assert_quiet(own_url=url)
    w.page.close()


def test_first_divergence_row_is_highlighted_on_screen(browser, site):
    w = Watched(browser)
    w.page.goto((site / "report.html").as_uri())
    rows = w.page.query_selector_all("table.ledger tbody tr")
    colours = [r.evaluate("e => getComputedStyle(e.cells[1]).backgroundColor") for r in rows]
    marked = [i for i, c in enumerate(colours) if c != colours[0]]
    assert marked == [4]  # head.weight, row 5: the only row drawn differently
    assert "head.weight" in rows[4].inner_text()
    w.page.close()


def test_notebook_fragment_runs_nothing_even_without_the_page_policy(browser, site, artifacts):
    """_repr_html_ returns a fragment without the document's CSP: escaping alone must keep it inert."""
    from firstdiv.report import Divergence, Finding, Report, Status

    report = Report("four_structures", Status.FAIL, Divergence(XSS, "kind", "a", "b", hint='<img src=x onerror="window.__pwned=1">'),
                    (Finding(XSS, "check", Status.FAIL, f"message {XSS}", {"value": XSS}),), side_effects=XSS)
    w = Watched(browser)
    w.page.set_content(f"<!DOCTYPE html><html><body>{report._repr_html_()}</body></html>")
    w.page.wait_for_timeout(100)  # let an image error handler fire, if one had been created
    text = w.page.inner_text("body")
    assert text.count(XSS) >= 4 and '<img src=x onerror="window.__pwned=1">' in text
    _screenshot(w.page, artifacts, "fragment")
    w.assert_quiet()
    w.page.close()
