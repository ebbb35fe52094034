"""docs/ui-*.png: the Dagster UI on a built home, taken in a headless Chromium (Debian's, see
scripts/browser.sh): a document partition with its own metadata, a community report partition with its
title and size, and the asset lineage.

    .venv/bin/python scripts/ui_screenshots.py [--home DIR] [--out-dir docs]

Without --home, the bundled corpus is built (fast method, offline) into a temporary home first. The
webserver runs on a free port of 127.0.0.1 and is stopped at the end."""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_up(url: str, proc: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the Dagster webserver exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"the Dagster webserver did not answer at {url} within {timeout_s:.0f} s")


def _first_partition(home: Path, name: str) -> str:
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    with dg.DagsterInstance.get() as instance:
        keys = instance.get_dynamic_partitions(name)
    if not keys:
        raise SystemExit(f"no {name} partitions in {home}")
    return sorted(keys)[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--home", type=Path, help="a built GRAPHRAG_HOME (default: build the bundled corpus)")
    ap.add_argument("--out-dir", type=Path, default=REPO / "docs")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from graphrag_pipeline.storage.home import read_home_record
    from graphrag_pipeline_tests.serve_support import build_home

    with tempfile.TemporaryDirectory() as tmp:
        home = (args.home or build_home(Path(tmp))[0]).resolve()
        record = read_home_record(home)
        document = _first_partition(home, "documents")
        community = _first_partition(home, "communities")
        port = _free_port()
        env = {
            **os.environ,
            "DAGSTER_HOME": str(home / "dagster"),
            "GRAPHRAG_HOME": str(home),
            "GRAPHRAG_CORPUS": str(record.corpus),
            "GRAPHRAG_METHOD": record.method,
        }
        webserver = Path(sys.executable).with_name("dagster-webserver")
        proc = subprocess.Popen(
            [str(webserver), "-m", "graphrag_pipeline.definitions", "-h", "127.0.0.1", "-p", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            _wait_up(f"{base}/server_info", proc)
            exe = shutil.which("chromium") or shutil.which("chromium-browser")
            if not exe:
                raise SystemExit("no chromium: run scripts/browser.sh")
            args.out_dir.mkdir(parents=True, exist_ok=True)
            shots = {
                "ui-document-partition.png": f"/assets/doc_subgraph?view=partitions&partition={document}",
                "ui-community-partition.png": f"/assets/community_reports?view=partitions&partition={community}",
                "ui-lineage.png": "/assets/communities?view=lineage&lineageScope=neighbors&lineageDepth=3",
            }
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=exe, headless=True, args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1440, "height": 1750}, device_scale_factor=1)
                for name, path in shots.items():
                    page.goto(base + path)
                    page.wait_for_load_state("networkidle")
                    page.wait_for_timeout(2000)
                    skip = page.get_by_role("button", name="Skip")  # the community sign-up dialog of a new instance
                    if skip.count():
                        skip.first.click()
                        page.wait_for_timeout(500)
                    page.screenshot(path=str(args.out_dir / name), full_page=False)
                    print(f"wrote {args.out_dir / name}")
                browser.close()
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
