"""Atomic file writes: every output is written beside its target and renamed into place.

A reader therefore sees either the old file or the new one, never a half-written file, and
two processes writing different partitions never touch the same file. A process killed between
the two leaves a `.<name>.<random>.tmp` file, which `clean_temp_files` removes.

Reading a file that exists but is damaged (garbled JSON, a truncated Parquet file) raises
`DamagedFileError`, whose message names the file and what is wrong with it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import polars as pl


class DamagedFileError(OSError, ValueError):
    """A file that exists but cannot be read as what it should be (garbled JSON, a truncated or
    altered Parquet file). The message names the file and the problem; `path` is the file.

    Both an OSError and a ValueError, so code that already handled a failed read or a JSON decode
    error keeps handling it."""

    def __init__(self, message: str, path: Path | str | None = None):
        super().__init__(message)
        self.path = Path(path) if path is not None else None

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self):
        return (type(self), (str(self), self.path))


@contextmanager
def atomic_path(target: Path, suffix: str = "", *, free_old_later: bool = False) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; rename it onto target on success.

    free_old_later: inside `freeing_replaced_files_later` (a CLI build), the file the rename replaces
    is first given a temporary name too, and removed by a background thread once the new one is in
    place. Renaming over the last name of a large file frees its blocks and cached pages before the
    rename returns (0.3 s for the 1.1 GB search index of 50,000 documents); the build goes on
    meanwhile. A process killed before the thread ran leaves the name to clean_temp_files."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(target, suffix)
    try:
        yield Path(tmp)
        old = _keep_old(target) if free_old_later and _FREE_LATER.enabled else None
        try:
            os.replace(tmp, target)
        except BaseException:
            if old is not None:
                _unlink_quietly(old)
            raise
        if old is not None:
            free_later(old)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class _FreeLater:
    def __init__(self) -> None:
        self.enabled = False
        self.threads: list[threading.Thread] = []


_FREE_LATER = _FreeLater()


@contextmanager
def freeing_replaced_files_later() -> Iterator[None]:
    """While inside, `atomic_path(..., free_old_later=True)` removes the replaced file in the background;
    on leaving, every such removal is waited for (nothing is left behind once a build returns)."""
    _FREE_LATER.enabled = True
    try:
        yield
    finally:
        _FREE_LATER.enabled = False
        while _FREE_LATER.threads:
            _FREE_LATER.threads.pop().join()


def free_later(path: str | Path) -> None:
    """Remove the file at `path` (a temporary name, which clean_temp_files knows): in a background
    thread inside `freeing_replaced_files_later`, else here."""
    if not _FREE_LATER.enabled:
        _unlink_quietly(path)
        return
    thread = threading.Thread(target=_unlink_quietly, args=(path,), name="free-old-file", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # no thread to be had: free it here
        _unlink_quietly(path)
    else:
        _FREE_LATER.threads.append(thread)


def temp_name(target: Path, suffix: str) -> str:
    """A free temporary name beside `target`, of the pattern clean_temp_files removes."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix + ".tmp", dir=target.parent)
    os.close(fd)
    os.unlink(tmp)  # let the writer create it (DuckDB refuses an existing empty file)
    return tmp


def _keep_old(target: Path) -> str | None:
    """A second, temporary name for the file at `target` (None when there is none, or no hard link)."""
    old = temp_name(target, ".old")
    try:
        os.link(target, old)
    except OSError:
        return None
    return old


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass  # gone already; or left for clean_temp_files


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# LZ4, not polars' default zstd: these are working files, written and read again on every update;
# on the merged graph of 10,000 documents LZ4 writes 2.5x and reads 2x faster for 1.7x the bytes
PARQUET_COMPRESSION = "lz4"
# and without column statistics (min/max per row group): no reader here filters by them (keys are
# spread over every row group), and on the merged graph of 50,000 documents they cost a third of
# the writing time (nodes and edges: 1.6 -> 1.2 s) and a fifth of the reading
PARQUET_STATISTICS = False


