"""The index a long-lived reader uses, replaced by a newly published one without a restart: the
one mechanism behind `open_index` (LiveIndex) and `graphrag-pipeline serve` (IndexHolder).

A publish renames a whole new DuckDB file over the old one (index/duckdb_writer.py), so the file's
identity (device, inode, mtime, size: one `os.stat`, a few microseconds) tells every request whether
the index changed. The first request that sees a new identity opens and preloads the new file while
requests already running keep the index they leased; once loaded it becomes current in one
assignment, and the old one is closed when its last lease is returned. A file replaced while it
was being loaded is loaded again, so what is served is always one whole published version. Each
version is attached to its own in-memory DuckDB instance (as every DuckDBIndex is), so the old and the new
file are both open at once, each as itself.

The identity is compared before each query (serve: each request), at most once per `check_s`.

With Elasticsearch (GRAPHRAG_ES_URL) the reads are live; the index's `meta` document (its
index_id and version) is compared at most once per `es_check_s` and the reader reopened when it
changed (a new embedder or dimension).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphrag_pipeline.index.duckdb_reader import DuckDBIndex, IndexNotFoundError, IndexUnreadableError
from graphrag_pipeline.storage.layout import Paths


class Busy(RuntimeError):
    """The index did not become free in time (another query holds it)."""


@dataclass(eq=False)
class Loaded:
    """One opened index version and the requests using it."""

    index: Any
    identity: tuple
    backend: str
    loaded_at: float = field(default_factory=time.time)
    leases: int = 0
    retired: bool = False
    # a DuckDB connection is not to be used by two threads at once: its reads are taken in turn
    lock: threading.RLock | None = None

    @property
    def meta(self) -> dict:
        return dict(getattr(self.index, "meta", {}) or {})

    def describe(self) -> dict:
        meta = self.meta
        return {
            "backend": self.backend,
            "index_id": meta.get("index_id"),
            "index_version": meta.get("index_version"),
            "built_at": meta.get("built_at"),
            "counts": meta.get("counts") or (self.index.counts() if hasattr(self.index, "counts") else {}),
            "loaded_at": self.loaded_at,
        }


class IndexHolder:
    def __init__(
        self,
        home: Path,
        backend: str | None = None,
        es_check_s: float = 1.0,
        *,
        preload: bool = True,
        check_s: float = 0.0,
    ):
        """preload: hold each DuckDB version's vectors in memory (see DuckDBIndex); check_s: compare
        the DuckDB file's identity at most this often (0: on every call)."""
        from graphrag_pipeline.index.es_writer import EsConfig

        self.paths = Paths(Path(home))
        self.es_cfg = EsConfig.from_env(self.paths.home) if backend != "duckdb" else None
        if backend == "elasticsearch" and self.es_cfg is None:
            raise ValueError("backend 'elasticsearch' needs GRAPHRAG_ES_URL")
        self.backend = "elasticsearch" if self.es_cfg is not None else "duckdb"
        self.es_check_s = es_check_s
        self.preload = preload
        self.check_s = check_s
        self._checked = (0.0, None)  # (monotonic time, identity) of the last stat of the DuckDB file
        self._current: Loaded | None = None
        self._state = threading.Lock()  # guards _current and the lease counts
        self._reload = threading.Lock()  # one load at a time
        self._failed: tuple | None = None  # an identity that could not be opened (not retried per request)
        self._es_checked = (0.0, None)
        self._es_client = None
        self.reloads = 0

    # -- identity -----------------------------------------------------------------------------------------------------
    def _identity(self, fresh: bool = False) -> tuple:
        if self.es_cfg is None:
            checked_at, ident = self._checked
            if not fresh and ident is not None and time.monotonic() - checked_at < self.check_s:
                return ident
            try:
                st = os.stat(self.paths.index_file)
            except FileNotFoundError:
                raise IndexNotFoundError(
                    f"no search index at {self.paths.index_file}: run `graphrag-pipeline build` first"
                ) from None
            ident = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
            self._checked = (time.monotonic(), ident)
            return ident
        checked_at, ident = self._es_checked
        if ident is not None and time.monotonic() - checked_at < self.es_check_s:
            return ident
        if self._es_client is None:
            self._es_client = self.es_cfg.client()
        try:
            res = self._es_client.options(ignore_status=404).get(index=self.es_cfg.alias, id="meta")
        except Exception as exc:  # noqa: BLE001 - said as an unreadable index
            raise IndexUnreadableError(f"Elasticsearch at {self.es_cfg.url} cannot be read: {exc}") from None
        if not res.get("found"):
            raise IndexNotFoundError(
                f"no index behind alias {self.es_cfg.alias!r}: run `graphrag-pipeline build` with GRAPHRAG_ES_URL set"
            )
        meta = json.loads(res["_source"].get("content_with_weight") or "{}")
        ident = (meta.get("index_id"), meta.get("index_version"), meta.get("embedding_model"))
        self._es_checked = (time.monotonic(), ident)
        return ident

    def _open(self) -> Loaded:
        if self.es_cfg is not None:
            from graphrag_pipeline.index.es_reader import EsIndex

            ident = self._identity()
            return Loaded(EsIndex(self.es_cfg), ident, "elasticsearch")
        for _ in range(5):
            before = self._identity(fresh=True)
            index = DuckDBIndex(self.paths.index_file, preload=self.preload)
            after = self._identity(fresh=True)
            if before == after:  # the file loaded is the one these stats describe
                return Loaded(index, after, "duckdb", lock=threading.RLock())
            index.close()  # replaced while loading: load the newer one
        raise Busy("the index was replaced five times while being loaded; try again")

    # -- leases -------------------------------------------------------------------------------------------------------
    def current(self) -> Loaded:
        """The newest published index, loading it if it changed since the last request."""
        ident = self._identity()
        cur = self._current
        if cur is not None and (cur.identity == ident or ident == self._failed):
            return cur
        if cur is not None and not self._reload.acquire(blocking=False):
            return cur  # another request is loading the new version: this one is served by the old one
        if cur is None:
            self._reload.acquire()
        try:
            cur = self._current
            ident = self._identity(fresh=True)
            if cur is not None and cur.identity == ident:
                return cur
            try:
                new = self._open()
            except IndexUnreadableError:
                if cur is None:
                    raise
                self._failed = ident  # keep serving the last good version
                return cur
            self._failed = None
            with self._state:
                old, self._current = self._current, new
                close_old = old is not None and old.leases == 0
                if old is not None:
                    old.retired = True
            if old is not None:
                self.reloads += 1
            if close_old:
                old.index.close()
            return new
        finally:
            self._reload.release()

    def acquire(self) -> Loaded:
        while True:
            loaded = self.current()
            with self._state:
                if not loaded.retired:  # not swapped out (and closed) between the two steps
                    loaded.leases += 1
                    return loaded

    def release(self, loaded: Loaded) -> None:
        with self._state:
            loaded.leases -= 1
            close = loaded.retired and loaded.leases == 0
        if close:
            loaded.index.close()

    def run(self, loaded: Loaded, fn: Callable[[Any], Any], deadline: float) -> Any:
        """fn(index) on a leased index, then the lease is returned (also when the caller gave up waiting)."""
        try:
            if loaded.lock is None:
                return fn(loaded.index)
            if not loaded.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise Busy("the index is busy with other queries")
            try:
                return fn(loaded.index)
            finally:
                loaded.lock.release()
        finally:
            self.release(loaded)

    def close(self) -> None:
        with self._state:
            cur, self._current = self._current, None
            if cur is not None:
                cur.retired = True
                close = cur.leases == 0
        if cur is not None and close:
            cur.index.close()
        if self._es_client is not None:
            self._es_client.close()


