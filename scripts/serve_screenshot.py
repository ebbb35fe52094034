"""docs/serve.png: the web page of `graphrag-pipeline serve` answering a question, taken in a headless
Chromium (Debian's, see scripts/browser.sh) on a home built from the bundled corpus.

    .venv/bin/python scripts/serve_screenshot.py [--home DIR] [--out docs/serve.png]

Without --home, the bundled corpus is built (fast method, offline) into a temporary home first."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from graphrag_pipeline.serve import create_app  # noqa: E402
from graphrag_pipeline_tests.serve_support import QUESTION, build_home, running  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--home", type=Path, help="a built GRAPHRAG_HOME (default: build the bundled corpus)")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "serve.png")
    ap.add_argument("--question", default=QUESTION)
    ap.add_argument("--entity", default="Charles Darwin", help="entity to open in the side panel")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        home = args.home or build_home(Path(tmp))[0]
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        if not exe:
            raise SystemExit("no chromium: run scripts/browser.sh")
        with running(create_app(home, client=None)) as base, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=exe, headless=True, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1440, "height": 960}, device_scale_factor=1)
            page.goto(f"{base}/")
            page.wait_for_selector("body[data-ready='1']")
            page.fill("#question", args.question)
            page.click("#ask-button")
            page.wait_for_function("document.body.dataset.done")
            page.locator("#entities li a.entity", has_text=args.entity).first.click()
            page.wait_for_selector("#detail a.source")
            page.wait_for_timeout(300)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(args.out), full_page=False)
            browser.close()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
