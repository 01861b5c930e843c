"""The report and the documentation in a real browser: headless Chromium (the system's, driven by
Playwright) opens the index and a model page of a small report at 1400 x 900 and checks what a
reader sees: every image decodes, no console errors, nothing fetched from the network, the index
table no wider than the window, the family filter works, and the screenshots are not blank; then
the same of the documentation site's index and a gallery page (``make docs`` builds the site).

Skipped where no Chromium or no Playwright is installed (developer machines), or the site is not
built, unless ``CI=1`` or ``ZOO_REQUIRE_BROWSER=1`` (``.ci/run`` sets it, and builds the site
first): there it fails instead.
"""

from __future__ import annotations

import importlib
import io
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import zoo

try:
    sync_api: Any = importlib.import_module("playwright.sync_api")
except ImportError:  # an optional dependency: the dev extra installs it
    sync_api = None

WIDTH, HEIGHT = 1400, 900
SITE = Path(__file__).resolve().parents[1] / "docs" / "_build" / "html"
GALLERY_PAGE = "eight_schools"  # the gallery page opened: math, graph and report figures
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def browser_path() -> str | None:
    """The system's Chromium (``ZOO_CHROMIUM`` names another), or None."""
    named = os.environ.get("ZOO_CHROMIUM")
    if named:
        return named if Path(named).is_file() else None
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


def required() -> bool:
    return os.environ.get("CI") == "1" or os.environ.get("ZOO_REQUIRE_BROWSER") == "1"


def need_browser() -> str:
    path = browser_path()
    missing = []
    if sync_api is None:
        missing.append("Playwright for Python (pip install -e '.[dev]')")
    if path is None:
        missing.append("a Chromium binary (apt-get install chromium)")
    if missing:
        why = "the browser test needs " + " and ".join(missing)
        if required():
            pytest.fail(why + " (CI=1 or ZOO_REQUIRE_BROWSER=1: required here)")
        pytest.skip(why)
    assert path is not None
    return path


@pytest.fixture(scope="module")
def chromium() -> str:
    """The browser's path; skipped (or failed, where required) before any report is built."""
    return need_browser()


@pytest.fixture(scope="module")
def small_report(chromium: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two small models of two families at smoke size (MCMC included: trace plots)."""
    out = tmp_path_factory.mktemp("browser") / "report"
    bb = zoo.compare(
        "beta_bernoulli",
        ["exact", "svi", "mh"],
        exact={"num_samples": 500},
        svi={"num_steps": 100, "num_samples": 200},
        mh={"num_samples": 150, "warmup": 150, "num_chains": 2},
        progress=False,
    )
    coins = zoo.compare("three_coin", ["em"], progress=False)  # another family
    zoo.report([bb, coins], out=out)
    return out


def open_page(browser: Any, path: Path) -> tuple[Any, list[str], list[str]]:
    """A 1400 x 900 page at ``path``; the console errors and the non-local requests it made."""
    page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    errors: list[str] = []
    remote: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    def route(r: Any) -> None:
        if r.request.url.startswith(("file:", "data:")):
            r.continue_()
        else:
            remote.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, errors, remote


def check_images_and_screen(page: Any) -> int:
    """Every <img> decoded; the screenshot not blank. Returns the number of images."""
    images = page.evaluate(
        "Array.from(document.images).map(i => [i.alt, i.complete ? i.naturalWidth : 0])"
    )
    broken = [alt for alt, width in images if not width]
    assert not broken, f"images that did not decode: {broken}"
    shot = np.asarray(Image.open(io.BytesIO(page.screenshot())).convert("L"), dtype=float)
    assert shot.shape == (HEIGHT, WIDTH)
    assert shot.var() > 0, "blank screenshot"
    return len(images)


def test_index_and_a_model_page_in_chromium(chromium: str, small_report: Path) -> None:
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS, headless=True)
        try:
            index, errors, remote = open_page(browser, small_report / "index.html")
            check_images_and_screen(index)
            widths = index.evaluate(
                "[document.querySelector('table.matrix').scrollWidth,"
                " document.documentElement.scrollWidth, window.innerWidth]"
            )
            table, doc, window = widths
            assert table <= window and doc <= window, widths
            # the legend sits right above the table; the family filter hides the other rows
            assert index.evaluate(
                "document.getElementById('legend').compareDocumentPosition("
                "document.querySelector('table.matrix')) & Node.DOCUMENT_POSITION_FOLLOWING"
            )
            index.select_option("#family-filter", "conjugate")
            shown = index.evaluate(
                "Array.from(document.querySelectorAll('table.matrix tbody tr'))"
                ".filter(r => r.offsetParent !== null).map(r => r.dataset.family)"
            )
            assert shown and set(shown) == {"conjugate"}, shown
            # an index entry leads to its row of the model's engine table
            href = index.get_attribute("a.entry[href$='#engine-exact']", "href")
            assert href and href.split("#")[0].endswith(".html")
            assert not errors, errors
            assert not remote, remote

            page, errors, remote = open_page(browser, small_report / "beta_bernoulli.html")
            assert check_images_and_screen(page) >= 3  # densities, ELBO, MCMC traces at least
            assert page.locator("#engine-exact").count() == 1
            assert page.locator("#reproduce").count() == 1
            assert not errors, errors
            assert not remote, remote
        finally:
            browser.close()


@pytest.fixture(scope="module")
def site(chromium: str) -> Path:
    """The built documentation site (``make docs``)."""
    if not (SITE / "index.html").is_file():
        why = f"the documentation site is not built ({SITE}: run make docs)"
        if required():
            pytest.fail(why + " (CI=1 or ZOO_REQUIRE_BROWSER=1: required here)")
        pytest.skip(why)
    return SITE


def test_the_docs_index_and_a_gallery_page_in_chromium(chromium: str, site: Path) -> None:
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS, headless=True)
        try:
            index, errors, remote = open_page(browser, site / "index.html")
            assert check_images_and_screen(index) >= 1  # a gallery page's graph
            assert index.locator("a[href='gallery/index.html']").count() >= 1
            assert not errors, errors
            assert not remote, remote

            page, errors, remote = open_page(browser, site / "gallery" / f"{GALLERY_PAGE}.html")
            assert check_images_and_screen(page) >= 3
            assert page.locator("section#generative-story img").count() >= 1  # mathtext
            assert page.locator("section#graphical-model img").count() == 1  # render_model
            report = page.locator(f"a[href='../report/{GALLERY_PAGE}.html']")
            if report.count():  # built with a report: its figures, and its page beside the site
                assert page.locator("section#figures img").count() >= 1
                assert (site / "report" / f"{GALLERY_PAGE}.html").is_file()
            else:
                assert not required(), "CI builds the site with a quick report"
            assert not errors, errors
            assert not remote, remote
        finally:
            browser.close()
