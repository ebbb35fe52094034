"""Progress of long steps, told by the core and shown by whoever listens (no Dagster, no terminal).

The core calls the module functions (``start``, ``advance``, ``finish``, ``step``, ``llm_usage``)
at the places where work is counted: documents and chunks extracted, reports written, texts
embedded, LLM calls made. By default nobody listens and every call is a no-op, so a step run from
the Dagster UI or a daemon pays nothing. ``graphrag-pipeline build`` installs a ``Tracker`` for its
in-process runs and draws it (cli_progress.py); a test can install one and read ``snapshot()``.

A ``Tracker`` only counts (thread-safe: extraction reports from its worker threads and the LLM
client from every call); rates and ETAs are computed when a snapshot is taken, from the counts of
the last ``window_s`` seconds, so a rate follows an endpoint that slows down or speeds up.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


class Reporter:
    """Listens to nothing: what the core talks to when no tracker is installed."""

    def start(self, task: str, total: int | None = None, unit: str = "", label: str = "") -> None:
        """(Re)start ``task`` at 0 of ``total`` (None: unknown) ``unit``s; ``label`` is what a person reads."""

    def advance(self, task: str, n: int = 1) -> None:
        """``n`` more of ``task`` done."""

    def done(self, task: str, items) -> None:
        """These ``items`` (names) of ``task`` are done; an item counts once per start of the task,
        though a step retried by Dagster reports it again."""

    def finish(self, task: str) -> None:
        """``task`` is over (done, failed or stopped): it is no longer shown."""

    def enter_step(self, name: str) -> None:
        """A pipeline step (an asset) began."""

    def leave_step(self, name: str) -> None:
        """That step ended."""

    def llm_usage(self, source: int, usage) -> None:
        """The running totals (an LLMUsage) of one LLM client, numbered by ``new_source()``."""


_NOBODY = Reporter()
_current: Reporter = _NOBODY
_sources = itertools.count(1)


def reporter() -> Reporter:
    return _current


@contextlib.contextmanager
def installed(rep: Reporter) -> Iterator[Reporter]:
    """Send this process's progress to ``rep`` while the block runs."""
    global _current
    previous, _current = _current, rep
    try:
        yield rep
    finally:
        _current = previous


def start(task: str, total: int | None = None, unit: str = "", label: str = "") -> None:
    _current.start(task, total, unit, label)


def advance(task: str, n: int = 1) -> None:
    if n:
        _current.advance(task, n)


def done(task: str, items) -> None:
    if items:
        _current.done(task, items)


def finish(task: str) -> None:
    _current.finish(task)


@contextlib.contextmanager
def step(name: str) -> Iterator[None]:
    rep = _current
    rep.enter_step(name)
    try:
        yield
    finally:
        rep.leave_step(name)


def new_source() -> int:
    """A number for one LLM client's ``llm_usage`` reports (never reused, unlike ``id()``)."""
    return next(_sources)


def llm_usage(source: int, usage) -> None:
    _current.llm_usage(source, usage)


# -- counting ------------------------------------------------------------------------------------
@dataclass
class _Task:
    total: int | None
    unit: str
    label: str
    started: float
    step: str | None = None  # the step it was started in: it ends with that step at the latest
    done: int = 0
    samples: deque = field(default_factory=deque)  # (time, done), at most one a second, for the rate
    items: set = field(default_factory=set)  # what `done` counted: each once


@dataclass(frozen=True)
class TaskView:
    name: str
    label: str
    unit: str
    done: int
    total: int | None
    elapsed_s: float
    rate: float | None  # units per second over the recent window; None before there is a measure
    eta_s: float | None  # seconds left at that rate; None when the total or the rate is unknown


@dataclass(frozen=True)
class LLMView:
    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None  # None when the usage counters carry no cost
    calls_per_s: float | None = None

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Snapshot:
    elapsed_s: float  # since the tracker was made (the build)
    step: str | None  # the step running now
    step_elapsed_s: float
    tasks: list[TaskView]  # the tasks running now, in the order they started
    llm: LLMView

    @property
    def active(self) -> bool:
        return self.step is not None or bool(self.tasks)


def _rate(samples: deque, now: float, value: int, window_s: float) -> float | None:
    """Units per second between the oldest sample of the window and now."""
    if not samples or now - samples[-1][0] >= 1.0:
        samples.append((now, value))
    while len(samples) > 2 and now - samples[1][0] >= window_s:
        samples.popleft()
    t0, v0 = samples[0]
    if now - t0 < 1.0:
        return None
    return (value - v0) / (now - t0)


