"""Progress of a build: the tracker's counting, rates and ETAs (a fake clock), what the core reports
(extraction, reports, LLM usage), and what `graphrag-pipeline build` shows on a pseudo-terminal, in a
pipe and with `-v`, against a slow scripted LLM endpoint."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from graphrag_pipeline import progress
from graphrag_pipeline.llm.usage import LLMUsage
from graphrag_pipeline.progress import Tracker, duration, plain_line
from graphrag_pipeline_tests.conftest import cli
from graphrag_pipeline_tests.fake_llm import FakeLLM
from graphrag_pipeline_tests.llm_server import Reply, ScriptedLLMServer, client_for

REPO = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rate_and_eta_follow_the_recent_window():
    clock = Clock()
    t = Tracker(clock=clock, window_s=10.0)
    t.start("chunks", 100, "chunks", "extracting")
    first = t.snapshot().tasks[0]
    assert (first.done, first.total, first.rate, first.eta_s) == (0, 100, None, None)  # no measure yet
    for _ in range(10):  # 2 a second for 10 s
        clock.now += 1
        t.advance("chunks", 2)
        t.snapshot()
    view = t.snapshot().tasks[0]
    assert view.done == 20 and view.rate == pytest.approx(2.0) and view.eta_s == pytest.approx(40.0)
    for _ in range(10):  # the endpoint slows down to 0.5 a second: the window forgets the fast part
        clock.now += 2
        t.advance("chunks", 1)
        t.snapshot()
    view = t.snapshot().tasks[0]
    assert view.done == 30 and view.rate == pytest.approx(0.5, abs=0.05)
    assert view.eta_s == pytest.approx(70 / 0.5, rel=0.1)
    assert "extracting 30/100 chunks, 0.5/s, ETA 2:" in plain_line(t.snapshot())
    t.finish("chunks")
    assert t.snapshot().tasks == [] and not t.snapshot().active


def test_tasks_end_with_their_step_and_restart_at_zero():
    t = Tracker(clock=Clock())
    t.start("documents", 5, "documents")  # outside any step: the build's own
    with progress.installed(t):
        with pytest.raises(RuntimeError), progress.step("doc_subgraph"):
            progress.start("chunks", 10, "chunks")
            progress.advance("chunks", 3)
            progress.advance("documents", 2)
            assert t.snapshot().step == "doc_subgraph"
            assert [(v.name, v.done) for v in t.snapshot().tasks] == [("documents", 2), ("chunks", 3)]
            raise RuntimeError("the step failed")
        snap = t.snapshot()
        assert snap.step is None and [(v.name, v.done) for v in snap.tasks] == [("documents", 2)]
        progress.start("documents", 4)
        assert t.snapshot().tasks[0].done == 0
    progress.advance("documents")  # nobody listens any more: nothing counted, nothing raised
    assert t.snapshot().tasks[0].done == 0


def test_llm_usage_sums_clients_and_counts_threads_exactly():
    clock = Clock()
    t = Tracker(clock=clock)
    # calls at an unknown price (a local server): no cost to show
    t.llm_usage(1, LLMUsage(calls=3, cache_hits=1, prompt_tokens=300, completion_tokens=30, unpriced_calls=3))
    t.llm_usage(2, LLMUsage(calls=1, prompt_tokens=100, completion_tokens=10, unpriced_calls=1))
    t.llm_usage(1, LLMUsage(calls=5, cache_hits=1, prompt_tokens=500, completion_tokens=50, unpriced_calls=5))
    llm = t.snapshot().llm  # newer totals of client 1 replace its older ones
    assert (llm.calls, llm.cache_hits, llm.tokens, llm.cost_usd) == (6, 1, 660, None)  # no cost counted

    t.llm_usage(3, LLMUsage(calls=2, cost_usd=0.05))
    clock.now += 2
    t.llm_usage(3, LLMUsage(calls=6, cost_usd=0.25))
    snap = t.snapshot()
    assert snap.llm.cost_usd == 0.25 and snap.llm.calls == 12 and snap.llm.calls_per_s == pytest.approx(3.0)
    assert "LLM 12 calls (3.0/s), 660 tokens (600 in, 60 out), $0.250, 1 cached" in plain_line(snap)

    t.start("chunks", 8000)
    threads = [threading.Thread(target=lambda: [t.advance("chunks") for _ in range(1000)]) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert t.snapshot().tasks[0].done == 8000
    assert (duration(59.6), duration(3725), duration(None)) == ("1:00", "1:02:05", "?")


def test_extraction_counts_documents_and_chunks_and_the_client_its_calls(tmp_path, llm_server):
    from graphrag_pipeline.extract.batch import extract_documents
    from graphrag_pipeline.extract.llm import ExtractionSettings
    from graphrag_pipeline.llm.cache import KVCache

    fake = FakeLLM()
    llm_server.responder = lambda body: Reply(text=fake(body), prompt_tokens=100, completion_tokens=20)
    chunks = pl.DataFrame(
        {
            "doc_id": ["a", "a", "b", "c"],
            "position": [0, 1, 0, 0],
            "chunk_id": ["c1", "c2", "c3", "c1"],  # c shares a's first chunk
            "text": ["Ada Lovelace met Charles Babbage in London.", "Babbage built engines.", "Curie in Paris.", ""],
        }
    )
    cache = KVCache(tmp_path / "cache.sqlite", table="extraction")
    client = client_for(llm_server)
    seen: list[tuple[str, int, int | None]] = []

    class Watching(Tracker):
        def snapshot_of(self, name):
            return next((v for v in self.snapshot().tasks if v.name == name), None)

        def advance(self, task, n=1):
            super().advance(task, n)
            if task == "documents":
                chunk_view = self.snapshot_of("chunks")
                seen.append((task, self.snapshot_of("documents").done, chunk_view and chunk_view.done))

    t = Watching()
    with progress.installed(t):
        t.start("documents", 4, "documents")
        result = extract_documents(["a", "b", "c", "d"], chunks, "light", cache, client, ExtractionSettings("light"))
        assert [d.key for d in result.documents] == ["a", "b", "c", "d"]
    snap = t.snapshot()
    assert [(v.name, v.done) for v in snap.tasks] == [("documents", 4)]  # the chunks task ended with the batch
    assert seen[0] == ("documents", 1, None)  # d has no chunk: done before any call
    assert snap.llm.calls == 3 and snap.llm.tokens == 360  # one call per distinct chunk, from the client
    with progress.installed(t):  # again: every chunk is cached, every document done at once
        t.start("documents", 4, "documents")
        extract_documents(["a", "b", "c", "d"], chunks, "light", cache, client, ExtractionSettings("light"))
    assert t.snapshot().tasks[0].done == 4 and t.snapshot().llm.calls == 3
    # a step retried by Dagster extracts its documents again in the same build: counted once each
    with progress.installed(t):
        extract_documents(["a", "b", "c", "d"], chunks, "light", cache, client, ExtractionSettings("light"))
    assert t.snapshot().tasks[0].done == 4


# -- the CLI --------------------------------------------------------------------------------------
@pytest.fixture
def slow_endpoint(home, corpus):
    """A light build's endpoint answering in 0.3 s, so steps last long enough to be seen."""
    fake = FakeLLM()
    with ScriptedLLMServer(lambda body: Reply(text=fake(body), delay_s=0.3)) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHRAG_", "OPENAI_", "DAGSTER_"))}
        for k in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR", "COLUMNS", "LINES"):
            env.pop(k, None)
        env.update(
            GRAPHRAG_HOME=str(home),
            OPENAI_BASE_URL=server.base_url,
            OPENAI_API_KEY="test-key-SECRET",
            GRAPHRAG_LLM_MODEL="fake-model",
            GRAPHRAG_MAX_CONCURRENT_CHATS="4",
            TERM="xterm-256color",
        )
        yield env


