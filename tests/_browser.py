"""Headless Chromium for the browser tests: Debian's `chromium` driven by Playwright (its own browser download is
not used); the tests are skipped with the reason where either is missing."""

import os
import shutil

import pytest

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # the dev extra brings it
    sync_playwright = None

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
needs_browser = pytest.mark.skipif(
    CHROMIUM is None or sync_playwright is None,
    reason="needs a browser: `apt-get install chromium` (Debian's chromium) and `pip install playwright` "
           "(in the dev extra); Playwright's own browser download is not used")


def launch(playwright):
    """A headless Chromium browser from ``sync_playwright()``'s context."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