# polars encodes and hashes a table chunk by chunk, the chunks in parallel: a table held as one chunk
# of 800,000 relations (what a concat or a rechunk leaves) was written in 1.1 s and row-hashed in
# 0.54 s, the same table viewed as chunks of SLICE_ROWS rows (slices: no copy) in 0.68 s and 0.10 s,
# with the same hashes and the same bytes read back (the merged graph of 50,000 documents, 2 cores)
SLICE_ROWS = 8192


def in_slices(df: pl.DataFrame, rows: int = SLICE_ROWS) -> pl.DataFrame:
    """`df` (same rows, same order) as chunks of `rows` rows, whatever chunks it had: one chunk
    first, then slices of it. A table of at most `rows` rows is returned as it is."""
    if df.height <= rows:
        return df
    whole = df.rechunk()
    return pl.concat([whole.slice(i, rows) for i in range(0, whole.height, rows)], rechunk=False)


def write_parquet(df: pl.DataFrame, target: Path, *, checksum: bool = False, remember: bool = False) -> str | None:
    """Write `df` atomically; with `checksum`, return the SHA-256 of the file as written.
    remember: keep `df` in the table memo as the file's content (see TableMemo), when it is on."""
    with atomic_path(target, ".parquet") as tmp:
        in_slices(df).write_parquet(tmp, compression=PARQUET_COMPRESSION, statistics=PARQUET_STATISTICS)
        digest = file_sha256(tmp) if checksum else None
        # the identity of the file written (a rename keeps it), not of whatever holds the name later
        written = TABLES.identity(tmp) if remember and TABLES.enabled else None
    TABLES.put(written, df)
    return digest


def copy_file(source: Path, target: Path) -> None:
    """Copy `source` onto `target` atomically (a byte copy: no table is decoded and encoded again).

    A hard link where the file system allows one: no file here is ever changed in place (every
    write goes to a new file renamed over the old name), so two names of one file stay equal, and
    a graph of a million edges passed from stage to stage costs no copy of its bytes."""
    with atomic_path(target, Path(source).suffix) as tmp:
        try:
            os.link(source, tmp)
        except OSError:  # another file system, or links not supported
            shutil.copyfile(source, tmp)


_PARQUET_MAGIC = b"PAR1"


def verify_parquet(path: Path, footer: bool = True) -> None:
    """Check that `path` is a whole Parquet file by reading only its ends and its footer (cheap);
    not `footer`: its ends only (the markers and the footer's length, no decoding).

    Raises DamagedFileError (naming the file) when it is truncated or its footer cannot be decoded,
    FileNotFoundError when it is missing. A change in the middle of the file is not seen here: the
    checksums recorded by the store catch that."""
    path = Path(path)
    size = os.stat(path).st_size
    if size < 12:
        raise DamagedFileError(f"{path} is not a readable Parquet file (truncated? it is only {size} bytes)", path)
    with open(path, "rb") as fh:
        head = fh.read(4)
        fh.seek(-8, os.SEEK_END)
        tail = fh.read(8)
    if head != _PARQUET_MAGIC:
        raise DamagedFileError(
            f"{path} is not a readable Parquet file (it does not start with the Parquet marker)", path
        )
    if tail[4:] != _PARQUET_MAGIC:
        raise DamagedFileError(
            f"{path} is not a readable Parquet file (truncated? its footer is missing; {size:,} bytes)", path
        )
    length = int.from_bytes(tail[:4], "little")
    if length > size - 12:
        raise DamagedFileError(
            f"{path} is not a readable Parquet file (truncated? its footer says {length:,} bytes of "
            f"metadata, the file has {size:,})",
            path,
        )
    if not footer:
        return
    try:
        pl.read_parquet_schema(path)
    except pl.exceptions.PolarsError as exc:
        raise DamagedFileError(
            f"{path} is not a readable Parquet file (its footer cannot be decoded: {_short(exc)})", path
        ) from exc


