"""The web page of `graphrag-pipeline serve` in a real headless Chromium (Debian's package, installed
by `make test` through scripts/browser.sh), driven by Playwright: it loads, a question returns
results, the graph renders nodes, entities and sources open. Never skipped: without the browser
these tests fail and say how to install it."""

from __future__ import annotations

import os
import shutil

import pytest

from graphrag_pipeline.serve import create_app
from graphrag_pipeline_tests.serve_support import QUESTION, build_home, running


def chromium() -> str:
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser"):
        path = name and shutil.which(name)
        if path:
            return path
    pytest.fail("no chromium on PATH: install it with `make browser` (scripts/browser.sh: apt-get install chromium)")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_home(tmp_path_factory.mktemp("web"))


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
        b = p.chromium.launch(executable_path=chromium(), headless=True, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.errors, pg.requests = [], []
    pg.on("pageerror", lambda exc: pg.errors.append(str(exc)))
    pg.on("console", lambda msg: msg.type == "error" and pg.errors.append(msg.text))
    pg.on("request", lambda req: pg.requests.append(req.url))
    yield pg
    context.close()


def ask(pg, question: str, mode: str = "local") -> None:
    pg.fill("#question", question)
    pg.select_option("#mode", mode)
    before = pg.evaluate("document.body.dataset.done || ''")
    pg.click("#ask-button")
    pg.wait_for_function(f"(document.body.dataset.done || '') !== {before!r}", timeout=30_000)


def test_the_page_asks_and_draws_the_graph(built, page):
    home, _ = built
    with running(create_app(home, client=None)) as base:
        page.goto(f"{base}/")
        page.wait_for_selector("body[data-ready='1']")
        assert "entities" in page.inner_text("#index-info")
        assert page.eval_on_selector_all("#mode option", "os => os.map(o => o.value)")[:4] == [
            "mix",
            "local",
            "global",
            "naive",
        ]

        ask(page, QUESTION)
        assert "results (local)" in page.inner_text("#status")
        assert page.locator("#entities li").count() > 0 and page.locator("#relations li").count() > 0
        nodes = page.evaluate("window.cy.nodes().length")
        edges = page.evaluate("window.cy.edges().length")
        assert nodes > 0 and edges > 0
        names = page.evaluate("window.cy.nodes().map(n => n.data('name'))")
        assert set(page.locator("#entities li a.entity").all_inner_texts()) <= set(names)
        # the nodes were laid out inside the canvas (not all piled on one point)
        xs = page.evaluate("window.cy.nodes().map(n => Math.round(n.position('x')))")
        assert len(set(xs)) > 1

        # an entity opens with its relations and sources; a source opens as its chunk's text
        page.locator("#entities li a.entity", has_text="Charles Darwin").first.click()
        page.wait_for_selector("#detail a.source")
        assert "Charles Darwin" in page.inner_text("#detail h2")
        page.locator("#detail a.source").first.click()
        page.wait_for_selector("#detail pre.chunk-text")
        assert len(page.inner_text("#detail pre.chunk-text")) > 100

        # a click on a node in the graph opens that entity too
        page.evaluate("window.cy.nodes()[0].emit('tap')")
        page.wait_for_function("document.querySelector('#detail h2') && window.cy.$(':selected').length === 1")

        # naive search lists source chunks; global lists reports
        ask(page, QUESTION, "naive")
        assert page.locator("#chunks li").count() > 0
        ask(page, "What were the main themes of science in Cambridge and London?", "global")
        assert page.locator("#reports li").count() > 0

        assert page.errors == []
        assert all(url.startswith(base) for url in page.requests), page.requests  # nothing from a CDN


def test_the_page_shows_errors_and_sends_the_api_key(built, page):
    home, _ = built
    with running(create_app(home, api_key="page-key", client=None)) as base:
        page.goto(f"{base}/")
        page.wait_for_selector("body[data-ready='1']")
        assert page.is_visible("#api-key")
        ask(page, QUESTION)
        assert "401" in page.inner_text("#status") and page.get_attribute("#status", "class") == "error"
        page.fill("#api-key", "page-key")
        ask(page, QUESTION)
        assert "results (local)" in page.inner_text("#status")
        assert page.evaluate("window.cy.nodes().length") > 0
