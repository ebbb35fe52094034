"""A GRAPHRAG_HOME on object storage (``s3://bucket/prefix``), worked on through a local copy.

Every stage keeps reading and writing a local folder, the *scratch* (GRAPHRAG_SCRATCH), and this
module moves whole objects between the scratch and the bucket at step boundaries (no Dagster here):

    sync = RemoteHome("s3://bucket/kb", Path("/tmp/scratch"))
    sync.pull()   # download what changed remotely since this scratch last synced (by ETag)
    ...           # the step computes on sync.scratch, as on a local home
    sync.push()   # upload what changed locally (one PUT per object), tables before manifests

The file system is fsspec's ``s3`` (s3fs); botocore reads the credentials and the region from the
usual AWS variables, and the endpoint is AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL when set.
Credentials never enter a message, a log line or a file.

The sync record (``.sync/record.sqlite`` in the scratch) says, for every file this scratch has
in common with the bucket, the object's ETag and the local file's size and mtime when they were
last equal. Pulls and pushes on one scratch take a file lock, so two step processes on one
machine can share it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

SCHEMES = ("s3", "s3a")  # what RemoteHome serves (fsspec's s3 file system)
SYNC_DIR = ".sync"  # in the scratch: the sync record and its lock (never pushed)
SINGLE_PUT_BYTES = 100 * 2**20  # below this a file is one put_object (s3fs: 2 x its 50 MiB part size)
_WORKERS = 8
_PULL_ATTEMPTS = 5


class RemoteHomeError(Exception):
    """The bucket cannot be used (missing, access denied, endpoint unreachable): one line naming
    the URL and what to do, never a credential."""


class _NoBucket(Exception):
    pass


class _Vanished(Exception):
    """An object listed by a pull was deleted before it was downloaded (a push elsewhere replaced it)."""


def is_remote(home: str | os.PathLike | None) -> bool:
    """Is ``home`` a URL of object storage (a scheme other than file, e.g. ``s3://bucket/prefix``)?"""
    if home is None or isinstance(home, Path):
        return False
    scheme = urlsplit(str(home).strip()).scheme.lower()
    return len(scheme) > 1 and scheme != "file"  # one letter: a Windows drive


def normalize_url(url: str) -> str:
    """``s3://bucket/prefix`` without trailing slashes; ValueError for a URL RemoteHome cannot serve."""
    parts = urlsplit(str(url).strip())
    if parts.scheme.lower() not in SCHEMES:
        raise ValueError(f"only s3:// URLs are supported for a home on object storage, got {parts.scheme}://")
    if not parts.netloc or parts.username or parts.password or "@" in parts.netloc:
        raise ValueError("expected s3://bucket/prefix (a bucket, no credentials in the URL)")
    prefix = parts.path.strip("/")
    return f"s3://{parts.netloc}" + (f"/{prefix}" if prefix else "")


def endpoint_url(env=None) -> str | None:
    env = os.environ if env is None else env
    return (env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or "").strip() or None


def is_synced(rel: str) -> bool:
    """Is this path of the scratch (relative, with /) part of the home on object storage? Never:
    temporary files of atomic writes, the Dagster instance folder, the build lock (per machine),
    the LLM cache and usage ledger (SQLite, per machine), the spare of the search index (a local
    copy kept for the next publish: index/duckdb_spare) and the sync record itself."""
    from graphrag_pipeline.index.duckdb_spare import is_spare_name
    from graphrag_pipeline.storage.files import is_temp_file_name

    parts = rel.split("/")
    if parts[0] in ("dagster", "cache", SYNC_DIR) or rel == "state/build.lock":
        return False
    return not any(is_temp_file_name(p) or is_spare_name(p) for p in parts)


def _push_rank(rel: str) -> int:
    """Upload order: data files first, then the JSON files that point at them (bundle manifests,
    per-partition info files, state), so a reader elsewhere never follows one to a missing object."""
    return 1 if rel.endswith(".json") else 0


def _secrets(env=None) -> list[str]:
    env = os.environ if env is None else env
    return [v for v in (env.get("AWS_SECRET_ACCESS_KEY"), env.get("AWS_SESSION_TOKEN")) if v]


def _redact(text: str) -> str:
    for secret in _secrets():
        text = text.replace(secret, "***")
    return text


@dataclass
class SyncReport:
    downloaded: list[str] = field(default_factory=list)
    uploaded: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)  # locally (pull) or remotely (push)

    def __str__(self) -> str:
        return f"{len(self.downloaded)} downloaded, {len(self.uploaded)} uploaded, {len(self.deleted)} deleted"