def parquet_problem(path: Path, sha256: str | None = None) -> str | None:
    """What is wrong with a Parquet file, naming it (None when fine). With `sha256` (recorded when the
    file was written) the whole file is compared with it; without, only its footer is checked."""
    path = Path(path)
    try:
        if sha256:
            if file_sha256(path) == sha256:
                return None
            verify_parquet(path)  # a truncated file is described as such
            return f"{path} does not match the checksum recorded when it was written (damaged since?)"
        verify_parquet(path)
    except FileNotFoundError:
        return f"{path} is missing"
    except DamagedFileError as exc:
        return str(exc)
    except OSError as exc:
        return f"{path} cannot be read: {exc.strerror or exc}"
    return None


def _short(exc: BaseException, limit: int = 160) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class TableMemo:
    """The large tables this process wrote or read lately, by the identity of their file: device,
    inode, size, modification time and a hash of the file's last 64 KiB (the Parquet footer, with
    the offsets and sizes of every column chunk). No file here is changed in place (every write is
    a new file renamed over the name), and a hard link shares its file's identity, so a stage
    reading the graph that an earlier stage of the same process wrote (or linked) gets the table
    without decoding it again: at 50,000 documents the merged graph is read by resolution, the
    clustering, the reports, the index and three checks of one build. A file replaced since (a new
    inode) or changed in its size, time or last 64 KiB is read again; one altered in place further
    up with its size and time put back is not noticed here (the checksums of `verify` are).

    Bounded: at most `max_tables` tables and `max_bytes` of them (a quarter of the machine's memory,
    at most 4 GiB; a larger table is not kept), the least recently used dropped first. Off unless a
    caller turns it on (`remembering`): the CLI's build does, for its in-process runs. A run in its
    own process (Dagster's multiprocess, k8s or celery executors) reads the files."""

    def __init__(self, max_tables: int = 48, max_bytes: int | None = None):
        self.max_tables = max_tables
        self.max_bytes = max_bytes if max_bytes is not None else _memo_budget()
        self.enabled = 0
        self._tables: dict[tuple, tuple[pl.DataFrame, int]] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self._loading: dict[tuple, threading.Event] = {}  # (device, inode) -> set when its prefetch ends
        self._prefetchers: list[threading.Thread] = []

    @staticmethod
    def identity(path: Path) -> tuple | None:
        try:
            st = os.stat(path)
            with open(path, "rb") as fh:
                fh.seek(max(0, st.st_size - 65536))
                tail = hashlib.blake2b(fh.read(), digest_size=16).digest()
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, tail)

    def get(self, path: Path) -> pl.DataFrame | None:
        return self.lookup(path)[1]

    def get_key(self, key: tuple) -> pl.DataFrame | None:
        """The table kept under `key` (a table assembled from several files: see sliced_graph),
        None when not kept or when the memo is off."""
        if not self.enabled:
            return None
        with self._lock:
            entry = self._tables.pop(key, None)
            if entry is not None:
                self._tables[key] = entry
                self.hits += 1
        return entry[0] if entry is not None else None

    def prefetch_group(self, paths: list[Path], key, load) -> None:
        """Read the table assembled from `paths` (`load(paths)`) into the memo under `key(paths)` in
        a background thread (see `prefetch`: evicts nothing, a failure is left to the reader); a
        reader of any of the files waits for it (`await_prefetch`)."""
        if not self.enabled or not paths:
            return
        done = threading.Event()
        ids = []
        with self._lock:
            for path in paths:
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                file_id = (st.st_dev, st.st_ino)
                if file_id in self._loading:
                    continue
                self._loading[file_id] = done
                ids.append(file_id)

        def run() -> None:
            try:
                if self.enabled:
                    k = key(paths)
                    if k is not None and not self._holds(k):
                        df = load(paths)
                        if key(paths) == k:
                            self.put(k, df, evict=False)
            except BaseException:  # noqa: BLE001 - the reader reads it and reports
                pass
            finally:
                for file_id in ids:
                    self._release(file_id, done)
                done.set()

        thread = threading.Thread(target=run, name="table-prefetch-group", daemon=True)
        try:
            thread.start()
            self._prefetchers.append(thread)
        except BaseException:
            for file_id in ids:
                self._release(file_id, done)
            raise

    def lookup(self, path: Path) -> tuple[tuple | None, pl.DataFrame | None]:
        """(the file's identity, its table when kept); (None, None) when the memo is off."""
        if not self.enabled:
            return None, None
        key = self.identity(path)
        with self._lock:
            entry = self._tables.pop(key, None) if key is not None else None
            if entry is not None:
                self._tables[key] = entry  # most recently used last
                self.hits += 1
        return key, (entry[0] if entry is not None else None)

    def put(self, key: tuple | None, df: pl.DataFrame, *, evict: bool = True) -> bool:
        """Keep `df` as the content of the file whose identity is `key` (taken from the file the
        table was written to or read from: see write_parquet and read_parquet); the least recently
        used tables make room. evict=False: keep it only where it fits beside what is kept.
        Returns whether it is kept."""
        if not self.enabled or key is None:
            return False
        size = int(df.estimated_size())
        with self._lock:
            if not evict and key not in self._tables:
                used = sum(n for _, n in self._tables.values())
                if len(self._tables) + 1 > self.max_tables or used + size > self.max_bytes:
                    return False
            self._tables.pop(key, None)
            if size > self.max_bytes:
                return False
            self._tables[key] = (df, size)
            while len(self._tables) > self.max_tables or sum(n for _, n in self._tables.values()) > self.max_bytes:
                self._tables.pop(next(iter(self._tables)))
            return key in self._tables

    def forget(self, keys: Collection[tuple | None]) -> None:
        """Drop the tables of these file identities (files a stage has just superseded)."""
        with self._lock:
            for key in keys:
                if key is not None:
                    self._tables.pop(key, None)

    def prefetch(self, paths: Collection[Path], workers: int = 2) -> None:
        """Read these Parquet files into the memo in background threads (two files at a time, in
        this order) while the caller goes on: a build sets up its last run and chunks the changed
        documents (Python work on one core) before its first whole-corpus stage reads the merged
        graph, whose decoding (which does not hold the GIL) then costs that stage nothing. A
        `read_parquet(..., remember=True)` of a file (by any of its names) still being prefetched
        waits for it instead of decoding it a second time. The prefetch evicts nothing: it stops
        at the first table that would not fit beside what the memo holds. A file that cannot be
        read is left to its reader (which says what is wrong). Nothing happens while the memo is off."""
        if not self.enabled:
            return
        todo: list[tuple[Path, tuple, threading.Event]] = []
        with self._lock:
            for path in paths:
                try:
                    st = os.stat(path)
                except OSError:
                    continue  # its reader will say
                file_id = (st.st_dev, st.st_ino)
                if file_id not in self._loading and all(file_id != t[1] for t in todo):
                    done = self._loading[file_id] = threading.Event()
                    todo.append((Path(path), file_id, done))
        if not todo:
            return
        queue = iter(list(todo))
        take = threading.Lock()
        full = threading.Event()  # the memo is full: the rest is left to its readers

        def load() -> None:
            while True:
                with take:
                    item = next(queue, None)
                if item is None:
                    return
                path, file_id, done = item
                try:
                    if self.enabled and not full.is_set():
                        key = self.identity(path)
                        if key is not None and not self._holds(key):
                            df = pl.read_parquet(path)
                            if self.identity(path) == key and not self.put(key, df, evict=False):
                                full.set()
                except BaseException:  # noqa: BLE001 - polars' panics included: the reader reads it and reports
                    pass
                finally:
                    self._release(file_id, done)

        threads = [threading.Thread(target=load, name="table-prefetch", daemon=True) for _ in range(workers)]
        try:
            for thread in threads:
                thread.start()
                self._prefetchers.append(thread)
        finally:
            if not any(t.is_alive() for t in threads):  # none started: no reader may wait for them
                for _, file_id, done in todo:
                    self._release(file_id, done)

    def _release(self, file_id: tuple, done: threading.Event) -> None:
        with self._lock:
            if self._loading.get(file_id) is done:
                del self._loading[file_id]
        done.set()

    def _holds(self, key: tuple) -> bool:
        with self._lock:
            return key in self._tables

    def await_prefetch(self, path: Path) -> None:
        """Wait until the file at `path` is no longer being prefetched (see `prefetch`)."""
        if not self._loading:
            return
        try:
            st = os.stat(path)
        except OSError:
            return
        done = self._loading.get((st.st_dev, st.st_ino))
        if done is not None:
            done.wait()

    def clear(self) -> None:
        for thread in self._prefetchers:
            thread.join()
        self._prefetchers.clear()
        with self._lock:
            self._tables.clear()
            self.hits = 0
            leftover, self._loading = list(self._loading.values()), {}
        for done in leftover:  # never left for a later reader to wait on
            done.set()


