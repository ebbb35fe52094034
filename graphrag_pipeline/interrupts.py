"""Stopping a build on SIGINT / SIGTERM.

`graphrag-pipeline build` runs Dagster in its own process. While a run executes, Dagster installs its
own signal handlers (an interrupt inside a step raises there, and a step with a retry policy is
then retried - right for a preempted worker, wrong for a user pressing Ctrl-C). So the build
watches signals through the wakeup file descriptor, which Python writes whatever handler is
installed: `requested()` says, anywhere in the process, that a stop was asked for, and the steps
turn their interruption into a failure without retries. Outside runs the handler raises `Stop`.

Nothing here is active unless `install()` was called (the CLI does); runs started by the Dagster UI
or daemon are stopped by Dagster's own termination.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

_STATE: dict = {"pipe": None, "received": None, "old_fd": -1, "old_handlers": {}}

# SQLAlchemy (Dagster's SQLite storage) catches an exception raised while it closes a connection and
# logs it with its stack trace: a Stop landing there is the stop, said by the build, not an error
_QUIET_LOGGERS = ("sqlalchemy.pool",)


class Stop(Exception):
    def __init__(self, signo: int):
        self.signo = signo
        super().__init__(signal.Signals(signo).name)


class _WithoutStops(logging.Handler):
    """Passes its logger's records on to the root logger's handlers, except those whose exception is a Stop."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and isinstance(record.exc_info[1], Stop):
            return
        logging.getLogger().handle(record)


def _quiet_stops(on: bool) -> None:
    for name in _QUIET_LOGGERS:
        logger = logging.getLogger(name)
        for h in [h for h in logger.handlers if isinstance(h, _WithoutStops)]:
            logger.removeHandler(h)
        if on:
            logger.addHandler(_WithoutStops())
        logger.propagate = not on


def _handler(signo, _frame) -> None:
    _STATE["received"] = signo
    raise Stop(signo)


def install() -> None:
    """Watch SIGINT and SIGTERM from now on (main thread only)."""
    if _STATE["pipe"] is not None:
        return
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    _STATE.update(pipe=(r, w), received=None)
    _STATE["old_fd"] = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    _STATE["old_handlers"] = {s: signal.signal(s, _handler) for s in (signal.SIGINT, signal.SIGTERM)}
    _quiet_stops(True)


def uninstall() -> None:
    if _STATE["pipe"] is None:
        return
    signal.set_wakeup_fd(_STATE["old_fd"])
    for s, h in _STATE["old_handlers"].items():
        signal.signal(s, h)
    for fd in _STATE["pipe"]:
        os.close(fd)
    _quiet_stops(False)
    _STATE.update(pipe=None, received=None, old_fd=-1, old_handlers={})


def requested() -> int | None:
    """The signal that asked this process to stop, if one did (None when not installed)."""
    if _STATE["pipe"] is None:
        return None
    try:
        data = os.read(_STATE["pipe"][0], 512)
    except BlockingIOError:
        data = b""
    for b in data:
        if b in (signal.SIGINT, signal.SIGTERM):
            _STATE["received"] = b
    return _STATE["received"]


def wait(seconds: float) -> int | None:
    """Sleep up to `seconds`, waking at once when a stop is asked for; the signal, if one was
    (without `install()`: a plain sleep, None). Unlike `time.sleep`, this wakes while Dagster's own
    handlers merely note a signal (they do during a run)."""
    if (signo := requested()) is not None or _STATE["pipe"] is None:
        if signo is None:
            time.sleep(seconds)
        return signo
    select.select([_STATE["pipe"][0]], [], [], max(0.0, seconds))
    return requested()


@contextmanager
def deferred() -> Iterator[None]:
    """SIGINT / SIGTERM arriving inside take effect when it ends: for writes that readers see as they
    land (an Elasticsearch delta, an alias switch), which a stop must not cut in half. The first
    such signal is raised again once the handlers that were installed (ours, Dagster's or
    Python's) are back, so a stop still stops; a second one is raised at once (a user who insists
    is not made to wait). Outside the main thread (where handlers cannot be set) this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    watched = (signal.SIGINT, signal.SIGTERM)
    got: list[int] = []
    old: dict = {}

    def restore() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, watched)  # no signal between two handlers' swaps
        try:
            for s, handler in old.items():
                signal.signal(s, handler if handler is not None else signal.SIG_DFL)
            old.clear()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, watched)

    def note(signo, _frame) -> None:
        got.append(signo)
        if len(got) > 1:
            restore()
            signal.raise_signal(signo)

    signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    try:
        for s in watched:
            old[s] = signal.signal(s, note)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, watched)
    try:
        yield
    finally:
        if old:
            restore()
            if got:
                signal.raise_signal(got[0])
