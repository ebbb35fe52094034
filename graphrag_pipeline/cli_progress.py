"""The progress a `graphrag-pipeline build` shows while its Dagster runs work in this process.

On a terminal (stderr): a live display drawn with rich, redrawn four times a second below the
build's own lines, and gone when the build ends (the build's summary lines say what was done):

    ⠼ doc_subgraph  0:47                                           build 1:12
      documents     ━━━━━━━━━━━━━━━╸━━━━━━━━━━━━━━━━━━━   58/300 documents  1.2/s  ETA 3:21
      extracting    ━━━━━━━━━━━━━━━━━━━━━╸━━━━━━━━━━━━━  142/300 chunks     2.6/s  ETA 1:01
      LLM 143 calls (2.9/s), 152,304 tokens (140,122 in, 12,182 out), 12 cached

Lines printed meanwhile (the build's own, and Dagster's log lines with `-v`) appear above it.
Anywhere else (a pipe, a log file, CI) nothing is redrawn and no escape code is written: while a
step runs, one plain line every ``interval_s`` seconds (GRAPHRAG_PROGRESS_INTERVAL, 15 by
default) says where it stands, so a short build prints none and a long one shows it is alive.
"""

from __future__ import annotations

import io
import os
import sys
import threading
from typing import IO

from graphrag_pipeline import progress
from graphrag_pipeline.progress import Snapshot, Tracker, duration, llm_text, plain_line


def render(snap: Snapshot, spinner=None):
    """The live display of one snapshot (a rich renderable; nothing when no step runs). ``spinner``:
    the rich Spinner kept between frames (a new one would always show its first frame)."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.spinner import Spinner
    from rich.table import Table
    from rich.text import Text

    if not snap.active:
        return Group()
    head = Table.grid(expand=True)
    head.add_column(width=2, no_wrap=True)
    head.add_column(ratio=1, no_wrap=True)
    head.add_column(justify="right", no_wrap=True)
    head.add_row(
        spinner or Spinner("dots", style="cyan"),
        Text.assemble((snap.step or "working", "bold"), "  ", (duration(snap.step_elapsed_s), "dim")),
        Text(f"build {duration(snap.elapsed_s)}", style="dim"),
    )
    rows = Table.grid(padding=(0, 1))
    rows.add_column(width=1)
    rows.add_column(style="bold", no_wrap=True)
    rows.add_column(no_wrap=True)
    rows.add_column(justify="right", no_wrap=True)
    rows.add_column(no_wrap=True)
    rows.add_column(justify="right", no_wrap=True)
    rows.add_column(no_wrap=True)
    for t in snap.tasks:
        unknown = t.total is None or t.total == 0 and t.done == 0
        rows.add_row(
            "",
            t.label,
            ProgressBar(total=None if unknown else max(t.total, 1), completed=t.done, width=30, pulse=unknown),
            f"{t.done:,}" + (f"/{t.total:,}" if t.total is not None else ""),
            t.unit,
            f"{t.rate:.1f}/s" if t.rate is not None else "",
            Text(f"ETA {duration(t.eta_s)}", style="cyan") if t.total is not None and t.done < t.total else "",
        )
    parts = [head, rows] if snap.tasks else [head]
    if snap.llm.calls or snap.llm.cache_hits:
        parts.append(Text("  " + llm_text(snap.llm), style="magenta"))
    return Group(*parts)


class BuildProgress:
    """Installs a Tracker for the block and shows it on ``stream`` (stderr): live on a terminal,
    plain lines every ``interval_s`` seconds otherwise (0: none)."""

    def __init__(self, stream: IO[str] | None = None, interval_s: float = 15.0):
        from rich.console import Console

        self._own_stream = stream is None
        self.stream = stream or _own_stderr()
        self.console = Console(file=self.stream)
        self.live_display = self.console.is_terminal and not self.console.is_dumb_terminal
        self.interval_s = interval_s
        self.tracker = Tracker()
        self._installed = progress.installed(self.tracker)
        self._live = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> BuildProgress:
        self._installed.__enter__()
        if self.live_display:
            from rich.live import Live
            from rich.spinner import Spinner

            spinner = Spinner("dots", style="cyan")

            stdout_is_tty = getattr(sys.stdout, "isatty", lambda: False)()
            self._live = Live(
                console=self.console,
                get_renderable=lambda: render(self.tracker.snapshot(), spinner),
                refresh_per_second=4,
                transient=True,  # the build's summary lines stay; the bars go
                # lines printed meanwhile go above the display; stdout only when it is this terminal
                redirect_stdout=stdout_is_tty,
                redirect_stderr=True,
            )
            self._live.start()
        elif self.interval_s > 0:
            self._thread = threading.Thread(target=self._lines, name="progress-lines", daemon=True)
            self._thread.start()
        return self

    def _lines(self) -> None:
        while not self._stop.wait(self.interval_s):
            snap = self.tracker.snapshot()
            if snap.active:
                print(plain_line(snap), file=self.stream, flush=True)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        try:
            if self._live is not None:
                self._live.stop()
            if self._thread is not None:
                self._thread.join(timeout=2)
        finally:
            self._installed.__exit__(*exc)
            if self._own_stream and self.stream is not sys.stderr:
                self.stream.close()


def _own_stderr() -> IO[str]:
    """stderr as it is now, on a file descriptor of its own: while a step runs, Dagster points the
    process's descriptors 1 and 2 at the step's compute log files, where a display must not go (and
    there it would see no terminal)."""
    try:
        fd = os.dup(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):  # e.g. a test's captured stderr
        return sys.stderr
    return os.fdopen(fd, "w", buffering=1, encoding=sys.stderr.encoding or "utf-8", errors="replace")