def _memo_budget() -> int:
    """A quarter of the memory this process may use (the machine's, or its container's cgroup
    limit when lower), at most 4 GiB."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        total = 8 << 30
    limit = _cgroup_memory_limit()
    if limit is not None:
        total = min(total, limit)
    return min(4 << 30, total // 4)


def _cgroup_memory_limit() -> int | None:
    """The memory limit of this process's cgroup (v2 memory.max, else v1), None when unlimited or unknown."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < (1 << 60):  # v1 says "unlimited" with a huge number
            return int(text)
        return None
    return None


TABLES = TableMemo()


_BUNDLE_TABLE = re.compile(r"\.g\d+\.parquet$")  # ParquetBundle's file names


def stat_identity(path: Path) -> tuple | None:
    """(device, inode, size, modification time) of the file, None when it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class VerdictMemo:
    """What a check found in some files, by the files' identities (TableMemo.identity), kept while
    the table memo is on (a CLI build). A check asked again of the same bytes answers from here: the
    resolved graph is most often a hard link of the knowledge graph checked a moment before, and the
    published index was verified by the publish that wrote it (each check re-read a million edges:
    0.25-0.3 s at 50,000 documents). A file replaced or changed since has another identity."""

    def __init__(self, size: int = 8):
        self.size = size
        self._verdicts: dict[tuple, object] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(kind: str, identities: list[tuple | None]) -> tuple | None:
        """The memo's key for these file identities (None - nothing kept - when the memo is off or a
        file could not be identified)."""
        if not TABLES.enabled or any(i is None for i in identities):
            return None
        return (kind, *identities)

    def identities(self, paths: list[Path]) -> list[tuple | None]:
        """The files' identities now (None for each when the memo is off: nothing is read). A table
        of a bundle (its name carries its generation: never rewritten in place, a new generation is
        a new file) is identified by its device, inode, size and modification time alone: a graph in
        slices is some 400 files at 50,000 documents, and each check would read every one's tail."""
        if not TABLES.enabled:
            return [None] * len(paths)
        return [stat_identity(p) if _BUNDLE_TABLE.search(Path(p).name) else TableMemo.identity(p) for p in paths]

    def get(self, key: tuple | None):
        with self._lock:
            return self._verdicts.get(key) if key is not None else None

    def put(self, key: tuple | None, verdict) -> None:
        if key is None:
            return
        with self._lock:
            self._verdicts.pop(key, None)
            self._verdicts[key] = verdict
            while len(self._verdicts) > self.size:
                self._verdicts.pop(next(iter(self._verdicts)))

    def clear(self) -> None:
        with self._lock:
            self._verdicts.clear()


