"""The build's survey of the corpus, made by a second process beside the CLI's start-up.

Before it can run anything, a build imports Dagster, opens the instance and recovers dead runs
(3-4 s, one core); only then did it survey the corpus: stat every corpus file and the five output
files of every document, hash what changed (`corpus_sync.survey`: about 2 s at 50,000 documents,
the part of a one-document update that grows with the corpus before any run). The build now starts
that survey in a child process as soon as it holds the home's lock, on the machine's other core,
and takes the result when it needs the plan. The result is the one the build would compute itself
(`survey` is the same function); the build computes it itself when the child failed, when its
corpus or method turned out to be other than the ones it was asked for, or on a remote home.

The child reads the home only (no Dagster, no write). Request and result travel as pickles over the
child's stdin and stdout; its stderr is discarded (a failure is retried in the build).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (imported when used: the build starts the child before it imports the heavy modules)
    from graphrag_pipeline.ingest.corpus_sync import FileState, SyncPlan
    from graphrag_pipeline.ingest.documents import CorpusFile

# below this size of the plan cache (about 7,500 documents at some 270 bytes each) the build surveys
# the corpus itself: the survey takes a fraction of a second, less than the second process costs
PREFETCH_MIN_CACHE_BYTES = 2_000_000


@dataclass
class Survey:
    """What `survey_home` found: the plan without the partitions (corpus_sync.with_partitions), and
    how it compares with the plan cache it started from."""

    plan: SyncPlan
    cache_changed: bool  # the plan's cache differs from the stored one
    fresh: int  # entries of the cache that are new or changed (files hashed, outputs read)
    # temporary files of interrupted writes the second process found under the home, for the build
    # to remove (storage.files.remove_temp_files); the build that surveys itself has removed them before
    temps: list[tuple[str, bool]] = field(default_factory=list)
    # how the surveying process decoded file names (the partition keys are made from them)
    encoding: tuple[str, str] = (sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())


def corpus_cache_path(home: Path) -> Path:
    from graphrag_pipeline.storage.layout import Paths

    return Paths(home).state_dir / "corpus-files.json"


def read_plan_cache(home: Path, corpus: Path, use_cache: bool) -> dict[str, list]:
    """The plan cache of the last build of `home` from `corpus` ({} when it is of another corpus, or
    not used)."""
    from graphrag_pipeline.storage.files import read_json

    cached = read_json(corpus_cache_path(home), {}) if use_cache else {}
    return (cached.get("files") if cached.get("corpus") == str(corpus) else None) or {}


def survey_home(corpus: Path, home: Path, method: str, use_cache: bool) -> Survey:
    """The survey a build of `home` makes of `corpus` (in whichever process runs it)."""
    from graphrag_pipeline.ingest.corpus_sync import survey
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import Store

    previous = read_plan_cache(home, corpus, use_cache)
    plan = survey(corpus, Store(Paths(home)), method, cache=previous)
    fresh = sum(1 for k, v in plan.cache.items() if previous.get(k) != v)
    return Survey(plan, plan.cache != previous, fresh)


# -- the wire: columns of plain values, which pickle about ten times faster than 50,000 objects ---------
_WIRE = 4


def _to_wire(found: Survey) -> tuple:
    plan = found.plan
    files = list(plan.files.values())  # (scan_corpus sets every fspath; an undecodable name travels escaped)
    cache = plan.cache
    assert all(len(v) == 5 for v in cache.values()) and len(cache) == len(plan.states)
    columns = tuple([v[i] for v in cache.values()] for i in range(5))
    return (
        _WIRE,
        [f.key for f in files],
        [f.relpath for f in files],
        [f.fspath for f in files],
        list(cache),
        columns,
        plan.errors,
        plan.stale,
        found.cache_changed,
        found.fresh,
        found.temps,
        found.encoding,
    )


def _from_wire(wire: tuple) -> Survey:
    from graphrag_pipeline.ingest.corpus_sync import FileState, SyncPlan
    from graphrag_pipeline.ingest.documents import CorpusFile

    version, keys, relpaths, fspaths, cache_keys, columns, errors, stale, changed, fresh, temps, encoding = wire
    if version != _WIRE:
        raise ValueError(f"survey format {version}")
    cache = {k: [h, n, st, sig, b] for k, h, n, st, sig, b in zip(cache_keys, *columns)}

    def file(i: int) -> CorpusFile:
        return CorpusFile(keys[i], relpaths[i], None, fspaths[i])

    def state(i: int) -> FileState:
        entry = cache[cache_keys[i]]
        return FileState(entry[0], entry[1], entry[2])

    plan = SyncPlan(_Rows(keys, file), _Rows(cache_keys, state), [], [], stale, [], errors, cache)
    return Survey(plan, changed, fresh, temps, tuple(encoding))


class _Rows(Mapping):
    """A read-only mapping whose values are made when read: `plan.files` and `plan.states` of a
    survey from the child (the build reads a few of 50,000)."""

    def __init__(self, keys: list[str], make: Callable[[int], object]) -> None:
        self._keys, self._make, self._index = keys, make, None

    def _positions(self) -> dict[str, int]:
        if self._index is None:
            self._index = {k: i for i, k in enumerate(self._keys)}
        return self._index

    def __getitem__(self, key: str):
        return self._make(self._positions()[key])

    def __contains__(self, key: object) -> bool:
        return key in self._positions()

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


class Prefetch:
    """A survey running in a child process; `take` returns it when it answers the question asked."""

    def __init__(self, corpus: Path, home: Path, method: str, use_cache: bool) -> None:
        self.request = (str(corpus), str(home), method, use_cache)
        self.started = time.time()  # the child's stats are taken after this
        self.proc: subprocess.Popen | None = None
        # the child imports this package the way this process did (an installed package, or a
        # source tree on sys.path)
        here = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}
        try:
            # -P: not the current folder first on the child's path (a stray `pickle.py` there);
            # this interpreter's flags (-X utf8 changes how file names decode, hence the keys)
            self.proc = subprocess.Popen(
                [sys.executable, "-P", *_interpreter_flags(), "-c", _CHILD],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # a Ctrl-C goes to the build, which stops the child (close)
            )
            assert self.proc.stdin is not None
            self.proc.stdin.write(pickle.dumps(self.request))
            self.proc.stdin.close()
        except (OSError, TypeError, ValueError):  # (TypeError: no sys.executable)
            self.close()
        self.temps_handled = False  # set by the build once it removed (or cleaned) temporary files

    def take(self, corpus: Path, home: Path, method: str, use_cache: bool) -> Survey | None:
        """The child's survey when it was asked exactly this and succeeded; else None (and the child
        is stopped): the caller surveys itself."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if (str(corpus), str(home), method, use_cache) != self.request:
            _stop(proc)
            return None
        try:
            assert proc.stdout is not None
            data = proc.stdout.read()
            code = proc.wait()
            if code != 0 or not data:
                return None
            found = _from_wire(pickle.loads(data))
        except (OSError, EOFError, ValueError, TypeError, pickle.UnpicklingError):  # the build surveys itself
            return None
        finally:  # (a stop signal while waiting goes on to the build, with the child stopped)
            _stop(proc)
        same = found.encoding == (sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())
        return found if same else None  # (keys are made from decoded file names)

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            _stop(proc)


def _interpreter_flags() -> list[str]:
    try:  # (what multiprocessing passes to the interpreters it starts)
        return list(subprocess._args_from_interpreter_flags())  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a Python without it: the encoding check in `take` still holds
        return []


def _stop(proc: subprocess.Popen) -> None:
    try:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    except OSError:
        pass
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass


# (run as a module by name, not as __main__: the pickled result names its classes by their module)
_CHILD = "import sys; from graphrag_pipeline.ingest.plan_prefetch import child; sys.exit(child())"


def child() -> int:
    corpus, home, method, use_cache = pickle.loads(sys.stdin.buffer.read())
    from graphrag_pipeline.storage.files import find_temp_files

    temps = find_temp_files(Path(home))  # (listed only: the build removes them, holding the lock)
    result = survey_home(Path(corpus), Path(home), method, use_cache)
    result.temps = temps
    data = pickle.dumps(_to_wire(result), protocol=pickle.HIGHEST_PROTOCOL)
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return 0