class RemoteHome:
    """The bucket side of a home and its local working copy ``scratch``."""

    def __init__(self, url: str, scratch: Path | str, fs=None):
        self.url = normalize_url(url)
        self.root = self.url.split("://", 1)[1]
        self.bucket = self.root.split("/", 1)[0]
        self.scratch = Path(scratch)
        self._fs = fs
        self.snapshot: dict[str, tuple[int, int]] | None = None  # local files after the last pull/push

    # -- the file system -------------------------------------------------------------------------
    @property
    def fs(self):
        if self._fs is None:
            try:
                import fsspec
            except ImportError:  # pragma: no cover - the s3 extra
                raise RemoteHomeError(
                    f"{self.url}: a home on object storage needs s3fs: pip install 'graphrag-pipeline[s3]'"
                ) from None
            options = {"skip_instance_cache": True, "config_kwargs": {"connect_timeout": 10, "read_timeout": 60}}
            if endpoint_url():
                options["endpoint_url"] = endpoint_url()
            self._fs = fsspec.filesystem("s3", **options)
        return self._fs

    def _key(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def _error(self, exc: BaseException, action: str) -> RemoteHomeError:
        where = self.url + (f" (endpoint {endpoint_url()})" if endpoint_url() else "")
        if isinstance(exc, PermissionError):
            what = "access denied: check the AWS credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE) "
            what += "and that they may list, read and write this bucket"
        elif isinstance(exc, _NoBucket):
            what = f"the bucket {self.bucket} does not exist: create it, or fix GRAPHRAG_HOME"
        elif isinstance(exc, FileNotFoundError):
            what = f"an object vanished while {action} ({exc}): another writer? run the command again"
        else:
            name = type(exc).__name__
            text = " ".join(str(exc).split())[:200]
            what = f"{name}: {text}; check the endpoint (AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL) and the network"
        return RemoteHomeError(_redact(f"cannot use the home {where} while {action}: {what}"))

    def check_bucket(self) -> None:
        """RemoteHomeError when the bucket is missing, forbidden or the endpoint does not answer."""
        try:
            self.fs.call_s3("head_bucket", Bucket=self.bucket)
        except Exception as exc:  # noqa: BLE001 - said as one line
            if isinstance(exc, FileNotFoundError):
                exc = _NoBucket()
            raise self._error(exc, "opening the bucket") from None

    def list_remote(self) -> dict[str, dict]:
        """Every object under the prefix: relative path -> {"etag", "size"}."""
        self.check_bucket()
        try:
            self.fs.invalidate_cache()
            found = self.fs.find(self.root, detail=True, withdirs=False)
        except Exception as exc:  # noqa: BLE001
            raise self._error(exc, "listing it") from None
        out = {}
        for path, info in found.items():
            rel = path[len(self.root) + 1 :] if path.startswith(self.root + "/") else None
            if not rel or rel.endswith("/") or info.get("type") == "directory":
                continue
            out[rel] = {"etag": str(info.get("ETag") or info.get("etag") or ""), "size": int(info.get("size") or 0)}
        return out

    # -- the local side --------------------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        folder = self.scratch / SYNC_DIR
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / "sync.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # one pull or push per scratch at a time
            db = sqlite3.connect(folder / "record.sqlite", timeout=60)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute(
                    "CREATE TABLE IF NOT EXISTS synced (path TEXT PRIMARY KEY, etag TEXT NOT NULL, "
                    "size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL)"
                )
                with db:
                    yield db
            finally:
                db.close()
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def local_files(self) -> dict[str, tuple[int, int]]:
        """Every synced file of the scratch: relative path -> (size, mtime_ns)."""
        out: dict[str, tuple[int, int]] = {}
        if not self.scratch.is_dir():
            return out
        base = str(self.scratch)
        for folder, dirs, files in os.walk(base):
            rel_dir = os.path.relpath(folder, base).replace(os.sep, "/")
            rel_dir = "" if rel_dir == "." else rel_dir + "/"
            dirs[:] = [d for d in dirs if is_synced(rel_dir + d)]
            for name in files:
                rel = rel_dir + name
                if not is_synced(rel):
                    continue
                try:
                    st = os.stat(os.path.join(folder, name))
                except FileNotFoundError:
                    continue
                out[rel] = (st.st_size, st.st_mtime_ns)
        return out

    @staticmethod
    def _record(db: sqlite3.Connection) -> dict[str, tuple[str, int, int]]:
        return {p: (e, s, m) for p, e, s, m in db.execute("SELECT path, etag, size, mtime_ns FROM synced")}

    # -- pull and push ---------------------------------------------------------------------------
    def pull(self, only: tuple[str, ...] | None = None) -> SyncReport:
        """Download every object whose ETag differs from the record (or that is missing here),
        each to a temporary name renamed into place; remove local files synced before that are gone
        remotely; leave files made here and never pushed alone. Keeps a snapshot of the local files.
        ``only``: just the paths under these prefixes (e.g. ``("index/",)`` for a reader)."""
        from graphrag_pipeline.storage.files import atomic_path

        def wanted_path(rel: str) -> bool:
            return is_synced(rel) and (only is None or rel.startswith(only))

        for attempt in range(_PULL_ATTEMPTS):
            try:
                return self._pull(wanted_path, atomic_path)
            except _Vanished:
                # a push elsewhere replaced what was listed (a new generation, then its old files deleted):
                # list again, so the copy never holds a manifest without its tables
                if attempt == _PULL_ATTEMPTS - 1:
                    raise self._error(FileNotFoundError("objects kept vanishing"), "downloading") from None
                time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    def _pull(self, wanted_path, atomic_path) -> SyncReport:
        report = SyncReport()
        remote = {rel: info for rel, info in self.list_remote().items() if wanted_path(rel)}
        self.scratch.mkdir(parents=True, exist_ok=True)
        with self._locked() as db:
            record = {rel: row for rel, row in self._record(db).items() if wanted_path(rel)}
            local = self.local_files()
            wanted = [
                rel
                for rel, info in remote.items()
                if rel not in local or rel not in record or record[rel][0] != info["etag"]
            ]

            def get(rel: str) -> tuple[str, int, int]:
                target = self.scratch / rel
                try:
                    with atomic_path(target) as tmp:
                        self.fs.get_file(self._key(rel), str(tmp))
                except FileNotFoundError as exc:
                    if str(self.scratch) in str(getattr(exc, "filename", "") or ""):
                        raise
                    raise _Vanished(rel) from None
                st = target.stat()
                return rel, st.st_size, st.st_mtime_ns

            try:
                for rank in (0, 1):  # data files before the JSON files naming them, as pushed
                    batch = sorted(rel for rel in wanted if _push_rank(rel) == rank)
                    with ThreadPoolExecutor(_WORKERS) as pool:
                        for rel, size, mtime_ns in pool.map(get, batch):
                            db.execute(
                                "INSERT OR REPLACE INTO synced VALUES (?, ?, ?, ?)",
                                (rel, remote[rel]["etag"], size, mtime_ns),
                            )
                            report.downloaded.append(rel)
            except (RemoteHomeError, _Vanished):
                raise
            except Exception as exc:  # noqa: BLE001
                if isinstance(exc, OSError) and not isinstance(exc, (PermissionError, FileNotFoundError)):
                    if getattr(exc, "filename", None) and str(self.scratch) in str(exc.filename):
                        raise  # the local disk: the caller says it (disk full, read-only)
                raise self._error(exc, "downloading") from None
            for rel, (_etag, size, mtime_ns) in record.items():
                if rel in remote:
                    continue
                if local.get(rel) == (size, mtime_ns):  # unchanged here since synced: deleted remotely
                    (self.scratch / rel).unlink(missing_ok=True)
                    report.deleted.append(rel)
                db.execute("DELETE FROM synced WHERE path = ?", (rel,))
            self.snapshot = self.local_files()
        return report

    def push(self) -> SyncReport:
        """Upload every local file that is new or changed since it was last synced (one PUT per
        object below SINGLE_PUT_BYTES), data files before the JSON files that name them; then
        delete remotely the files deleted here since this process's last pull or push."""
        report = SyncReport()
        self.check_bucket()
        with self._locked() as db:
            record = self._record(db)
            local = self.local_files()
            changed = [rel for rel, st in local.items() if rel not in record or record[rel][1:] != st]
            gone = [rel for rel in (self.snapshot or {}) if rel not in local]

            def put(rel: str) -> tuple[str, str, tuple[int, int]]:
                path = self.scratch / rel
                st = local[rel]
                if st[0] < SINGLE_PUT_BYTES:
                    body = path.read_bytes()
                    etag = self.fs.call_s3(
                        "put_object", Bucket=self.bucket, Key=self._key(rel)[len(self.bucket) + 1 :], Body=body
                    )["ETag"]
                else:  # s3fs uploads it in parts: the object appears whole when the upload completes
                    self.fs.put_file(str(path), self._key(rel))
                    etag = self.fs.info(self._key(rel))["ETag"]
                return rel, str(etag), st

            try:
                for rank in (0, 1):
                    batch = sorted(rel for rel in changed if _push_rank(rel) == rank)
                    with ThreadPoolExecutor(_WORKERS) as pool:
                        for rel, etag, st in pool.map(put, batch):
                            now = (self.scratch / rel).stat()
                            if (now.st_size, now.st_mtime_ns) == st:  # else changed meanwhile: next push
                                db.execute("INSERT OR REPLACE INTO synced VALUES (?, ?, ?, ?)", (rel, etag, *st))
                            report.uploaded.append(rel)
                if gone:
                    self.fs.rm([self._key(rel) for rel in sorted(gone)])
            except FileNotFoundError as exc:
                if getattr(exc, "filename", None):
                    raise  # a local file vanished
                raise self._error(exc, "uploading") from None
            except Exception as exc:  # noqa: BLE001
                if isinstance(exc, OSError) and str(self.scratch) in str(getattr(exc, "filename", "") or ""):
                    raise
                raise self._error(exc, "uploading") from None
            for rel in gone:
                db.execute("DELETE FROM synced WHERE path = ?", (rel,))
                report.deleted.append(rel)
            self.fs.invalidate_cache()
            self.snapshot = self.local_files()
        return report


def ephemeral_scratch() -> Path:
    """A fresh, empty working copy for one process or step (GRAPHRAG_SCRATCH=ephemeral)."""
    return Path(tempfile.mkdtemp(prefix="graphrag-scratch-"))


def remove_scratch(scratch: Path) -> None:
    shutil.rmtree(scratch, ignore_errors=True)