VERDICTS = VerdictMemo()


@contextmanager
def remembering() -> Iterator[TableMemo]:
    """Turn the table memo on for the duration (nested uses are fine); it is emptied at the end."""
    TABLES.enabled += 1
    try:
        yield TABLES
    finally:
        TABLES.enabled -= 1
        if not TABLES.enabled:
            TABLES.clear()
            VERDICTS.clear()


def read_parquet(
    path: Path, schema: dict | None = None, columns: list[str] | None = None, *, remember: bool = False
) -> pl.DataFrame:
    """The table in `path` (only `columns`, when given); an empty table (of `schema`) when the file
    does not exist. A file that exists but cannot be read raises DamagedFileError naming it.
    remember: a large table read again by later stages: taken from (or, read whole, kept in) the
    table memo when it is on (see TableMemo)."""
    path = Path(path)
    if remember and TABLES.enabled:
        TABLES.await_prefetch(path)
        before, known = TABLES.lookup(path)
        if known is not None:
            return known.select(columns) if columns is not None else known
        if columns is None:
            df = read_parquet(path, schema)
            if before is not None and TABLES.identity(path) == before:  # not replaced while it was read
                TABLES.put(before, df)
            return df
    if not path.exists():
        if schema and columns:
            return pl.DataFrame(schema={c: schema[c] for c in columns})
        return pl.DataFrame(schema=schema) if schema else pl.DataFrame()
    try:
        return pl.read_parquet(path, columns=columns)
    except pl.exceptions.PolarsError as exc:
        try:
            verify_parquet(path)
        except DamagedFileError as damaged:
            raise damaged from exc
        raise DamagedFileError(f"{path} is not a readable Parquet file ({_short(exc)})", path) from exc


