"""A home's own record and its build lock.

The record (`state/home.json`) says which corpus, extraction method and model the knowledge base
in this GRAPHRAG_HOME was built with. Everything that changes the knowledge base follows it - the
CLI, the sensor, the schedule, the assets started from the UI - so starting the UI without the
build's environment cannot re-sync the home against another corpus or re-extract it with another
method. Switching is an explicit act (`build --switch-corpus` / `--switch-method`).

The lock (`state/build.lock`, an OS file lock) lets one build at a time change a home; it is
released by the OS when the process dies, so a killed build never leaves it taken.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from graphrag_pipeline.storage.files import read_json, write_json


@dataclass
class HomeRecord:
    corpus: str
    method: str
    model: str | None = None  # the chat model of light/general builds
    created_at: float = 0.0
    updated_at: float = 0.0


def home_record_path(home: Path) -> Path:
    return Path(home) / "state" / "home.json"


def read_home_record(home: Path) -> HomeRecord | None:
    try:
        data = read_json(home_record_path(home))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not data.get("corpus") or not data.get("method"):
        return None
    return HomeRecord(
        corpus=str(data["corpus"]),
        method=str(data["method"]),
        model=data.get("model"),
        created_at=float(data.get("created_at") or 0),
        updated_at=float(data.get("updated_at") or 0),
    )


def write_home_record(home: Path, corpus: str, method: str, model: str | None) -> HomeRecord:
    old = read_home_record(home)
    now = time.time()
    record = HomeRecord(str(corpus), method, model, old.created_at if old else now, now)
    write_json(asdict(record), home_record_path(home))
    return record


class SettingsConflict(Exception):
    """A build asked for a corpus or method other than the home's, without saying to switch."""


@dataclass
class BuildSettings:
    corpus: Path
    method: str
    notes: list[str]


def reconcile_settings(
    record: HomeRecord | None,
    corpus: Path,
    corpus_explicit: bool,
    method: str,
    method_explicit: bool,
    *,
    switch_corpus: bool = False,
    switch_method: bool = False,
) -> BuildSettings:
    """The corpus and method a build of this home uses.

    Without a record (a new home) the requested ones. With one: a value given on the command line
    that differs from the record is refused unless switching is asked for; a value that only comes
    from the environment or the defaults gives way to the record (with a note)."""
    notes: list[str] = []
    if record is None:
        return BuildSettings(corpus, method, notes)
    chosen_corpus, chosen_method = corpus, method
    recorded_corpus = Path(record.corpus)
    if corpus != recorded_corpus:
        if switch_corpus:
            notes.append(
                f"switching this home from corpus {recorded_corpus} to {corpus}: documents that are not in "
                f"{corpus} are removed from the knowledge base"
            )
        elif corpus_explicit:
            raise SettingsConflict(
                f"this home was built from corpus {recorded_corpus}, not {corpus}. Use --corpus "
                f"{recorded_corpus} (or no "
                f"--corpus) to update it, a different --home for another knowledge base, or --switch-corpus to rebuild "
                f"this one from {corpus} (documents not in it are removed)"
            )
        else:
            chosen_corpus = recorded_corpus
            notes.append(
                f"using this home's corpus {recorded_corpus} (GRAPHRAG_CORPUS / the default {corpus} is not "
                f"used for a home built from another corpus)"
            )
    if method != record.method:
        if switch_method:
            notes.append(
                f"switching this home from method {record.method} to {method}: every document is extracted again"
            )
        elif method_explicit:
            raise SettingsConflict(
                f"this home was built with method {record.method}, not {method}. Use --method {record.method} (or no "
                f"--method) to update it, or --switch-method to extract every document again with {method}"
            )
        else:
            chosen_method = record.method
            notes.append(f"using this home's method {record.method} (not {method} from GRAPHRAG_METHOD / the default)")
    return BuildSettings(chosen_corpus, chosen_method, notes)


class HomeBusy(Exception):
    """Another build holds this home's lock."""

    def __init__(self, holder: dict):
        self.holder = holder
        pid, since = holder.get("pid"), holder.get("started_at")
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if since else "an unknown time"
        super().__init__(
            f"another build is running on this home (pid {pid}, started {started}); wait for it to "
            f"finish, or run with --wait to wait for it"
        )


class BuildLock:
    """An exclusive OS lock on the home for the duration of a build (released when the process ends)."""

    def __init__(self, home: Path):
        self.path = Path(home) / "state" / "build.lock"
        self._fd: int | None = None

    def holder(self) -> dict:
        try:
            return json.loads(self.path.read_text(encoding="utf-8") or "{}")
        except (OSError, ValueError):
            return {}

    def acquire(self, wait: bool = False, timeout_s: float | None = None, on_wait=None) -> BuildLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        announced = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = self.holder()
                if not wait or (deadline is not None and time.monotonic() > deadline):
                    os.close(fd)
                    raise HomeBusy(holder) from None
                if on_wait and not announced:
                    on_wait(holder)
                    announced = True
                time.sleep(0.5)  # a plain sleep: Ctrl-C and SIGTERM interrupt it
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "started_at": time.time()}).encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> BuildLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