# the index/protocol.SearchIndex and GraphLookup methods a LiveIndex forwards to the current version
_FORWARDED = (
    "embedder",
    "type_pool",
    "counts",
    "entities_by_vector",
    "entities_by_types",
    "entities_by_keys",
    "keys_of_types",
    "nhop",
    "relations_by_vector",
    "relations_by_pairs",
    "relations_of",
    "reports_for_entities",
    "reports_by_vector",
    "reports_by_importance",
    "chunks_by_ids",
    "chunks_by_vector",
    "entity_sources",
    "chunk_texts",
)


class LiveIndex:
    """The published DuckDB index of a home, always its newest version (what `open_index` returns).

    Before a query (at most once per `check_s`) the file's identity is compared with the version
    open; after a publish the new file is opened and the old one closed once no query uses it
    (IndexHolder's leases). `query()` runs a whole query on one version (`lease`); each other call
    leases on its own. Safe to share between threads: the reads of one version are taken in turn."""

    def __init__(self, home: Path, *, preload: bool = False, check_s: float = 0.1):
        self._holder = IndexHolder(home, backend="duckdb", preload=preload, check_s=check_s)
        self._holder.current()  # a missing or unreadable index is said now, as DuckDBIndex does
        self.path = self._holder.paths.index_file

    @contextmanager
    def lease(self) -> Iterator[DuckDBIndex]:
        """The current version, kept open and used by this thread alone until the block ends."""
        loaded = self._holder.acquire()
        try:
            with loaded.lock:
                yield loaded.index
        finally:
            self._holder.release(loaded)

    @property
    def reloads(self) -> int:
        """How many newer versions were opened since this index was."""
        return self._holder.reloads

    @property
    def meta(self) -> dict:
        return self._holder.current().meta

    @property
    def dim(self) -> int:
        return self._holder.current().index.dim

    def __getattr__(self, name: str) -> Any:
        """Any other attribute of DuckDBIndex (e.g. `con`): the current version's, for one-off use in
        this thread (a query or a loop of reads that must see one version takes a `lease`)."""
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._holder.current().index, name)

    def batch(self, calls: list[tuple[Callable[..., Any], tuple]]) -> list:
        """The calls on one version (methods of this LiveIndex are run on that version)."""
        with self.lease() as index:
            return [
                getattr(index, fn.__name__)(*args) if getattr(fn, "__self__", None) is self else fn(*args)
                for fn, args in calls
            ]

    def close(self) -> None:
        self._holder.close()

    def __enter__(self) -> LiveIndex:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _forward(name: str):
    def call(self: LiveIndex, *args, **kwargs):
        with self.lease() as index:
            return getattr(index, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = getattr(DuckDBIndex, name).__doc__
    return call


for _name in _FORWARDED:
    setattr(LiveIndex, _name, _forward(_name))