def write_json(data: object, target: Path, *, compact: bool = False) -> None:
    """Write `data` as JSON atomically; `compact` (one line, no indent) for large machine-read files:
    Python's C encoder does not indent, so a 50,000-entry table is written several times faster."""
    layout = {"separators": (",", ":")} if compact else {"indent": 1}
    text = json.dumps(data, ensure_ascii=False, sort_keys=True, **layout)
    try:
        payload = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (e.g. from an undecodable file name): escape it, never fail
        payload = json.dumps(data, ensure_ascii=True, sort_keys=True, **layout).encode("ascii")
    with atomic_path(target, ".json") as tmp:
        tmp.write_bytes(payload)


def read_json(path: Path, default: object = None) -> object:
    """The JSON value in `path`; `default` when the file does not exist. A file that exists but is not
    valid JSON raises DamagedFileError naming it and where it goes wrong."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return default
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DamagedFileError(f"{path} is not valid JSON (not UTF-8 text at byte {exc.start:,})", path) from exc
    if not text.strip():
        raise DamagedFileError(f"{path} is not valid JSON (the file is empty)", path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DamagedFileError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})", path
        ) from exc
    except RecursionError as exc:
        raise DamagedFileError(f"{path} is not valid JSON (nested too deeply)", path) from exc


# `atomic_path`'s temporary names: "." + target name + "." + 8 random characters + suffix + ".tmp"
# (and the side files DuckDB keeps beside a database it writes there)
_TEMP_NAME = re.compile(r"^\..+\.[a-z0-9_]{8}(?:\.[A-Za-z0-9]+)*\.tmp(?:\.wal|\.tmp)?$")


def is_temp_file_name(name: str) -> bool:
    """Is `name` a temporary file name of `atomic_path` (a leftover when its writer died)?"""
    return name.startswith(".") and bool(_TEMP_NAME.match(name))


def clean_temp_files(home: Path) -> list[Path]:
    """Remove the temporary files atomic writes left under `home` when their process was killed.

    Only names of `atomic_path`'s pattern are touched. Call it only while no other process writes
    to the home (the build lock): a live writer's temporary file would be removed too."""
    return remove_temp_files(find_temp_files(home))


