"""A persistent key-value cache in SQLite, safe when several processes read and write at once.

WAL journaling lets readers proceed while one process writes; writers wait on a busy timeout
instead of failing. Values are JSON.

``KVCache(..., read_only=True)`` (or :func:`open_read_only`) never writes: no folder, no table,
no journal-mode change; lookups of a table that does not exist find nothing and ``put`` is a
no-op. It works on a home the reader cannot write, as :func:`connect_read_only` explains.

The pipeline opens its caches with :func:`open_cache` / :func:`open_cache_read_only`, which give
this SQLite cache or, when the home's caches are in PostgreSQL, `pg_store.PgKVCache` (same interface).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import stat
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote

log = logging.getLogger("graphrag_pipeline.cache")

_SCHEMA = "CREATE TABLE IF NOT EXISTS {table} (key TEXT PRIMARY KEY, value TEXT NOT NULL)"


def _uri(path: Path, mode: str) -> str:
    return f"file:{quote(str(Path(path).resolve()))}?{mode}"


def connect_read_only(path: Path, timeout_s: float = 30.0) -> sqlite3.Connection:
    """A connection to the SQLite file at ``path`` that cannot write and creates no file.

    ``mode=ro`` first: it sees the latest committed data, WAL included, but needs the ``-shm``
    file to exist or be creatable. A WAL database closed cleanly has no ``-shm``, and in a folder
    the reader cannot write SQLite then refuses to open it; when there is no ``-wal`` file either,
    everything is in the main file and it is opened ``immutable`` instead (no locks, no side
    files). Raises FileNotFoundError for a missing file and sqlite3.DatabaseError for one that
    cannot be read (e.g. "file is not a database")."""
    path = Path(path)
    if not stat.S_ISREG(path.stat().st_mode):  # FileNotFoundError / PermissionError propagate
        raise IsADirectoryError(f"{path} is not a file")
    con = sqlite3.connect(
        _uri(path, "mode=ro"), uri=True, timeout=timeout_s, isolation_level=None, check_same_thread=False
    )
    try:
        con.execute(f"PRAGMA busy_timeout={int(timeout_s * 1000)}")
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return con
    except sqlite3.OperationalError as exc:
        con.close()
        wal = path.with_name(path.name + "-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise sqlite3.OperationalError(
                f"{exc} (and its write-ahead log {wal.name} cannot be read without write access)"
            ) from None
    con = sqlite3.connect(_uri(path, "immutable=1"), uri=True, isolation_level=None, check_same_thread=False)
    try:
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error:
        con.close()
        raise
    return con


def _missing_table(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "no such table" in str(exc)


class KVCache:
    def __init__(self, path: Path, table: str = "cache", timeout_s: float = 120.0, *, read_only: bool = False):
        if not table.isidentifier():
            raise ValueError(f"invalid table name {table!r}")
        self.path = Path(path)
        self.table = table
        self.timeout_s = timeout_s
        self.read_only = read_only
        self._local = threading.local()
        if read_only:
            self._con()  # fail now (missing or unreadable file), not at the first lookup
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = self._con()
        con.execute(_SCHEMA.format(table=table))
        con.commit()

    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            if self.read_only:
                con = connect_read_only(self.path, self.timeout_s)
                con.execute("PRAGMA query_only=1")
                self._local.con = con
                return con
            con = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
            # PRAGMA journal_mode can fail with "database is locked" at once, without waiting on the
            # busy timeout, while other processes open or use the same database; retry until the
            # timeout instead.
            deadline = time.monotonic() + self.timeout_s
            while True:
                try:
                    con.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or time.monotonic() > deadline:
                        con.close()
                        raise
                    time.sleep(0.01)
            con.execute("PRAGMA synchronous=NORMAL")
            con.execute(f"PRAGMA busy_timeout={int(self.timeout_s * 1000)}")
            self._local.con = con
        return con

    def _read(self, sql: str, params) -> list:
        try:
            return self._con().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            if not self.read_only:
                raise
            # a reader never fails on the cache: a missing table (nothing cached yet) or a file
            # that went bad since it was opened is a miss
            if not _missing_table(exc):
                log.warning("cache %s unreadable (%s): treated as empty", self.path, exc)
            return []

    def get(self, key: str) -> object | None:
        rows = self._read(f"SELECT value FROM {self.table} WHERE key = ?", (key,))
        return json.loads(rows[0][0]) if rows else None

    def get_many(self, keys: Iterable[str]) -> dict[str, object]:
        keys = list(dict.fromkeys(keys))
        out: dict[str, object] = {}
        for start in range(0, len(keys), 500):
            part = keys[start : start + 500]
            marks = ",".join("?" * len(part))
            for k, v in self._read(f"SELECT key, value FROM {self.table} WHERE key IN ({marks})", part):
                out[k] = json.loads(v)
        return out

    def put(self, key: str, value: object) -> None:
        self.put_many({key: value})

    def put_many(self, items: dict[str, object]) -> None:
        if not items or self.read_only:  # a read-only cache keeps what it has; fresh answers are not stored
            return
        con = self._con()
        con.execute("BEGIN IMMEDIATE")
        try:
            con.executemany(
                f"INSERT OR REPLACE INTO {self.table} (key, value) VALUES (?, ?)",
                [(k, json.dumps(v, ensure_ascii=False)) for k, v in items.items()],
            )
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    def __len__(self) -> int:
        rows = self._read(f"SELECT count(*) FROM {self.table}", ())
        return rows[0][0] if rows else 0


def open_read_only(path: Path, table: str) -> tuple[KVCache | None, str | None]:
    """``(cache, None)`` for a readable cache file; ``(None, None)`` when there is none (nothing
    cached, nothing to say); ``(None, reason)`` when it exists but cannot be read (damaged, no
    permission, a write-ahead log that needs write access)."""
    path = Path(path)
    try:
        return KVCache(path, table, timeout_s=5.0, read_only=True), None
    except FileNotFoundError:
        return None, None
    except (sqlite3.Error, OSError) as exc:
        return None, f"{path}: {exc}"


def open_cache(paths, table: str):
    """The home's cache ``table`` for reading and writing: in the Postgres database of
    :func:`graphrag_pipeline.llm.pg_store.cache_target` when there is one (GRAPHRAG_CACHE_URL, or the
    Dagster instance's), else in the home's SQLite file. Raises CacheStoreError when the database
    cannot be reached."""
    from graphrag_pipeline.llm.pg_store import PgKVCache, cache_target
    from graphrag_pipeline.settings import knowledge_base

    target = cache_target(paths)
    if target is None:
        return KVCache(paths.cache_db, table)
    return PgKVCache(target, table, knowledge_base())


def open_cache_read_only(paths, table: str) -> tuple[object | None, str | None]:
    """:func:`open_read_only` for the home's cache store, whichever it is: ``(cache, None)``,
    ``(None, None)`` when there is nothing cached, ``(None, reason)`` when it cannot be read (a
    damaged file, an unreachable database: the reason names its host, never the password).
    Nothing is written or created."""
    from graphrag_pipeline.llm.pg_store import CacheStoreError, PgKVCache, cache_target
    from graphrag_pipeline.settings import knowledge_base

    try:
        target = cache_target(paths)
    except (CacheStoreError, ValueError) as exc:
        return None, str(exc)
    if target is None:
        return open_read_only(paths.cache_db, table)
    try:
        return PgKVCache(target, table, knowledge_base(), read_only=True), None
    except CacheStoreError as exc:
        return None, str(exc)