class Tracker(Reporter):
    """Counts what the core reports; ``snapshot()`` says where things stand (any thread)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, window_s: float = 30.0):
        self._clock = clock
        self._window_s = window_s
        self._lock = threading.Lock()
        self._born = clock()
        self._tasks: dict[str, _Task] = {}
        self._steps: list[tuple[str, float]] = []
        self._usage: dict[int, object] = {}
        self._call_samples: deque = deque()

    def start(self, task: str, total: int | None = None, unit: str = "", label: str = "") -> None:
        now = self._clock()
        with self._lock:
            self._tasks.pop(task, None)  # a restarted task goes to the end, in start order
            step = self._steps[-1][0] if self._steps else None
            self._tasks[task] = _Task(total, unit, label or task, now, step, samples=deque([(now, 0)]))

    def advance(self, task: str, n: int = 1) -> None:
        with self._lock:
            t = self._tasks.get(task)
            if t is None:  # counted without a start: shown as a count with no total
                now = self._clock()
                t = self._tasks[task] = _Task(None, "", task, now, samples=deque([(now, 0)]))
            t.done += n

    def done(self, task: str, items) -> None:
        with self._lock:
            t = self._tasks.get(task)
            if t is None:  # counted without a start: shown as a count with no total
                now = self._clock()
                t = self._tasks[task] = _Task(None, "", task, now, samples=deque([(now, 0)]))
            new = [i for i in dict.fromkeys(items) if i not in t.items]
            t.items.update(new)
        if new:
            self.advance(task, len(new))

    def finish(self, task: str) -> None:
        with self._lock:
            self._tasks.pop(task, None)

    def enter_step(self, name: str) -> None:
        with self._lock:
            self._steps.append((name, self._clock()))

    def leave_step(self, name: str) -> None:
        with self._lock:
            for i in range(len(self._steps) - 1, -1, -1):
                if self._steps[i][0] == name:
                    del self._steps[i]
                    break
            # what the step left running (it failed or was stopped) is not running any more
            for task in [k for k, t in self._tasks.items() if t.step == name]:
                del self._tasks[task]

    def llm_usage(self, source: int, usage) -> None:
        with self._lock:
            self._usage[source] = usage  # a client's running totals: the newest replaces the older

    def snapshot(self) -> Snapshot:
        now = self._clock()
        with self._lock:
            tasks = [self._view(name, t, now) for name, t in self._tasks.items()]
            step, since = self._steps[-1] if self._steps else (None, now)
            usages = list(self._usage.values())
            calls = sum(u.calls for u in usages)
            # a client all of whose calls were at an unknown price (a local server) has no cost to show
            costs = [
                c
                for u in usages
                if (c := getattr(u, "cost_usd", None)) is not None
                and not (u.calls and getattr(u, "unpriced_calls", 0) >= u.calls)
            ]
            llm = LLMView(
                calls=calls,
                cache_hits=sum(u.cache_hits for u in usages),
                prompt_tokens=sum(u.prompt_tokens for u in usages),
                completion_tokens=sum(u.completion_tokens for u in usages),
                cost_usd=sum(costs) if costs else None,
                calls_per_s=_rate(self._call_samples, now, calls, self._window_s) if usages else None,
            )
        return Snapshot(now - self._born, step, now - since, tasks, llm)

    def _view(self, name: str, t: _Task, now: float) -> TaskView:
        rate = _rate(t.samples, now, t.done, self._window_s)
        eta = None
        if t.total is not None and rate:
            eta = max(0.0, t.total - t.done) / rate
        elif t.total is not None and t.done >= t.total:
            eta = 0.0
        return TaskView(name, t.label, t.unit, t.done, t.total, now - t.started, rate, eta)


# -- plain text ----------------------------------------------------------------------------------
def duration(seconds: float | None) -> str:
    """``1:02:03`` / ``2:03``; ``?`` when unknown."""
    if seconds is None:
        return "?"
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def task_text(t: TaskView) -> str:
    """``extracting 142/300 chunks, 2.6/s, ETA 1:01``"""
    count = f"{t.done:,}/{t.total:,}" if t.total is not None else f"{t.done:,}"
    bits = [f"{t.label} {count}" + (f" {t.unit}" if t.unit else "")]
    if t.rate is not None:
        bits.append(f"{t.rate:.1f}/s")
    if t.total is not None and t.done < t.total:
        bits.append(f"ETA {duration(t.eta_s)}")
    return ", ".join(bits)


def llm_text(llm: LLMView) -> str:
    """``LLM 143 calls (2.9/s), 152,304 tokens (140,122 in, 12,182 out), $0.031, 12 cached``"""
    rate = f" ({llm.calls_per_s:.1f}/s)" if llm.calls_per_s is not None else ""
    text = (
        f"LLM {llm.calls:,} calls{rate}, {llm.tokens:,} tokens "
        f"({llm.prompt_tokens:,} in, {llm.completion_tokens:,} out)"
    )
    if llm.cost_usd is not None:
        text += f", ${llm.cost_usd:.3f}"
    if llm.cache_hits:
        text += f", {llm.cache_hits:,} cached"
    return text


def plain_line(snap: Snapshot) -> str:
    """One line saying where a build stands, for a log file."""
    parts = [f"progress {duration(snap.elapsed_s)}"]
    if snap.step:
        parts.append(f"step {snap.step} ({duration(snap.step_elapsed_s)})")
    parts += [task_text(t) for t in snap.tasks]
    if snap.llm.calls or snap.llm.cache_hits:
        parts.append(llm_text(snap.llm))
    return " | ".join(parts)