def find_temp_files(home: Path) -> list[tuple[str, bool]]:
    """The temporary files of `atomic_path`'s pattern under `home`, each with whether it is a folder
    (clean_temp_files removes them; a build's second process finds them beside its survey)."""
    found: list[tuple[str, bool]] = []
    home = Path(home)
    if not home.is_dir():
        return found
    # what os.walk(home) visits, with a name checked before anything else: the home holds a few files
    # per document, and only a hidden name can be a temporary file
    todo = [os.fspath(home)]
    while todo:
        folder = todo.pop()
        temps: list[tuple[str, bool]] = []
        folders: list[str] = []
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    name = entry.name
                    if name.startswith(".") and is_temp_file_name(name):
                        try:
                            temps.append((entry.path, entry.is_dir()))
                        except OSError:
                            temps.append((entry.path, False))  # as os.walk: not a folder
                        continue
                    try:
                        if entry.is_dir(follow_symlinks=False):  # os.walk descends into no symlink
                            folders.append(entry.path)
                    except OSError:
                        pass
        except OSError:
            continue  # a folder that cannot be listed (whole) is passed over, as os.walk does
        todo.extend(folders)
        found.extend(temps)
    return found


def remove_temp_files(found: list[tuple[str, bool]]) -> list[Path]:
    """Remove what find_temp_files found (what is gone already is not named); the removed, sorted."""
    removed: list[Path] = []
    for path, is_dir in found:
        if is_dir:  # e.g. DuckDB's spill folder
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.exists(path):
                removed.append(Path(path))
            continue
        try:
            os.unlink(path)
        except OSError:
            continue  # gone already, or cannot remove it now (permissions): try again next time
        removed.append(Path(path))
    return sorted(removed)


_DISK_FULL = (
    "no space left on device",
    "database or disk is full",
    "disk quota exceeded",
    "not enough space on the disk",
)


def describe_os_error(exc: BaseException, path: Path | str | None = None, action: str = "writing") -> str:
    """A one-line description of a failed file operation for people: "disk full (no space left on
    device) while writing <path>", "permission denied while writing <path>" (also for a read-only
    file system), else the OS message with the path. Understands errors other libraries wrap
    (SQLite's "database or disk is full", DuckDB's and polars' messages)."""
    if isinstance(exc, DamagedFileError):
        return str(exc)
    path = path if path is not None else getattr(exc, "filename", None)
    where = f" {path}" if path not in (None, "") else ""
    chain, seen, e = [], set(), exc
    while e is not None and id(e) not in seen:  # the error and what caused it
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    codes = {getattr(e, "errno", None) for e in chain} - {None}
    text = " ".join(str(e) for e in chain).lower()
    sqlite_full = any(getattr(e, "sqlite_errorcode", None) == 13 for e in chain)  # SQLITE_FULL
    if codes & {errno.ENOSPC, getattr(errno, "EDQUOT", -1)} or sqlite_full or any(m in text for m in _DISK_FULL):
        return f"disk full (no space left on device) while {action}{where}"
    if errno.EROFS in codes or "read-only file system" in text:
        return f"permission denied while {action}{where} (read-only file system)"
    if codes & {errno.EACCES, errno.EPERM} or "permission denied" in text:
        return f"permission denied while {action}{where}"
    message = getattr(exc, "strerror", None) or _short(exc, 300) or type(exc).__name__
    return f"{message}:{where}" if where and str(path) not in message else message


