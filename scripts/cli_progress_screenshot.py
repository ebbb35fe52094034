"""Render the progress display of a real `graphrag-pipeline build` to docs/images/cli-progress.svg.

A `light` build of 42 documents (the sample corpus, six times over with a line that tells the
copies apart) runs in this process against the tests' scripted OpenAI-compatible server, whose
answers take 1.2 s (the slow endpoint of the issue), four calls at a time. When extraction is about
half done, the build's own lines so far and the live display drawn from the build's tracker at that
moment are recorded by rich and saved as SVG, and the build is stopped (as by Ctrl-C). Nothing is
paid for and no network is used.

    .venv/bin/python scripts/cli_progress_screenshot.py [--out docs/images/cli-progress.svg]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


class Tee(io.TextIOBase):
    """What the build prints, kept for the picture and still shown."""

    def __init__(self, real):
        self.real, self.kept = real, io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.real.write(text)

    def flush(self) -> None:
        self.real.flush()


def make_corpus(dest: Path, copies: int) -> None:
    for n in range(1, copies + 1):
        for src in sorted((REPO / "data" / "corpus").iterdir()):
            text = src.read_text(encoding="utf-8")
            (dest / f"{src.stem}_{n}{src.suffix}").write_text(f"Copy {n} of this text.\n\n{text}", encoding="utf-8")


def capture(out: Path, printed: Tee, done: threading.Event, when: float, width: int, tidy) -> None:
    """Wait for the build's tracker, then for extraction to pass ``when`` of its chunks; record, and
    stop the build (SIGINT, as Ctrl-C would): the rest of it is not in the picture."""
    from rich.console import Console
    from rich.spinner import Spinner
    from rich.text import Text

    from graphrag_pipeline import progress
    from graphrag_pipeline.cli_progress import render

    while not done.is_set():
        tracker = progress.reporter()
        snap = tracker.snapshot() if isinstance(tracker, progress.Tracker) else None
        chunks = next((t for t in snap.tasks if t.name == "chunks"), None) if snap else None
        if chunks and chunks.total and chunks.done >= when * chunks.total and chunks.rate:
            console = Console(record=True, width=width, file=io.StringIO(), force_terminal=True)
            console.print(Text("$ graphrag-pipeline build --corpus ~/notes --method light", style="bold"))
            console.print(Text(tidy(printed.kept.getvalue().rstrip("\n"))))
            console.print(render(snap, Spinner("dots", style="cyan")))
            out.parent.mkdir(parents=True, exist_ok=True)
            console.save_svg(str(out), title="graphrag-pipeline build")
            print(f"\nwrote {out}; stopping the build", file=sys.__stderr__, flush=True)
            os.kill(os.getpid(), signal.SIGINT)
            return
        time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "images" / "cli-progress.svg"))
    parser.add_argument("--copies", type=int, default=6)
    parser.add_argument("--delay", type=float, default=1.2, help="seconds per LLM answer")
    parser.add_argument("--when", type=float, default=0.45, help="share of the chunks extracted when recorded")
    parser.add_argument("--width", type=int, default=110)
    args = parser.parse_args()

    from graphrag_pipeline.cli import main as cli_main
    from graphrag_pipeline_tests.fake_llm import FakeLLM
    from graphrag_pipeline_tests.llm_server import Reply, ScriptedLLMServer

    fake = FakeLLM()
    work = Path(tempfile.mkdtemp(prefix="graphrag-progress-"))
    corpus = work / "notes"
    corpus.mkdir()
    make_corpus(corpus, args.copies)
    printed, done = Tee(sys.stdout), threading.Event()
    try:
        with ScriptedLLMServer(lambda body: Reply(text=fake(body), delay_s=args.delay, include_usage=False)) as server:
            os.environ.update(
                GRAPHRAG_HOME=str(work / "home"),
                OPENAI_BASE_URL=server.base_url,
                OPENAI_API_KEY="not-a-real-key",
                GRAPHRAG_LLM_MODEL="qwen2.5:7b",
                GRAPHRAG_MAX_CONCURRENT_CHATS="4",
                GRAPHRAG_PROGRESS_INTERVAL="0",
                # a price, so the display shows the cost so far (a local server has none in the table)
                GRAPHRAG_PRICE_INPUT_PER_MTOK="0.15",
                GRAPHRAG_PRICE_OUTPUT_PER_MTOK="0.60",
            )

            def tidy(text: str) -> str:  # the paths a reader would have
                return text.replace(str(work / "home"), "~/.graphrag").replace(str(corpus), "~/notes")

            shot = threading.Thread(target=capture, args=(Path(args.out), printed, done, args.when, args.width, tidy))
            shot.start()
            try:
                with contextlib.redirect_stdout(printed):  # the build runs in the main thread (signals)
                    code = cli_main(["build", "--corpus", str(corpus), "--method", "light"])
            finally:
                done.set()
                shot.join()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not Path(args.out).exists():
        print("error: extraction ended before the picture was taken", file=sys.stderr)
        return 1
    return 0 if code in (0, 128 + signal.SIGINT) else code


if __name__ == "__main__":
    raise SystemExit(main())