def _build_cmd(corpus: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "graphrag_pipeline.cli", "build", "--corpus", str(corpus), "--method", "light", *args]


def test_build_on_a_terminal_shows_live_progress(slow_endpoint, corpus):
    import fcntl
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(
        _build_cmd(corpus), env=slow_endpoint, cwd=REPO, stdin=slave, stdout=slave, stderr=slave, close_fds=True
    )
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the other side closed: the build exited
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(master)
    assert proc.wait(timeout=30) == 0
    raw = b"".join(chunks).decode("utf-8", "replace")
    text = ANSI.sub("", raw)
    assert "\x1b[1A" in raw and "\x1b[2K" in raw  # redrawn in place
    assert "━" in text  # bars
    # documents and chunks extracted, the step, reports written, calls and tokens, ETAs
    assert re.search(r"doc_subgraph", text) and re.search(r"extracting\s.*\d+/9\s+chunks", text)
    assert re.search(r"documents\s.*\d/7\s+documents", text)
    assert re.search(r"writing reports\s.*\d+/\d+\s+reports", text) and "community_reports" in text
    assert re.search(r"LLM [\d,]+ calls \([\d.]+/s\), [\d,]+ tokens", text) and "ETA" in text
    assert "build finished" in text and "test-key-SECRET" not in text


def test_build_without_a_terminal_prints_plain_lines_only(slow_endpoint, corpus):
    env = {**slow_endpoint, "GRAPHRAG_PROGRESS_INTERVAL": "1"}
    done = subprocess.run(_build_cmd(corpus), env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for stream in (done.stdout, done.stderr):
        assert "\x1b" not in stream and "\r" not in stream  # no escape codes, no redraws
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("progress ")]
    assert lines, done.stderr
    assert any("step doc_subgraph" in ln and "LLM" in ln for ln in lines)
    assert any(re.search(r"writing reports \d+/\d+ reports", ln) for ln in lines)
    assert "build finished" in done.stdout and "progress " not in done.stdout

    # the default interval (15 s) says nothing about a build that takes less
    again = subprocess.run(_build_cmd(corpus), env=slow_endpoint, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "progress " not in again.stderr


def test_verbose_shows_dagster_log_lines(home, corpus, capsys):
    code, out = cli("build", "--method", "fast")
    assert code == 0
    assert "chunked 7/7 documents" not in capsys.readouterr().err  # WARNING and above only
    (corpus / "new.txt").write_text("Grace Hopper worked on the Harvard Mark I with Howard Aiken.")
    code, out = cli("build", "-v")
    assert code == 0 and "build finished" in out
    err = capsys.readouterr().err
    assert "chunked 1/1 documents" in err and " - INFO - " in err