class ParquetBundle:
    """Tables published together: each table is a Parquet file whose name carries the generation it
    was written in, and a manifest (written last, atomically) names the current file of every
    table. A reader following the manifest never mixes two generations; a crash before the
    manifest leaves the previous generation in force; files no manifest names are removed.
    Tables not rewritten in a generation keep their file, so an update costs only what changed.
    """

    def __init__(self, folder: Path, name: str):
        self.folder = Path(folder)
        self.name = name
        self.manifest_path = self.folder / f"{name}.manifest.json"

    def manifest(self, *, present: bool = True) -> dict | None:
        """The manifest in force (None when missing or damaged); with `present`, None also when a
        file it names is missing (without: a caller that stats every file anyway)."""
        try:
            data = read_json(self.manifest_path)
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("tables"), dict):
            return None
        if present and not all((self.folder / f).exists() for f in data["tables"].values()):
            return None
        return data

    def path(self, manifest: dict, table: str) -> Path:
        """The file that holds `table` in the generation `manifest` names."""
        return self.folder / manifest["tables"][table]

    def read(self, manifest: dict, table: str, *, remember: bool = False) -> pl.DataFrame:
        """remember: see read_parquet (a table prefetched into the table memo is taken from it)."""
        path = self.path(manifest, table)
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, "a table of the manifest is missing", str(path))
        return read_parquet(path, remember=remember)

    def read_all(self, manifest: dict, tables: list[str], *, remember: bool = False) -> list[pl.DataFrame]:
        """`read` of each of `tables`, two at a time (polars decodes without holding the GIL: the
        merged graph's nodes and edges are read side by side)."""
        if len(tables) < 2:
            return [self.read(manifest, t, remember=remember) for t in tables]
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="bundle-read") as pool:
            return list(pool.map(lambda t: self.read(manifest, t, remember=remember), tables))

    def write(
        self,
        tables: dict[str, pl.DataFrame],
        *,
        previous: dict | None = None,
        drop: set[str] = frozenset(),
        remember: Collection[str] = (),
        **extra,
    ) -> dict:
        """Write `tables`, keep the other tables of `previous` (except those in `drop`), publish.
        remember: tables later stages read again (kept in the table memo when it is on)."""
        generation = int((previous or {}).get("generation", 0)) + 1
        files = {k: v for k, v in ((previous or {}).get("tables") or {}).items() if k not in drop and k not in tables}
        names = {table: f"{self.name}.{table}.g{generation}.parquet" for table in tables}
        # two files at a time (polars encodes without holding the GIL): the merged graph's nodes and
        # edges are most of an update's bytes; the manifest below is written once all are whole
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="bundle-write") as pool:
            write = lambda t: write_parquet(tables[t], self.folder / names[t], remember=t in remember)  # noqa: E731
            for _ in pool.map(write, list(tables)):
                pass
        files.update(names)
        return self._publish(generation, files, extra)

    def link(self, sources: dict[str, Path], *, previous: dict | None = None, check=None, **extra) -> dict:
        """Publish exactly the tables `sources` (table -> a Parquet file elsewhere, e.g. another
        bundle's), each as a hard link (copy_file); a table whose file in `previous` already is
        that file (same device and inode) keeps it: an update links only the tables that changed.
        check: called on each source linked anew, before anything is published (raises to stop)."""
        generation = int((previous or {}).get("generation", 0)) + 1
        old = (previous or {}).get("tables") or {}
        fresh = {}
        files = {}
        for table, source in sources.items():
            kept = old.get(table)
            here = stat_identity(self.folder / kept) if kept is not None else None
            there = stat_identity(source)
            if here is not None and there is not None and here[:2] == there[:2]:
                files[table] = kept
            else:
                fresh[table] = source
        if check is not None:
            for source in fresh.values():
                check(source)
        for table, source in fresh.items():
            files[table] = f"{self.name}.{table}.g{generation}.parquet"
            copy_file(source, self.folder / files[table])
        return self._publish(generation, files, extra)

    def _publish(self, generation: int, files: dict[str, str], extra: dict) -> dict:
        """Write the manifest naming `files` (written last), then remove the files it does not name."""
        manifest = {"generation": generation, "tables": files, **extra}
        write_json(manifest, self.manifest_path)
        live = set(files.values())
        for f in self.folder.glob(f"{self.name}.*.g*.parquet"):
            if f.name not in live:
                if TABLES.enabled:  # a superseded table (e.g. prefetched) is not read again
                    TABLES.forget([TABLES.identity(f)])
                f.unlink(missing_ok=True)
        return manifest
